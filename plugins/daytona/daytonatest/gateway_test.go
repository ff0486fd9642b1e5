package daytonatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
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

// TestGatewayExec checks exec over the gateway: output streams, exit
// codes, stdin, environment, sessions, big binary streams.
func TestGatewayExec(t *testing.T) {
	t.Parallel()
	forEachBackend(t, Options{}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		sb, _ := e.started(t, api.CreateSandbox{Env: map[string]string{"FOO": "bar baz"}})
		c := e.login(t, sb.ID)

		if r := run(t, c, "echo hello; echo oops >&2; exit 3", ""); r.stdout != "hello\n" || r.stderr != "oops\n" || r.code != 3 {
			t.Errorf("echo: %+v", r)
		}
		if r := run(t, c, "true", ""); r.code != 0 || r.stdout != "" {
			t.Errorf("true: %+v", r)
		}
		home := f.Home(sb.ID)
		want := fmt.Sprintf("%s|%s|daytona|/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin|C.UTF-8|bar baz\n", home, home)
		if r := run(t, c, `echo "$(pwd)|$HOME|$USER|$PATH|$LANG|$FOO"`, ""); r.stdout != want {
			t.Errorf("environment: %q, want %q", r.stdout, want)
		}
		if r := run(t, c, "cat", "round trip\x00\xff"); r.stdout != "round trip\x00\xff" {
			t.Errorf("stdin round trip: %q", r.stdout)
		}

		// The command leads its own session and process group.
		r := run(t, c, `echo $$; awk '{print $5; print $6}' /proc/$$/stat`, "")
		if f := strings.Fields(r.stdout); len(f) != 3 || f[0] != f[1] || f[0] != f[2] {
			t.Errorf("pid, pgid, sid: %q (stderr %q)", r.stdout, r.stderr)
		}

		// stdin's EOF ends cat.
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		in, _ := s.StdinPipe()
		var out bytes.Buffer
		s.Stdout = &out
		if err := s.Start("cat; echo done"); err != nil {
			t.Fatal(err)
		}
		io.WriteString(in, "abc")
		in.Close()
		if err := s.Wait(); err != nil || out.String() != "abcdone\n" {
			t.Errorf("cat until EOF: %q, %v", out.String(), err)
		}

		// A big binary stream both ways, never held whole by the fake.
		const size = 64 << 20
		s, err = c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		inH, outH := sha256.New(), sha256.New()
		s.Stdin = io.TeeReader(io.LimitReader(rand.Reader, size), inH)
		var n countWriter
		s.Stdout = io.MultiWriter(outH, &n)
		if err := s.Run("cat"); err != nil || n != size || !bytes.Equal(inH.Sum(nil), outH.Sum(nil)) {
			t.Errorf("64 MiB through cat: %d bytes, %v", n, err)
		}

		// Sessions: env, pty, shell and subsystem are refused.
		s, err = c.NewSession()
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
		if st := f.Stats(); st.Execs < 7 || st.Logins != 1 || st.TokensIssued != 1 {
			t.Errorf("stats: %+v", st)
		}
	})
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// TestGatewaySignal: a command killed by a signal on the host backend
// ends with exit-signal; in Docker with 128+N.
func TestGatewaySignal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, Options{}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		sb, _ := e.started(t, api.CreateSandbox{})
		r := run(t, e.login(t, sb.ID), "echo before; kill -TERM $$", "")
		if r.stdout != "before\n" {
			t.Errorf("output: %q", r.stdout)
		}
		if f.Container(sb.ID) == "" {
			if r.signal != "TERM" {
				t.Errorf("host: %+v, want signal TERM", r)
			}
		} else if r.code != 128+15 {
			t.Errorf("docker: %+v, want code 143", r)
		}
	})
}

// TestGatewayRefuses checks the logins the gateway refuses, and dropped
// connections.
func TestGatewayRefuses(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{StartDelay: 20 * time.Millisecond})
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
	if _, err := c.NewSession(); err == nil {
		t.Errorf("a dropped connection opened a session")
	}

	// A valid token of a stopped sandbox is refused; started again, it
	// logs in.
	fresh := e.token(t, sb.ID)
	f.StopSandbox(sb.ID)
	refused(t, f, fresh, "a token of a stopped sandbox")
	if _, err := e.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, sb.ID, api.StateStarted)
	if r := run(t, e.login(t, sb.ID), "echo back", ""); r.stdout != "back\n" {
		t.Errorf("after restart: %+v", r)
	}
	if st := f.Stats(); st.RefusedLogins != 4 || st.Logins != 2 || st.TokensRevoked != 1 {
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
	forEachBackend(t, Options{}, func(t *testing.T, f *Fake) {
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
	// The main process ran.
	res, err := e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "cat /tmp/main"})
	if err != nil || res.Result != "main\n" {
		t.Errorf("in the container: %+v, %v", res, err)
	}
}
