package main_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// The agent runs the project's tests, which leave __pycache__ behind: the
// branch gets the agent's work without it, and the run says what it left
// out and how to keep it; with commit_build_outputs: true it goes in.
func TestRunLeavesBuildOutputsOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		profile string // lines added to the profile
		kept    bool
	}{
		{name: "default"},
		{name: "opted out", profile: "    commit_build_outputs: true\n", kept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHost(t, llmtest.Options{},
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("calc.py", "def add(a, b):\n    return a + b\n")}},
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall("mkdir -p __pycache__ .pytest_cache && echo c >__pycache__/calc.cpython-311.pyc && echo v >.pytest_cache/v")}},
				llmtest.Turn{Text: "Added calc.py; its tests pass."},
			)
			h.addProfileYAML(t, tc.profile)
			r := h.amelia(t, "run", "--json", "--workflow", "calc", "add calc.py")
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			files := strings.Split(h.git(t, "ls-tree", "-r", "--name-only", "amelia/calc"), "\n")
			has := func(f string) bool { return slices.Contains(files, f) }
			if !has("calc.py") {
				t.Errorf("calc.py is not on the branch: %q", files)
			}
			if got := has("__pycache__/calc.cpython-311.pyc") && has(".pytest_cache/v"); got != tc.kept {
				t.Errorf("build outputs on the branch: %v, want %v: %q", got, tc.kept, files)
			}
			const said = "amelia: left out of amelia/calc, as build and cache outputs: .pytest_cache/, __pycache__/ (profile key commit_build_outputs: true keeps them)\n"
			if got := strings.Contains(r.stderr, said); got == tc.kept {
				t.Errorf("stderr says what was left out: %v, want %v:\n%s", got, !tc.kept, r.stderr)
			}
		})
	}
}
