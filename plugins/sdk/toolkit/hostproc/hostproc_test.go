//go:build unix

package hostproc_test

import (
	"bytes"
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/hostproc"
)

// A command killed by a signal is reported with the signal's name, when
// hostproc waits for it and when a wrapper stays between them (here a
// shell that runs the command as its child and exits with its status, as
// nsenter, bwrap and kubectl exec do).
func TestKilledCommandStatus(t *testing.T) {
	const kills = `sh -c 'kill -USR1 $$'`
	for _, tc := range []struct {
		name string
		argv []string
		run  func(context.Context, *exec.Cmd, sdk.ExecIO, time.Duration) (sdk.ExitStatus, error)
		want sdk.ExitStatus
	}{
		{"Direct", []string{"sh", "-c", "kill -USR1 $$"}, hostproc.Run, sdk.ExitStatus{Code: 138, Signal: "USR1"}},
		{"WrapperWithRun", []string{"sh", "-c", kills + "; exit $?"}, hostproc.Run, sdk.ExitStatus{Code: 138}},
		{"WrapperWithRunWrapped", []string{"sh", "-c", kills + "; exit $?"}, hostproc.RunWrapped, sdk.ExitStatus{Code: 138, Signal: "USR1"}},
		{"WrapperKilledItself", []string{"sh", "-c", "kill -TERM $$"}, hostproc.RunWrapped, sdk.ExitStatus{Code: 143, Signal: "TERM"}},
		{"WrappedExitCode", []string{"sh", "-c", "sh -c 'exit 3'; exit $?"}, hostproc.RunWrapped, sdk.ExitStatus{Code: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			st, err := tc.run(t.Context(), exec.Command(tc.argv[0], tc.argv[1:]...), sdk.ExecIO{Stderr: &stderr}, time.Second)
			if err != nil || st != tc.want {
				t.Errorf("%q: %+v, %v (stderr %q); want %+v", tc.argv, st, err, stderr.String(), tc.want)
			}
		})
	}
}

func TestWrappedStatus(t *testing.T) {
	for _, tc := range []struct {
		in, want sdk.ExitStatus
	}{
		{sdk.ExitStatus{}, sdk.ExitStatus{}},
		{sdk.ExitStatus{Code: 1}, sdk.ExitStatus{Code: 1}},
		{sdk.ExitStatus{Code: 128}, sdk.ExitStatus{Code: 128}},
		{sdk.ExitStatus{Code: 137}, sdk.ExitStatus{Code: 137, Signal: "KILL"}},
		{sdk.ExitStatus{Code: 143, Canceled: true}, sdk.ExitStatus{Code: 143, Signal: "TERM", Canceled: true}},
		{sdk.ExitStatus{Code: 143, Signal: "TERM"}, sdk.ExitStatus{Code: 143, Signal: "TERM"}},
		{sdk.ExitStatus{Code: 255}, sdk.ExitStatus{Code: 255}},
	} {
		if got := hostproc.WrappedStatus(tc.in); got != tc.want {
			t.Errorf("WrappedStatus(%+v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
