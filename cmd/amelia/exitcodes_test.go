package main_test

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// The exit codes docs/commands.md lists, each reached through the real
// amelia: 0 done, 1 failed, 2 refused before anything started (a usage
// error, a config or profile that cannot be used, a check the run failed, a
// key that is not set), 130 interrupted, and a sandbox command's own code.
func TestExitCodes(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{},
		// The run that fails: the model refuses its first request.
		llmtest.Turn{Status: 400, Error: "model not available"},
		// The run that is interrupted, waiting at the gate.
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(g.command())}},
		llmtest.Turn{Text: "interrupted"},
	)
	// A profile its provider refuses before anything starts: ssh cannot
	// take a machine's network away without enforce_egress. The host is
	// never reached.
	h.addProfileYAML(t, "  fenced:\n    llm: {api_key_env: AMELIA_E2E_KEY}\n    sandbox: {provider: ssh, network: none, ssh: {host: build-1.test}}\n")
	for _, c := range []struct {
		name   string
		args   []string
		noKey  bool
		code   int
		stderr string // part of what amelia says
	}{
		{"done", []string{"run", "--workflow", "done", "--model", "scripted:echo", "say hello"}, true, 0, ""},
		{"failed", []string{"run", "--workflow", "failed", "do it"}, false, 1, "model not available"},
		{"unknown flag", []string{"run", "--no-such-flag", "do it"}, false, 2, "unknown flag: --no-such-flag"},
		{"no task", []string{"run", "--workflow", "x"}, false, 2, "no task"},
		{"bad workflow id", []string{"run", "--workflow", "../x", "do it"}, false, 2, "--workflow"},
		{"unknown profile", []string{"run", "-p", "nosuch", "do it"}, false, 2, `profile "nosuch" not found`},
		{"unknown provider", []string{"run", "--sandbox", "nosuch", "do it"}, false, 2, `no provider named "nosuch"`},
		{"profile check", []string{"run", "-p", "fenced", "do it"}, false, 2, "needs enforce_egress: iptables"},
		{"key not set", []string{"run", "--workflow", "keyless", "do it"}, true, 2, "AMELIA_E2E_KEY is not set"},
		{"bad script", []string{"run", "--model", "scripted:/no/such/script.json", "do it"}, true, 2, "/no/such/script.json"},
		{"sandbox command", []string{"sandbox", "exec", "--", "sh", "-c", "exit 7"}, false, 7, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := slices.Clone(h.env) // withoutKey deletes in place
			if c.noKey {
				h.withoutKey()
				defer func() { h.env = env }()
			}
			r := h.amelia(t, c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.stderr) {
				t.Errorf("amelia %s: exit %d, stderr %q; want %d and %q", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.stderr)
			}
		})
	}
	t.Run("interrupted", func(t *testing.T) {
		r := h.startUntil(t, g.path, "run", "--json", "--workflow", "interrupted", "wait at the gate")
		if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := r.wait(t, "Ctrl-C"); code != 130 {
			t.Errorf("exit %d after Ctrl-C, want 130; stderr: %s", code, r.stderr.String())
		}
	})
}
