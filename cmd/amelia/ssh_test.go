package main_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
)

// End-to-end tests of amelia on the ssh provider, against a real sshd on
// loopback: the sandbox lives in a directory of the "remote", the LLM is
// reached through the SSH forward or, where the server refuses
// forwarding, the exec tunnel.

// sshSandbox is the e2e profile's sandbox block for srv, with root as the
// sandboxes' directory.
func sshSandbox(t *testing.T, srv *sshtest.Server, root string) string {
	block, _ := json.Marshal(map[string]any{
		"host":           srv.Host,
		"port":           srv.Port,
		"user":           srv.User,
		"identity_files": []string{srv.ClientKey},
		"known_hosts":    srv.KnownHosts,
		"root":           root,
		"ssh_config":     filepath.Join(t.TempDir(), "no-config"),
	})
	return fmt.Sprintf("{provider: ssh, ssh: %s}", block)
}

// tunnelProbe says whether an exec tunnel serves this sandbox: a worker
// running `tunnel` with the sandbox's directory in its environment.
const tunnelProbe = `for p in /proc/[0-9]*; do
  if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'amelia-worker-[0-9a-f]* tunnel' && grep -qzxF "AMELIA_SANDBOX_DIR=$AMELIA_SANDBOX_DIR" $p/environ 2>/dev/null; then echo TUNNEL-EXEC; fi
done; echo PROBED; ls "$AMELIA_SANDBOX_DIR/bin"`

func TestRunOnSSH(t *testing.T) {
	for _, c := range []struct {
		name       string
		opts       sshtest.Options
		execTunnel bool
	}{
		{name: "reverse-forward"},
		{name: "forwarding refused", opts: sshtest.Options{NoForwarding: true}, execTunnel: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := sshtest.Start(t, c.opts)
			root := t.TempDir()
			h := newHostWith(t, sshSandbox(t, srv, root), root, llmtest.Options{},
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("remote.txt", "written on the remote\n")}},
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(tunnelProbe)}},
				llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
			)
			t.Cleanup(func() { h.amelia(t, "sandbox", "down") })
			r := h.amelia(t, "run", "--json", "--sandbox", "ssh", "--workflow", "remote", "Write remote.txt.")
			if r.code != 0 {
				t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
			}
			if got := h.git(t, "show", "amelia/remote:remote.txt"); got != "written on the remote" {
				t.Errorf("remote.txt on the branch: %q", got)
			}
			for i, req := range h.up.Requests() {
				if got := req.Header.Get("Authorization"); got != "Bearer "+upstreamKey {
					t.Errorf("LLM request %d: Authorization %q, want the host's key", i, got)
				}
			}
			var probed string
			for _, ev := range events(t, r.stdout) {
				if ev.Type == "tool_result" && ev.ToolOutput != nil && strings.Contains(*ev.ToolOutput, "PROBED") {
					probed = *ev.ToolOutput
				}
			}
			if got := strings.Contains(probed, "TUNNEL-EXEC"); got != c.execTunnel || !strings.Contains(probed, "PROBED") {
				t.Errorf("exec tunnel in use = %v, want %v; probe said:\n%s", got, c.execTunnel, probed)
			}
			if !strings.Contains(probed, "amelia-worker-") {
				t.Errorf("the worker is not in the sandbox's bin/:\n%s", probed)
			}
			if strings.Contains(r.stdout+r.stderr, upstreamKey) {
				t.Error("the upstream key appears in amelia's output")
			}
			assertNoSecret(t, upstreamKey, root)
		})
	}
}
