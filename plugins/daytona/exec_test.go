package daytona_test

import (
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Every command runs through the worker the provider put into the
// sandbox; one removed behind its back is put back when the next command
// session starts, and the command runs.
func TestWorkerReinstalled(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, nil)
	p := newProvider(t)
	sb, err := p.EnsureRunning(t.Context(), spec("worker", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, p, sb.Ref, `ls "$HOME/.amelia/bin"; rm -f "$HOME"/.amelia/bin/amelia-worker-*`)
	if err != nil || !strings.HasPrefix(out, "amelia-worker-") {
		t.Fatalf("the installed worker: %q %v", out, err)
	}
	// The running session keeps its worker; a new one finds none.
	f.DropConnections()
	out, st, err := run(t, p, sb.Ref, `echo again; ls "$HOME/.amelia/bin"`)
	if err != nil || st.Code != 0 || !strings.HasPrefix(out, "again\namelia-worker-") {
		t.Errorf("after the worker was removed: %q %+v %v", out, st, err)
	}
}
