package ssh_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// The test binary doubles as the plugin: launched by go-plugin (which sets
// the handshake cookie), it serves the SSH provider instead of testing.
func TestMain(m *testing.M) {
	if os.Getenv(sdk.Handshake.MagicCookieKey) != "" {
		sdk.Serve(ssh.New(ssh.Options{Version: "test"}))
		return
	}
	os.Exit(m.Run())
}

// settings are a profile's ssh block for srv, with the sandboxes in a
// fresh directory and no ~/.ssh/config of the user's in the way.
func settings(t *testing.T, srv *sshtest.Server, extra map[string]any) json.RawMessage {
	t.Helper()
	s := map[string]any{
		"host":           srv.Host,
		"port":           srv.Port,
		"user":           srv.User,
		"identity_files": []string{srv.ClientKey},
		"known_hosts":    srv.KnownHosts,
		"root":           t.TempDir(),
		"ssh_config":     filepath.Join(t.TempDir(), "no-config"),
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
func launch(t *testing.T) *sdk.Plugin {
	t.Helper()
	p, err := sdk.Launch(pluginCommand(), sdk.LaunchOptions{Name: "ssh"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// up starts a sandbox through the plugin and tears it down at the end.
func up(t *testing.T, p *sdk.Plugin, name string, settings json.RawMessage) sdk.Sandbox {
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
func run(t *testing.T, p *sdk.Plugin, ref sdk.SandboxRef, script string) string {
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

	if err := p.Forward(t.Context(), sdk.ForwardRequest{Sandbox: sb.Ref, Target: "10.0.0.1:80"}, func(string) {}); !errors.Is(err, sdk.ErrInvalid) {
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
