package main_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// An agent makes as many model calls as the profile's max_turns allows,
// or amelia run --max-turns, which wins; one that reaches the limit
// without a final answer fails saying how to raise it, by the flag or the
// key.
func TestRunMaxTurns(t *testing.T) {
	h := newHost(t, llmtest.Options{Script: func(i int, _ *llmtest.Request) llmtest.Turn {
		// Never a final answer: always one more tool call.
		return llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall(fmt.Sprintf("turn-%d.txt", i), "x\n")}}
	}})
	h.addProfileYAML(t, "    max_turns: 3\n")
	for _, tc := range []struct {
		name  string
		flags []string
		calls int
	}{
		{"the profile's", nil, 3},
		{"the flag's", []string{"--max-turns", "2"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.up.Requests())
			args := append(append([]string{"run", "--json"}, tc.flags...), "--workflow", fmt.Sprintf("turns-%d", tc.calls), "Never stop.")
			r := h.amelia(t, args...)
			if calls := len(h.up.Requests()) - before; calls != tc.calls {
				t.Errorf("the agent made %d model calls, want %d", calls, tc.calls)
			}
			want := fmt.Sprintf("the agent failed: stopped after %d turns without a final answer: raise the limit (amelia run --max-turns N, or the profile's max_turns) or narrow the task", tc.calls)
			if r.code != 1 || !strings.Contains(r.stdout, want) {
				t.Errorf("exit %d; want 1 and a summary saying %q:\n%s%s", r.code, want, r.stdout, r.stderr)
			}
		})
	}

	before := len(h.up.Requests())
	for _, n := range []string{"0", "10001", "many"} {
		r := h.amelia(t, "run", "--max-turns", n, "--workflow", "refused", "Never stop.")
		if r.code != 2 || !strings.Contains(r.stderr, "--max-turns") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("--max-turns %s: exit %d, stderr %q; want 2 and one line about --max-turns", n, r.code, r.stderr)
		}
	}
	if calls := len(h.up.Requests()) - before; calls != 0 {
		t.Errorf("refused runs made %d model calls", calls)
	}
}
