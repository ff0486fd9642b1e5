package daytonatest

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// TestIdealGateway checks the escape hatch, Options.IdealGateway, which
// tests use to set the realistic gateway's faults aside: a clean SSH
// server whose commands lead their own session and process group, with
// stderr, exit-status and exit-signal, and nothing but exec.
func TestIdealGateway(t *testing.T) {
	t.Parallel()
	forEachBackend(t, Options{IdealGateway: true}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		sb, _ := e.started(t, api.CreateSandbox{})
		c := e.login(t, sb.ID)

		if r := run(t, c, "echo hello; echo oops >&2; exit 3", ""); r.stdout != "hello\n" || r.stderr != "oops\n" || r.code != 3 {
			t.Errorf("echo: %+v", r)
		}
		// The command leads its own session and process group.
		r := run(t, c, `echo $$; awk '{print $5; print $6}' /proc/$$/stat`, "")
		if f := strings.Fields(r.stdout); len(f) != 3 || f[0] != f[1] || f[0] != f[2] {
			t.Errorf("pid, pgid, sid: %q (stderr %q)", r.stdout, r.stderr)
		}
		// A command killed by a signal: exit-signal on the host; in Docker,
		// whose exec reports only a code, 128+N.
		r = run(t, c, "echo before; kill -TERM $$", "")
		if f.Container(sb.ID) == "" {
			if r.signal != "TERM" || r.stdout != "before\n" {
				t.Errorf("host: %+v, want signal TERM", r)
			}
		} else if r.code != 128+15 {
			t.Errorf("docker: %+v, want code 143", r)
		}

		// Sessions: env, pty, shell are refused.
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Setenv("A", "B"); err == nil {
			t.Errorf("env request accepted")
		}
		if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err == nil {
			t.Errorf("pty-req accepted")
		}
		if err := s.Shell(); err == nil {
			t.Errorf("shell accepted")
		}
		s.Close()
		if _, err := c.Dial("tcp", "127.0.0.1:1"); err == nil {
			t.Errorf("direct-tcpip channel accepted")
		}
		if ln, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
			ln.Close()
			t.Errorf("tcpip-forward accepted")
		}
		if st := f.Stats(); st.Execs != 3 || st.Sessions != 4 || st.Channels != 4 || st.Logins != 1 {
			t.Errorf("stats: %+v", st)
		}
	})
}

// TestGatewayRefuses checks the logins the gateway refuses, and dropped
// connections.
func TestGatewayRefuses(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{StartDelay: 20 * time.Millisecond, ExitStatusLoss: -1})
	e := newEnv(t, f)
	ctx := context.Background()
	sb, _ := e.started(t, api.CreateSandbox{})

	// The known_hosts line names the gateway's key.
	kh := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(kh, []byte(f.KnownHostsLine()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cb, err := knownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	tok := e.token(t, sb.ID)
	c, err := ssh.Dial("tcp", f.GatewayAddr(), &ssh.ClientConfig{User: tok, HostKeyCallback: cb})
	if err != nil {
		t.Fatalf("dial with known_hosts: %v", err)
	}
	if r := run(t, c, "echo ok", ""); r.stdout != "ok\n" {
		t.Errorf("exec: %+v", r)
	}

	refused(t, f, "nosuchtoken", "an unknown token")

	// Expiry does not end open connections, but ends logins.
	f.ExpireTokens()
	refused(t, f, tok, "an expired token")
	if r := run(t, c, "echo still", ""); r.stdout != "still\n" {
		t.Errorf("exec on a connection opened before expiry: %+v", r)
	}

	revoked := e.token(t, sb.ID)
	if err := e.c.RevokeSSHAccess(ctx, sb.ID, revoked); err != nil {
		t.Fatal(err)
	}
	refused(t, f, revoked, "a revoked token")

	// DropConnections breaks an open client in the middle of an exec.
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	s.Stdout = io.Discard
	if err := s.Start("sleep 60"); err != nil {
		t.Fatal(err)
	}
	f.DropConnections()
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("an exec survived DropConnections")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("DropConnections left the exec running")
	}
	// The connection itself ends.
	if !endsWithin(c, refusalWait) {
		t.Errorf("the dropped connection was still up after %s", refusalWait)
	}

	// A valid token of a stopped sandbox is refused; started again, it
	// logs in. A connection made before the stop opens channels, which
	// close at once: nothing behind the gateway serves them.
	fresh := e.token(t, sb.ID)
	before := e.login(t, sb.ID)
	// The gateway checks a login after the handshake, as Daytona's does:
	// a session that ran proves before's login was taken before the stop.
	if r := run(t, before, "true", ""); r.code != 0 {
		t.Fatalf("before the stop: %+v", r)
	}
	f.StopSandbox(sb.ID)
	refused(t, f, fresh, "a token of a stopped sandbox")
	if s, err := before.NewSession(); err == nil {
		if err := s.Run("true"); err == nil {
			t.Errorf("a session ran a command in a stopped sandbox")
		}
	}
	if _, err := e.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, sb.ID, api.StateStarted)
	if r := run(t, e.login(t, sb.ID), "echo back", ""); r.stdout != "back\n" {
		t.Errorf("after restart: %+v", r)
	}
	// Revoked: tok by the next token (a new token revokes the sandbox's
	// others, as on Daytona), revoked by hand, fresh by before's login,
	// and before's by the last login's.
	if st := f.Stats(); st.RefusedLogins != 4 || st.Logins != 3 || st.TokensRevoked != 4 {
		t.Errorf("stats: %+v", st)
	}
}

// TestTokenTTL: Options.TokenTTL replaces expiresInMinutes.
func TestTokenTTL(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{StartDelay: time.Millisecond, TokenTTL: 300 * time.Millisecond})
	e := newEnv(t, f)
	sb, _ := e.started(t, api.CreateSandbox{})
	a, err := e.c.CreateSSHAccess(context.Background(), sb.ID, 60)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(a.ExpiresAt); d > 300*time.Millisecond {
		t.Errorf("expires in %v", d)
	}
	// The clock is what expires it: wait until its expiry has passed.
	time.Sleep(time.Until(a.ExpiresAt) + time.Millisecond)
	refused(t, f, a.Token, "a token past TokenTTL")
}

// TestLifecycle: stopping a sandbox kills its processes and keeps its
// files; deleting it removes it.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, Options{ExitStatusLoss: -1}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		ctx := context.Background()
		sb, _ := e.started(t, api.CreateSandbox{NetworkBlockAll: true, Labels: map[string]string{"a": "b"}})
		mark := "1000." + strconv.Itoa(int(time.Now().UnixNano()%1000000))
		c := e.login(t, sb.ID)
		r := run(t, c, "echo kept > file; (sleep "+mark+" >/dev/null 2>&1 &); sleep "+mark+" >/dev/null 2>&1 & echo started", "")
		if r.stdout != "started\n" {
			t.Fatalf("start a background sleep: %+v", r)
		}
		count := "ps -eo args | grep -c '[s]leep " + mark + "'; true"
		if r := run(t, c, count, ""); strings.TrimSpace(r.stdout) == "0" {
			t.Fatalf("no background sleep: %+v", r)
		}
		if _, err := e.c.StopSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		e.waitState(t, sb.ID, api.StateStopped)
		if _, err := e.c.StartSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		e.waitState(t, sb.ID, api.StateStarted)
		c = e.login(t, sb.ID)
		if r := run(t, c, "cat file; "+count, ""); r.stdout != "kept\n0\n" {
			t.Errorf("after restart: %+v", r)
		}

		cid := f.Container(sb.ID)
		if o := f.opts; o.Docker != nil {
			insp, err := o.Docker.ContainerInspect(ctx, cid, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if insp.Container.HostConfig.NetworkMode != "none" || insp.Container.Config.Labels[labelKey] != f.id {
				t.Errorf("container: network %s, labels %v", insp.Container.HostConfig.NetworkMode, insp.Container.Config.Labels)
			}
		}
		if err := e.c.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		e.waitState(t, sb.ID, api.StateDestroyed)
		if o := f.opts; o.Docker != nil {
			if _, err := o.Docker.ContainerInspect(ctx, cid, client.ContainerInspectOptions{}); err == nil {
				t.Errorf("container %s survived the delete", cid)
			}
		}
	})
}

// TestExternalGateway checks what a harness that runs Daytona's real
// gateway against the fake needs: no gateway of the fake's, SSH accesses
// that name the external one, containers named by their sandbox's id (as
// the runner's SSH hop looks them up) and a main process of its choosing
// (Daytona's daemon).
func TestExternalGateway(t *testing.T) {
	t.Parallel()
	// Stands for the real gateway; the test never speaks to it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cli := dockertest.Engine(t)
	main := []string{"sh", "-c", "echo main > /tmp/main; exec sleep infinity"}
	f := Start(t, Options{Docker: cli, ExternalGateway: ln.Addr().String(), Command: main})
	if f.GatewayAddr() != ln.Addr().String() || f.HostKey() != nil || f.KnownHostsLine() != "" {
		t.Errorf("gateway %s, host key %v, known_hosts %q", f.GatewayAddr(), f.HostKey(), f.KnownHostsLine())
	}
	e := newEnv(t, f)
	ctx := context.Background()
	sb, _ := e.started(t, api.CreateSandbox{})

	a, err := e.c.CreateSSHAccess(ctx, sb.ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if want := "ssh -p " + port + " " + a.Token + "@127.0.0.1"; a.SSHCommand != want {
		t.Errorf("sshCommand %q, want %q", a.SSHCommand, want)
	}

	insp, err := cli.ContainerInspect(ctx, sb.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect the container by the sandbox's id: %v", err)
	}
	c := insp.Container
	if c.Name != "/"+sb.ID || !slices.Equal(c.Config.Cmd, main) || c.Config.Labels[labelKey] != f.id || c.ID != f.Container(sb.ID) {
		t.Errorf("container %s: name %s, cmd %q, labels %v", c.ID, c.Name, c.Config.Cmd, c.Config.Labels)
	}
	// The environment Daytona's runner gives a sandbox, which its daemon
	// needs.
	if !slices.Contains(c.Config.Env, "DAYTONA_SANDBOX_ID="+sb.ID) || !slices.Contains(c.Config.Env, "DAYTONA_SANDBOX_USER=daytona") {
		t.Errorf("container environment %q lacks the runner's DAYTONA_SANDBOX_*", c.Config.Env)
	}
	// The main process ran, and the fake started no daemon of its own:
	// the external gateway's chain brings one.
	res, err := e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "cat /tmp/main; ps -eo args | grep -c '[d]aytonatest-daemon'; true"})
	if err != nil || res.Result != "main\n0\n" {
		t.Errorf("in the container: %+v, %v", res, err)
	}
}
