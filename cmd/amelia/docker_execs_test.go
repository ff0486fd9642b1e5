package main_test

import (
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// TestDockerRunEngineExecs: a run on a warm docker sandbox asks the
// engine for four execs of its own — the hold that keeps the sandbox
// awake until its work is back, the session as the run's uid, the
// agent's tunnel, and the step that ends the uid's processes — and, as
// its run directory holds a handful of entries, no sweeper: end-uid
// removes that directory itself (from inside .amelia/runs, which the uid
// may write but not read). Each engine exec costs the engine a runc and
// shim start, which twenty runs at once pay twenty times.
func TestDockerRunEngineExecs(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"), llmtest.Turn{Text: "warm"}, llmtest.Turn{Text: "done"})
	if r := h.amelia(t, "run", "--json", "--workflow", "warm", "warm up"); r.code != 0 {
		t.Fatalf("the first run: exit %d: %s", r.code, r.stderr)
	}
	container := "amelia-sandbox-" + h.sandboxName(t, "e2e")
	f := make(client.Filters).Add("type", "container").Add("container", container).Add("event", "exec_create")
	events := cli.Events(t.Context(), client.EventsListOptions{Filters: f})

	if r := h.amelia(t, "run", "--json", "--workflow", "counted", "count the execs"); r.code != 0 {
		t.Fatalf("the counted run: exit %d: %s", r.code, r.stderr)
	}
	// An exec of the test's own marks the end of the run's in the stream.
	marker, err := cli.ExecCreate(t.Context(), container, client.ExecCreateOptions{Cmd: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	var execs []string
	for {
		select {
		case ev := <-events.Messages:
			if ev.Actor.Attributes["execID"] == marker.ID {
				if len(execs) > 4 || strings.Contains(strings.Join(execs, "\n"), "step sweep") {
					t.Errorf("the run made %d engine execs, want 4 and no sweeper:\n%s", len(execs), strings.Join(execs, "\n"))
				}
				return
			}
			// The provider's wrapper script, then the command: keep that.
			action := string(ev.Action)
			execs = append(execs, action[strings.LastIndex(action, "\n")+1:])
		case err := <-events.Err:
			t.Fatalf("the engine's events: %v", err)
		}
	}
}
