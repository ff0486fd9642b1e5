package stack

import (
	"slices"
	"testing"

	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Once the watchdog runs, the stack's commands run through `amelia-worker
// activity`, with the lifetime directory named for it; the worker's own
// commands, which count themselves, and everything before, are left as
// they are.
func TestAsActivity(t *testing.T) {
	const worker, dir = "/opt/amelia-worker", "/workspace/.amelia/lifetime"
	var s Stack
	cmd := sdk.ExecRequest{Argv: []string{"git", "status"}, Env: map[string]string{"A": "1"}}
	if got := s.asActivity(cmd); !slices.Equal(got.Argv, cmd.Argv) {
		t.Errorf("before the watchdog: %v", got.Argv)
	}
	s.activity.Store(&activityWrap{worker: worker, dir: dir})
	got := s.asActivity(cmd)
	if want := []string{worker, "activity", "--", "git", "status"}; !slices.Equal(got.Argv, want) {
		t.Errorf("argv %v, want %v", got.Argv, want)
	}
	if got.Env[lifetime.EnvDir] != dir || got.Env["A"] != "1" {
		t.Errorf("env %v", got.Env)
	}
	if _, ok := cmd.Env[lifetime.EnvDir]; ok {
		t.Error("the caller's env map was changed")
	}
	own := sdk.ExecRequest{Argv: []string{worker, "mux"}}
	if got := s.asActivity(own); !slices.Equal(got.Argv, own.Argv) || got.Env != nil {
		t.Errorf("the worker's own command became %v %v", got.Argv, got.Env)
	}
}
