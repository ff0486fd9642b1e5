package ssh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// The test binary doubles as the plugin: launched by go-plugin (which sets
// the handshake cookie), it serves the SSH provider instead of testing.
func TestMain(m *testing.M) {
	if sdktest.LaunchedAsPlugin() {
		sdk.Serve(ssh.New(ssh.Options{Version: "test"}))
		return
	}
	os.Exit(m.Run())
}

// settings are a profile's ssh block for srv, with the sandboxes in a
// fresh directory and no ~/.ssh/config of the user's in the way.
func settings(t *testing.T, srv *sshtest.Server, extra map[string]any) json.RawMessage {
	t.Helper()
	return settingsFor(srv, t.TempDir(), filepath.Join(t.TempDir(), "no-config"), extra)
}

func settingsFor(srv *sshtest.Server, root, sshConfig string, extra map[string]any) json.RawMessage {
	s := map[string]any{
		"host":           srv.Host,
		"port":           srv.Port,
		"user":           srv.User,
		"identity_files": []string{srv.ClientKey},
		"known_hosts":    srv.KnownHosts,
		"root":           root,
		"ssh_config":     sshConfig,
	}
	for k, v := range extra {
		s[k] = v
	}
	b, _ := json.Marshal(s)
	return b
}

func pluginCommand() *exec.Cmd { return exec.Command(os.Args[0]) }

func TestConformance(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	sdktest.Run(t, sdktest.Config{
		Command:  pluginCommand,
		Settings: settings(t, srv, nil),
	})
}

// launch starts the provider as a plugin subprocess for the test.
func launch(t *testing.T) *pluginclient.Plugin {
	t.Helper()
	p, err := pluginclient.Launch(pluginCommand(), pluginclient.LaunchOptions{Name: "ssh"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// up starts a sandbox through the plugin and tears it down at the end.
func up(t *testing.T, p *pluginclient.Plugin, name string, settings json.RawMessage) sdk.Sandbox {
	t.Helper()
	sb, err := p.EnsureRunning(t.Context(), sdk.Spec{SandboxRef: sdk.SandboxRef{Name: name, Config: settings}, Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}})
	if err != nil {
		t.Fatalf("EnsureRunning: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})
	return sb
}

// run runs a shell script in the sandbox and returns its stdout.
func run(t *testing.T, p *pluginclient.Plugin, ref sdk.SandboxRef, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"bash", "-c", script}}, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	if err != nil || st.Code != 0 {
		t.Fatalf("exec %q: %+v %v\nstderr: %s", script, st, err, errb.String())
	}
	return out.String()
}

// Forward listens on the remote's loopback and connects to the host; a
// server without forwarding, or a profile asking for the exec tunnel, says
// ErrUnsupported.
func TestForward(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	p := launch(t)
	sb := up(t, p, "fwd", settings(t, srv, nil))
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hello from the host\n"))
			c.Close()
		}
	}()

	ctx, cancel := context.WithCancel(t.Context())
	listening := make(chan string, 1)
	ended := make(chan error, 1)
	go func() {
		ended <- p.Forward(ctx, sdk.ForwardRequest{Sandbox: sb.Ref, Target: host.Addr().String()}, func(addr string) { listening <- addr })
	}()
	var addr string
	select {
	case addr = <-listening:
	case err := <-ended:
		t.Fatalf("Forward: %v", err)
	}
	h, port, _ := net.SplitHostPort(addr)
	if h != "127.0.0.1" {
		t.Errorf("the forward listens on %s, want the remote's loopback", addr)
	}
	if got := run(t, p, sb.Ref, "exec 3<>/dev/tcp/127.0.0.1/"+port+"; cat <&3"); got != "hello from the host\n" {
		t.Errorf("through the forward: %q", got)
	}
	cancel()
	if err := <-ended; err != nil {
		t.Errorf("Forward after cancel: %v, want nil", err)
	}

	if err := p.Forward(t.Context(), sdk.ForwardRequest{Sandbox: sb.Ref, Target: "192.0.2.1:80"}, func(string) {}); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("Forward to a non-loopback target: %v, want invalid", err)
	}
	exec := up(t, p, "fwd-exec", settings(t, srv, map[string]any{"proxy_transport": "exec-tunnel"}))
	if err := p.Forward(t.Context(), sdk.ForwardRequest{Sandbox: exec.Ref, Target: host.Addr().String()}, func(string) {}); !errors.Is(err, sdk.ErrUnsupported) {
		t.Errorf("Forward with proxy_transport exec-tunnel: %v, want ErrUnsupported", err)
	}
	closed := sshtest.Start(t, sshtest.Options{NoForwarding: true})
	no := up(t, p, "fwd-refused", settings(t, closed, nil))
	if err := p.Forward(t.Context(), sdk.ForwardRequest{Sandbox: no.Ref, Target: host.Addr().String()}, func(string) {}); !errors.Is(err, sdk.ErrUnsupported) || !strings.Contains(err.Error(), "refuses port forwarding") {
		t.Errorf("Forward on a server without forwarding: %v, want ErrUnsupported", err)
	}
}

// A dropped connection ends the command that ran on it with a clear error;
// the next command connects again.
func TestDroppedConnection(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	p := launch(t)
	sb := up(t, p, "drop", settings(t, srv, nil))
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "echo running; exec sleep 600"}}, sdk.ExecIO{Stdout: outW})
		outW.Close()
		done <- err
	}()
	line := make([]byte, 8)
	if _, err := io.ReadFull(outR, line); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, outR)
	srv.KillSessions()
	err := <-done
	if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "the connection dropped while the command ran") {
		t.Errorf("Exec whose connection dropped: %v", err)
	}
	if got := run(t, p, sb.Ref, "echo again"); got != "again\n" {
		t.Errorf("the next exec: %q", got)
	}
}

// With MaxSessions 2, eight commands at once all succeed.
func TestMaxSessionsEightExecs(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{MaxSessions: 2})
	p := launch(t)
	sb := up(t, p, "sessions", settings(t, srv, nil))
	var wg sync.WaitGroup
	results := make([]string, 8)
	errs := make([]error, 8)
	for i := range results {
		wg.Go(func() {
			var out bytes.Buffer
			st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", fmt.Sprintf("sleep 0.5; echo %d", i)}}, sdk.ExecIO{Stdout: &out})
			if err == nil && st.Code != 0 {
				err = fmt.Errorf("exit %+v", st)
			}
			results[i], errs[i] = out.String(), err
		})
	}
	wg.Wait()
	for i := range results {
		if errs[i] != nil || results[i] != fmt.Sprintf("%d\n", i) {
			t.Errorf("exec %d: %q, %v", i, results[i], errs[i])
		}
	}
}

// A Host alias of the ssh config is resolved (HostName, Port, User,
// IdentityFile), and its ProxyJump is gone through.
func TestSSHConfigAliasAndJump(t *testing.T) {
	jump := sshtest.Start(t, sshtest.Options{})
	target := sshtest.Start(t, sshtest.Options{})
	dir := t.TempDir()
	known := filepath.Join(dir, "known_hosts")
	a, _ := os.ReadFile(jump.KnownHosts)
	b, _ := os.ReadFile(target.KnownHosts)
	if err := os.WriteFile(known, append(a, b...), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`Host box
  HostName %s
  Port %d
  User %s
  IdentityFile %s
  ProxyJump bastion

Host bastion
  HostName %s
  Port %d
  User %s
  IdentityFile %s
`, target.Host, target.Port, target.User, target.ClientKey, jump.Host, jump.Port, jump.User, jump.ClientKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	settings, _ := json.Marshal(map[string]any{"host": "box", "known_hosts": known, "ssh_config": config, "root": t.TempDir()})
	p := launch(t)
	sb := up(t, p, "alias", settings)
	if got := run(t, p, sb.Ref, "echo through $AMELIA_SANDBOX"); got != "through alias\n" {
		t.Errorf("exec through the alias and the jump host: %q", got)
	}
	if !strings.Contains(sb.Details["host"], fmt.Sprintf(":%d", target.Port)) {
		t.Errorf("the sandbox is on %s, want the alias's port %d", sb.Details["host"], target.Port)
	}
}

// The provider refuses an unknown host under strict with the line to add,
// records it under accept-new, and refuses a changed key.
func TestHostKeyPolicies(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	p := launch(t)
	known := filepath.Join(t.TempDir(), "known_hosts")
	strict := settings(t, srv, map[string]any{"known_hosts": known})
	spec := sdk.Spec{SandboxRef: sdk.SandboxRef{Name: "keys", Config: strict}, Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}}
	if _, err := p.EnsureRunning(t.Context(), spec); !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "is not known") || !strings.Contains(err.Error(), "add this line to "+known) {
		t.Errorf("unknown host under strict: %v", err)
	}
	spec.Config = settings(t, srv, map[string]any{"known_hosts": known, "host_key_policy": "accept-new"})
	sb, err := p.EnsureRunning(t.Context(), spec)
	if err != nil {
		t.Fatalf("unknown host under accept-new: %v", err)
	}
	t.Cleanup(func() { p.Teardown(context.Background(), sb.Ref) })
	if b, _ := os.ReadFile(known); !strings.Contains(string(b), strings.TrimSpace(string(gossh.MarshalAuthorizedKey(srv.HostKey)))) {
		t.Errorf("accept-new did not record the key: %q", b)
	}
	srv.ChangeHostKey()
	fresh := launch(t) // a new connection sees the new key
	if _, err := fresh.EnsureRunning(t.Context(), spec); !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "REMOTE HOST IDENTIFICATION HAS CHANGED") {
		t.Errorf("changed host key: %v", err)
	}
}

// Network allowlist and none are refused before anything starts, unless
// the profile has the machine enforce them.
func TestNetworkPolicyRefused(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	p := launch(t)
	root := t.TempDir()
	for _, mode := range []sdk.NetworkMode{sdk.NetworkNone, sdk.NetworkAllowlist} {
		_, err := p.EnsureRunning(t.Context(), sdk.Spec{SandboxRef: sdk.SandboxRef{Name: "fenced", Config: settings(t, srv, map[string]any{"root": root})}, Network: sdk.NetworkPolicy{Mode: mode}})
		if !errors.Is(err, sdk.ErrUnsupported) || !strings.Contains(err.Error(), fmt.Sprintf("ssh.enforce_egress: network %q needs enforce_egress: iptables", mode)) {
			t.Errorf("network %s: %v", mode, err)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("a refused sandbox left %v", entries)
	}
}

// A key with a passphrase works through the ssh-agent SSH_AUTH_SOCK names
// in the plugin's environment (amelia's own).
func TestAgentAuth(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	key := filepath.Join(t.TempDir(), "id_locked")
	srv.Authorize(sshtest.Keygen(t, key, "open sesame"))
	agent := sshtest.StartAgent(t, key, "open sesame")
	cmd := pluginCommand()
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+agent.Socket)
	p, err := pluginclient.Launch(cmd, pluginclient.LaunchOptions{Name: "ssh"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	sb := up(t, p, "agent", settings(t, srv, map[string]any{"identity_files": []string{key}}))
	if got := run(t, p, sb.Ref, "echo via the agent"); got != "via the agent\n" {
		t.Errorf("exec: %q", got)
	}
}
