package daytonatest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// The gateway as Daytona's real chain behaves (see the package comment),
// one behaviour a test, on both backends. Unless a test is about the
// exit-status, it turns its loss off (ExitStatusLoss: -1) so that its
// assertions hold every time.

// noLoss is Options for tests that need every exit-status.
func noLoss() Options { return Options{ExitStatusLoss: -1} }

// TestGatewayExec checks what the realistic gateway keeps of a command:
// stdout, exit codes, stdin to its EOF, the sandbox's environment, big
// binary streams.
func TestGatewayExec(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		sb, _ := e.started(t, api.CreateSandbox{Env: map[string]string{"FOO": "bar baz"}})
		c := e.login(t, sb.ID)

		if r := run(t, c, "echo hello; exit 3", ""); r.stdout != "hello\n" || r.code != 3 {
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

		// The client's EOF on stdin reaches the command.
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
		if st := f.Stats(); st.Execs != 6 || st.Logins != 1 || st.TokensIssued != 1 {
			t.Errorf("stats: %+v", st)
		}
	})
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// TestGatewayDropsStderr: stderr never reaches the client, and still
// counts against the channel window, so once a window's worth is unread
// the command's output stops (stdout too) until the session ends.
func TestGatewayDropsStderr(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		c := loginToNew(t, f)

		// Under the window: stdout and the exit code arrive, stderr not.
		under := DefaultWindow - 64<<10
		r := run(t, c, fmt.Sprintf("echo out; echo err >&2; head -c %d /dev/zero >&2; echo end; exit 3", under), "")
		if r.stdout != "out\nend\n" || r.stderr != "" || r.code != 3 {
			t.Errorf("under the window: stdout %q, stderr %d bytes, code %d", r.stdout, len(r.stderr), r.code)
		}
		if st := f.Stats(); st.StderrDropped != under+4 || st.Stalls != 0 {
			t.Errorf("stats after %d bytes of stderr: %+v", under+4, st)
		}

		// Over it: the command hangs, its stdout with it. (Well over it:
		// in Docker, the engine's own buffers take some more before the
		// command blocks.)
		over := DefaultWindow + 16<<20 + int(time.Now().UnixNano()%1000) // a size only this command uses
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		var out sdktest.Buffer
		s.Stdout = &out
		ended := make(chan error, 1)
		if err := s.Start(fmt.Sprintf("head -c %d /dev/zero >&2; echo done", over)); err != nil {
			t.Fatal(err)
		}
		go func() { ended <- s.Wait() }()
		eventually(t, "the session stalls", func() bool { return f.Stats().Stalls == 1 })
		count := fmt.Sprintf("ps -eo args | grep -c '^head -c %d'; true", over)
		if r := run(t, c, count, ""); r.stdout != "1\n" {
			t.Errorf("the stalled command is not running: %+v", r)
		}
		select {
		case err := <-ended:
			t.Fatalf("the stalled session ended: %v", err)
		default:
		}
		if out.String() != "" {
			t.Errorf("stdout came through a full window: %q", out.String())
		}
		// The session's end is all that ends the stall.
		s.Close()
		<-ended
		eventually(t, "the stalled command ends with its session", func() bool { return run(t, c, count, "").stdout == "0\n" })
	})
}

// TestGatewayWindow: Options.Window sets the window.
func TestGatewayWindow(t *testing.T) {
	t.Parallel()
	opts := noLoss()
	opts.Window = 64 << 10
	f := Start(t, opts)
	c := loginToNew(t, f)
	// Under it, with room to spare: a full window would stop stdout as
	// well, whichever came first.
	if r := run(t, c, "head -c 60000 /dev/zero >&2; echo fits", ""); r.stdout != "fits\n" {
		t.Errorf("under the window: %+v", r)
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start("head -c 70000 /dev/zero >&2; echo done"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the session stalls", func() bool { return f.Stats().Stalls == 1 })
	s.Close()
}

// TestGatewayLosesExitStatus: the gateway loses the exit-status of a share
// of commands, Options.ExitStatusLoss (DefaultExitStatusLoss unless set).
func TestGatewayLosesExitStatus(t *testing.T) {
	t.Parallel()
	if f := Start(t, Options{}); f.opts.ExitStatusLoss != DefaultExitStatusLoss || DefaultExitStatusLoss <= 0 {
		t.Errorf("default loss %v", f.opts.ExitStatusLoss)
	}
	cases := []struct {
		name       string
		loss       float64
		n          int
		lost, kept bool // some lost, some kept
		hostOnly   bool
	}{
		{name: "never", loss: -1, n: 8, kept: true},
		{name: "always", loss: 1, n: 8, lost: true},
		// Both outcomes, but for a chance of 2^-63. The draw is the
		// gateway's, whatever the backend: the host's is enough, and
		// quick.
		{name: "half", loss: 0.5, n: 64, lost: true, kept: true, hostOnly: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			test := func(t *testing.T, f *Fake) {
				c := loginToNew(t, f)
				lost, kept := 0, 0
				for range tc.n {
					s, err := c.NewSession()
					if err != nil {
						t.Fatal(err)
					}
					out, err := s.Output("echo ran; exit 7")
					var missing *ssh.ExitMissingError
					var ee *ssh.ExitError
					switch {
					case errors.As(err, &missing):
						lost++
					case errors.As(err, &ee) && ee.ExitStatus() == 7:
						kept++
					default:
						t.Fatalf("exec: %v", err)
					}
					if string(out) != "ran\n" {
						t.Errorf("output %q", out)
					}
				}
				if (lost > 0) != tc.lost || (kept > 0) != tc.kept {
					t.Errorf("%d lost, %d kept", lost, kept)
				}
				if st := f.Stats(); st.ExitStatusesLost != lost {
					t.Errorf("stats: %+v, %d lost", st, lost)
				}
			}
			if tc.hostOnly {
				test(t, Start(t, Options{ExitStatusLoss: tc.loss}))
				return
			}
			forEachBackend(t, Options{ExitStatusLoss: tc.loss}, test)
		})
	}
}

// TestGatewayNoExitSignal: a command killed by a signal ends with
// exit-status 1, never exit-signal.
func TestGatewayNoExitSignal(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		c := loginToNew(t, f)
		if r := run(t, c, "echo before; kill -TERM $$", ""); r.stdout != "before\n" || r.code != 1 || r.signal != "" {
			t.Errorf("killed by TERM: %+v, want exit-status 1", r)
		}
		if r := run(t, c, "exit 143", ""); r.code != 143 || r.signal != "" {
			t.Errorf("exit 143: %+v", r)
		}
		// A signal the daemon does not know is KILL.
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		out := startLines(t, s, `trap "" TERM INT HUP; echo ready; exec sleep 600`)
		if l := out(); l != "ready" {
			t.Fatalf("first line %q", l)
		}
		if err := s.Signal("NOSUCH"); err != nil {
			t.Fatal(err)
		}
		var ee *ssh.ExitError
		if err := s.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 1 || ee.Signal() != "" {
			t.Errorf("killed by an unknown signal: %v, want exit-status 1", err)
		}
	})
}

// TestGatewayNoProcessGroup: commands are children of the sandbox's
// daemon, in its process group and session, with none of their own.
func TestGatewayNoProcessGroup(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		c := loginToNew(t, f)
		ids := func() (pid, pgid, sid string) {
			r := run(t, c, `echo $$ $(ps -o pgid= -p $$) $(ps -o sid= -p $$)`, "")
			f := strings.Fields(r.stdout)
			if len(f) != 3 {
				t.Fatalf("pid, pgid, sid: %+v", r)
			}
			return f[0], f[1], f[2]
		}
		pid1, pgid1, sid1 := ids()
		pid2, pgid2, sid2 := ids()
		if pid1 == pgid1 || pid1 == sid1 || pid2 == pgid2 || pgid1 != pgid2 || sid1 != sid2 {
			t.Errorf("two commands' pid, pgid, sid: %s %s %s and %s %s %s, want a shared group and session not their own", pid1, pgid1, sid1, pid2, pgid2, sid2)
		}
		// The group is the daemon's: not a command's shell, and there
		// before and after the commands.
		if r := run(t, c, "ps -o args= -p "+pgid1, ""); r.stdout == "" || strings.Contains(r.stdout, "/bin/sh -c") {
			t.Errorf("the group's leader: %+v", r)
		}
		// So a command cannot signal "its" group.
		if r := run(t, c, `kill -- -$$ 2>/dev/null; echo $?`, ""); r.stdout != "1\n" {
			t.Errorf("kill -- -$$: %+v, want it to fail", r)
		}
	})
}

// TestGatewaySignalReachesShellOnly: a "signal" request reaches the
// command's shell, and none of the processes it started.
func TestGatewaySignalReachesShellOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		c := loginToNew(t, f)
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		out := startLines(t, s, `sleep 600 >/dev/null 2>&1 & echo $!; trap 'echo got TERM; exit 5' TERM; echo ready; wait`)
		child := out()
		if l := out(); l != "ready" {
			t.Fatalf("second line %q", l)
		}
		if err := s.Signal(ssh.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if l := out(); l != "got TERM" {
			t.Errorf("after TERM: %q", l)
		}
		var ee *ssh.ExitError
		if err := s.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 5 {
			t.Errorf("after TERM: %v, want exit-status 5", err)
		}
		if r := run(t, c, "kill -0 "+child+" && echo alive", ""); r.stdout != "alive\n" {
			t.Errorf("the shell's child after TERM: %+v", r)
		}
	})
}

// TestGatewayDisconnect: when the client goes away, its command gets EOF
// on stdin and keeps running.
func TestGatewayDisconnect(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		sb, _ := e.started(t, api.CreateSandbox{})
		c, err := dial(f, e.token(t, sb.ID))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		mark := "600." + strconv.Itoa(int(time.Now().UnixNano()%1000000))
		out := startLines(t, s, "echo started; cat >/dev/null; echo eof > eof; exec sleep "+mark)
		if l := out(); l != "started" {
			t.Fatalf("first line %q", l)
		}
		c.Close()

		c2 := e.login(t, sb.ID)
		eventually(t, "the command gets EOF", func() bool { return run(t, c2, "cat eof 2>/dev/null; true", "").stdout == "eof\n" })
		count := "ps -eo args | grep -c '^sleep " + mark + "'; true"
		eventually(t, "the command runs on", func() bool { return run(t, c2, count, "").stdout == "1\n" })
	})
}

// TestGatewaySessionRequests: env is accepted and ignored; a pty is for a
// shell without a command; a shell without a pty is sh on stdin.
func TestGatewaySessionRequests(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		c := loginToNew(t, f)

		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Setenv("AMELIA_SET", "yes"); err != nil {
			t.Errorf("env refused: %v", err)
		}
		if out, err := s.Output(`echo "${AMELIA_SET-unset}"`); err != nil || string(out) != "unset\n" {
			t.Errorf("env: %q, %v", out, err)
		}

		// An exec after pty-req: no terminal.
		s, err = c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RequestPty("xterm", 24, 80, ssh.TerminalModes{}); err != nil {
			t.Errorf("pty-req refused: %v", err)
		}
		var ee *ssh.ExitError
		if out, err := s.Output("tty"); string(out) != "not a tty\n" || !errors.As(err, &ee) || ee.ExitStatus() != 1 {
			t.Errorf("exec with a pty-req: %q, %v", out, err)
		}

		// A shell without a pty: sh reading its commands from stdin.
		s, err = c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		s.Stdout = &out
		s.Stdin = strings.NewReader("echo $0 from stdin; tty; exit 4\n")
		if err := s.Shell(); err != nil {
			t.Fatal(err)
		}
		if err := s.Wait(); !errors.As(err, &ee) || ee.ExitStatus() != 4 || out.String() != "/bin/sh from stdin\nnot a tty\n" {
			t.Errorf("shell: %q, %v", out.String(), err)
		}

		// A shell with a pty: a terminal of the size asked, and exit-status
		// 0 whatever the shell's end, as the daemon's pty handler has no
		// code to give.
		s, err = c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RequestPty("xterm", 33, 101, ssh.TerminalModes{}); err != nil {
			t.Fatal(err)
		}
		var term sdktest.Buffer
		s.Stdout = &term
		in, _ := s.StdinPipe()
		if err := s.Shell(); err != nil {
			t.Fatal(err)
		}
		io.WriteString(in, "tty; stty size; echo \"TERM=$TERM\"; exit 3\n")
		if err := s.Wait(); err != nil {
			t.Errorf("pty shell: %v, want exit-status 0", err)
		}
		got := strings.ReplaceAll(term.String(), "\r", "")
		if !strings.Contains(got, "/dev/pts/") || !strings.Contains(got, "33 101") || !strings.Contains(got, "TERM=xterm") {
			t.Errorf("pty shell's terminal:\n%s", got)
		}
	})
}

// TestGatewayConnection: global requests are answered false (no reverse
// forwarding; keepalives answered, the connection kept); direct-tcpip
// channels reach the sandbox's own addresses, and one that cannot is
// accepted, then closed; every channel is counted.
func TestGatewayConnection(t *testing.T) {
	t.Parallel()
	forEachBackend(t, noLoss(), func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		sb, _ := e.started(t, api.CreateSandbox{NetworkBlockAll: true})
		c := e.login(t, sb.ID)

		if ln, err := c.Listen("tcp", "127.0.0.1:0"); err == nil {
			ln.Close()
			t.Errorf("tcpip-forward accepted")
		}
		ok, _, err := c.SendRequest("keepalive@openssh.com", true, nil)
		if ok || err != nil {
			t.Errorf("keepalive: %v, %v", ok, err)
		}

		// A server on the sandbox's loopback, reached through the gateway.
		s, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		out := startLines(t, s, `exec perl -MIO::Socket::INET -e '
			my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => 0, Listen => 1) or die "listen: $!";
			$| = 1; print $l->sockport, "\n";
			my $c = $l->accept; my $line = <$c>; print $c "got $line";'`)
		port := out()
		conn, err := c.Dial("tcp", net.JoinHostPort("127.0.0.1", port))
		if err != nil {
			t.Fatalf("direct-tcpip to the sandbox's port %s: %v", port, err)
		}
		io.WriteString(conn, "ping\n")
		got, err := io.ReadAll(conn)
		conn.Close()
		if string(got) != "got ping\n" || err != nil {
			t.Errorf("through the forward: %q, %v", got, err)
		}
		s.Wait()

		// A port nothing listens on: the channel opens, then closes.
		conn, err = c.Dial("tcp", "127.0.0.1:1")
		if err != nil {
			t.Fatalf("direct-tcpip to a closed port: %v, want a channel that closes", err)
		}
		if got, err := io.ReadAll(conn); len(got) != 0 || err != nil {
			t.Errorf("a forward to a closed port: %q, %v", got, err)
		}
		conn.Close()

		if r := run(t, c, "echo still here", ""); r.stdout != "still here\n" {
			t.Errorf("after the requests: %+v", r)
		}
		if st := f.Stats(); st.Logins != 1 || st.Channels != 4 || st.Sessions != 2 || st.Forwards != 2 {
			t.Errorf("stats: %+v, want 1 login, 4 channels: 2 sessions, 2 forwards", st)
		}
	})
}

// startLines starts cmd on s and returns a function that reads its
// stdout's next line (failing the test at EOF).
func startLines(t *testing.T, s *ssh.Session, cmd string) func() string {
	t.Helper()
	r, err := s.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(cmd); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(r)
	return func() string {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stdout of %q ended: %v", cmd, sc.Err())
		}
		return sc.Text()
	}
}

// eventually polls cond until it holds, failing the test when it ends.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatalf("%s: not when the test ended", what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}
