package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/reachtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
)

// End-to-end tests of amelia on the ssh provider, against a real sshd on
// loopback: the sandbox lives in a directory of the "remote", the LLM is
// reached through the SSH forward or, where the server refuses
// forwarding, the exec tunnel.

// sshSandbox is the e2e profile's sandbox block for srv, with root as the
// sandboxes' directory.
func sshSandbox(t testing.TB, srv *sshtest.Server, root string) string {
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

// tunnelProbe says whether the agent's tunnel is carried by an exec: a
// worker running `tunnel --run` with the sandbox's directory in its
// environment.
const tunnelProbe = `for p in /proc/[0-9]*; do
  if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'amelia-worker-[0-9a-f]* tunnel --run' && grep -qzxF "AMELIA_SANDBOX_DIR=$AMELIA_SANDBOX_DIR" $p/environ 2>/dev/null; then echo TUNNEL-EXEC; fi
done; echo PROBED; ls "$AMELIA_SANDBOX_DIR/bin"`

// The agent's tunnel is its supervisor's, carried by an exec, whether or
// not the server allows forwarding (which only a URL's clone and push
// use).
func TestRunOnSSH(t *testing.T) {
	for _, c := range []struct {
		name string
		opts sshtest.Options
	}{
		{name: "forwarding allowed"},
		{name: "forwarding refused", opts: sshtest.Options{NoForwarding: true}},
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
			probed := toolOutput(t, r.stdout, "PROBED")
			if !strings.Contains(probed, "TUNNEL-EXEC") || !strings.Contains(probed, "PROBED") {
				t.Errorf("no exec carries the agent's tunnel; probe said:\n%s", probed)
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

// amelia run on another machine: sshd in a Docker container on its own
// network address, logged in to as an unprivileged user, with network none
// enforced by the provider's iptables rules (which the egress check then
// confirms from inside) and the proxy reached through the agent's tunnel,
// carried over the SSH connection.
func TestRunOnSSHContainer(t *testing.T) {
	cli := dockertest.Engine(t)
	remote := sshtest.StartContainer(t, cli)
	// A listener of the host's on the remote's network: root there reaches
	// it, the sandbox must not.
	outside := reachtest.Listen(t, remote.Gateway)
	if out := dockerExec(t, cli, remote.Container, "bash", "-c", "exec 3<>/dev/tcp/"+outside.DevTCP()+" && echo reached"); out != "reached\n" {
		t.Fatalf("root on the remote does not reach the host's listener %s: %q", outside.Addr(), out)
	}
	outside.Next(t)
	block, _ := json.Marshal(map[string]any{
		"host":           remote.Host,
		"port":           remote.Port,
		"user":           remote.User,
		"identity_files": []string{remote.ClientKey},
		"known_hosts":    remote.KnownHosts,
		"ssh_config":     filepath.Join(t.TempDir(), "no-config"),
		"enforce_egress": "iptables",
	})
	h := newHostWith(t, fmt.Sprintf("{provider: ssh, network: none, egress_check_targets: [%q], ssh: %s}", outside.Addr(), block), "", llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("far.txt", "written far away\n")}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(`id -un; pwd; ` + probe(outside.DevTCP()) + "\n" + tunnelProbe)}},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
	)
	r := h.amelia(t, "run", "--json", "--workflow", "far", "Write far.txt.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	if got := h.git(t, "show", "amelia/far:far.txt"); got != "written far away" {
		t.Errorf("far.txt on the branch: %q", got)
	}
	if !strings.Contains(r.stdout, `{"type":"phase","content":"egress","status":"done"`) {
		t.Error("no egress check before the agent ran")
	}
	probed := toolOutput(t, r.stdout, "PROBED")
	if !strings.HasPrefix(probed, "amelia\n/home/amelia/.amelia/sandboxes/"+h.sandboxName(t, "e2e")+"/workspace/worktrees/far\n") {
		t.Errorf("the agent did not run as amelia in the sandbox under the remote's ~/.amelia/sandboxes:\n%s", probed)
	}
	if strings.Contains(probed, "REACHED") || !strings.Contains(probed, "UNREACHABLE "+outside.DevTCP()) || outside.Accepted() != 1 || !strings.Contains(probed, "TUNNEL-EXEC") {
		t.Errorf("the sandbox reached the host's listener directly (%d connections, 1 of them root's), or no exec carried the agent's tunnel:\n%s", outside.Accepted(), probed)
	}
	if rules := dockerExec(t, cli, remote.Container, "iptables", "-S", "OUTPUT"); !strings.Contains(rules, "--uid-owner 1000 -j AMELIA_EGRESS_1000") {
		t.Errorf("the remote's OUTPUT chain has no rule for the sandbox user:\n%s", rules)
	}
	if strings.Contains(r.stdout+r.stderr, upstreamKey) {
		t.Error("the upstream key appears in amelia's output")
	}
}

// dockerExec runs argv as root in a container and returns its output.
func dockerExec(t *testing.T, cli *client.Client, id string, argv ...string) string {
	t.Helper()
	x, err := cli.ExecCreate(t.Context(), id, client.ExecCreateOptions{Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	att, err := cli.ExecAttach(t.Context(), x.ID, client.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer att.Close()
	var out bytes.Buffer
	stdcopy.StdCopy(&out, &out, att.Reader)
	return out.String()
}

// The SSH connection drops mid-run (sshd's session processes die): the
// agent goes on on the remote, amelia reconnects, carries the tunnel its
// supervisor kept again, and the run delivers all of its work.
func TestRunOnSSHSurvivesADrop(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	root := t.TempDir()
	g := newGate(t)
	h := newHostWith(t, sshSandbox(t, srv, root), root, llmtest.Options{}, gatedTurns(g)...)
	t.Cleanup(func() { h.amelia(t, "sandbox", "down") })
	h.survivesFault(t, g, "dropped", "reopening it", func(*running) { srv.KillSessions() })
}

// kill -9 of the host process mid-run on ssh: amelia attach takes over.
func TestAttachOnSSH(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	root := t.TempDir()
	g := newGate(t)
	h := newHostWith(t, sshSandbox(t, srv, root), root, llmtest.Options{}, gatedTurns(g)...)
	t.Cleanup(func() { h.amelia(t, "sandbox", "down") })
	h.attachAfterHostDied(t, g, "orphan")
}

// Ctrl-C on ssh stops the agent and all it started on the remote.
func TestInterruptOnSSH(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	root := t.TempDir()
	g := newGate(t)
	h := newHostWith(t, sshSandbox(t, srv, root), root, llmtest.Options{}, gatedTurns(g)...)
	t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
	h.interruptedKillsAll(t, g, "stop-me")
}
