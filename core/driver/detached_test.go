package driver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// cuttingExec is a connection that breaks: the stdout of its next follow
// exec stops after cut bytes, the middle of a line, and the exec fails as
// a dropped transport does.
type cuttingExec struct {
	sandboxexec.Execer
	cut int
}

func (c *cuttingExec) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if c.cut == 0 || len(req.Argv) < 2 || req.Argv[1] != "follow" {
		return c.Execer.Exec(ctx, req, eio)
	}
	cut := c.cut
	c.cut = 0
	pr, pw := io.Pipe()
	done := make(chan struct{})
	stdout := eio.Stdout
	go func() {
		defer close(done)
		io.Copy(stdout, io.LimitReader(pr, int64(cut)))
		pr.CloseWithError(errors.New("cut"))
	}()
	eio.Stdout = pw
	c.Execer.Exec(ctx, req, eio)
	pw.Close()
	<-done
	return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnavailable, "the connection dropped")
}

// A detached agent runs to its end whatever happens to following it: a
// connection cut in the middle of a line gives ErrDisconnected, and
// following again resumes with that line; every message comes once.
func TestFollowAgenticResumesAfterACut(t *testing.T) {
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{Name: "execute", Arguments: `{"command": "echo one"}`}}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{Name: "execute", Arguments: `{"command": "echo two"}`}}},
		llmtest.Turn{Text: "done"},
	)
	sb := newRealSandbox(t)
	cut := &cuttingExec{Execer: sb}
	d := sb.driverFor(srv)
	d.Exec = cut
	dir := filepath.Join(t.TempDir(), "run")
	run, err := d.StartAgentic(t.Context(), driver.AgenticRequest{
		Workflow: workflowID(t), Prompt: "count", Cwd: t.TempDir(), Model: "m",
	}, dir, driver.DetachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Everything the run writes, from a follow that nothing cuts.
	var all []string
	for m, err := range d.FollowAgentic(t.Context(), &driver.Detached{Dir: dir}) {
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, string(m.Type))
	}

	cut.cut = 150 // past the first line, inside the second
	var got []string
	var errs []error
	for range 2 {
		for m, err := range d.FollowAgentic(t.Context(), run) {
			if err != nil {
				errs = append(errs, err)
				break
			}
			got = append(got, string(m.Type))
		}
	}
	if len(errs) != 1 || !errors.Is(errs[0], driver.ErrDisconnected) {
		t.Errorf("errors %v, want one ErrDisconnected for the cut", errs)
	}
	if strings.Join(got, " ") != strings.Join(all, " ") {
		t.Errorf("messages across the cut: %v, want each of the run's once: %v", got, all)
	}
	if u := d.Usage(); u == nil {
		t.Error("no usage after the resumed follow")
	}
	if all[len(all)-1] != string(protocol.Result) || run.Seen != len(all)+1 { // + the usage line
		t.Errorf("seen %d lines of %d messages ending %s", run.Seen, len(all), all[len(all)-1])
	}
}

// With PrivateHome the agent's HOME and TMPDIR are its own, 0700 in its
// run directory; without, it keeps the sandbox's.
func TestStartAgenticPrivateHome(t *testing.T) {
	for _, private := range []bool{false, true} {
		t.Run(fmt.Sprint(private), func(t *testing.T) {
			srv := llmtest.New(t,
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{{Name: "execute", Arguments: `{"command": "echo \"home=$HOME tmp=${TMPDIR:-unset}\"; stat -c %a \"$HOME\""}`}}},
				llmtest.Turn{Text: "done"},
			)
			sb := newRealSandbox(t)
			d := sb.driverFor(srv)
			dir := filepath.Join(t.TempDir(), "run")
			run, err := d.StartAgentic(t.Context(), driver.AgenticRequest{
				Workflow: workflowID(t), Prompt: "where", Cwd: t.TempDir(), Model: "m",
			}, dir, driver.DetachOptions{PrivateHome: private})
			if err != nil {
				t.Fatal(err)
			}
			var out string
			for m, err := range d.FollowAgentic(t.Context(), run) {
				if err != nil {
					t.Fatal(err)
				}
				if m.Type == protocol.ToolResult && m.ToolOutput != nil {
					out = *m.ToolOutput
				}
			}
			own := "home=" + dir + "/" + driver.HomeDir + " tmp=" + dir + "/" + driver.TmpDir + "\n700"
			if got := strings.Contains(out, own); got != private {
				t.Errorf("PrivateHome %v: the agent's command said %q", private, out)
			}
		})
	}
}
