package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/reachtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
)

// End-to-end tests of reaching into a sandbox: `amelia sandbox shell` on a
// real terminal (its size followed, its exit code amelia's), and `amelia
// sandbox port-forward` carrying HTTP from host loopback to a server in a
// sandbox with network none, on docker, ssh (a real sshd in a container,
// the sandbox's network cut by iptables) and Daytona's fake (real
// containers with no network).

// reachCase is a provider for these tests: a host whose e2e profile's
// sandbox, with network none, is on it.
type reachCase struct {
	name string
	host func(t *testing.T) *host
}

var reachCases = []reachCase{
	{"docker", func(t *testing.T) *host {
		cli, outside := dockerOutside(t)
		h := newDockerHost(t, cli, dockerSandbox("none", outside.Addr()))
		t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
		return h
	}},
	{"ssh", func(t *testing.T) *host {
		cli := dockertest.Engine(t)
		remote := sshtest.StartContainer(t, cli)
		outside := reachtest.Listen(t, remote.Gateway)
		block, _ := json.Marshal(map[string]any{
			"host":           remote.Host,
			"port":           remote.Port,
			"user":           remote.User,
			"identity_files": []string{remote.ClientKey},
			"known_hosts":    remote.KnownHosts,
			"ssh_config":     filepath.Join(t.TempDir(), "no-config"),
			"enforce_egress": "iptables",
		})
		return newHostWith(t, fmt.Sprintf("{provider: ssh, network: none, egress_check_targets: [%q], ssh: %s}", outside.Addr(), block), "", llmtest.Options{})
	}},
	{"daytona", func(t *testing.T) *host {
		cli, outside := dockerOutside(t)
		f := daytonatest.Start(t, daytonatest.Options{Docker: cli})
		h := newHostWith(t, daytonaSandbox(t, f, "none", outside.Addr()), "", llmtest.Options{})
		h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
		t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
		return h
	}},
}

// sandboxUp starts the host's sandbox.
func (h *host) sandboxUp(t *testing.T) {
	t.Helper()
	if r := h.amelia(t, "sandbox", "up"); r.code != 0 {
		t.Fatalf("amelia sandbox up: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
}

// A shell on a terminal: it runs on one of the host terminal's size,
// follows the host terminal's resize, and its exit code is amelia's.
func TestSandboxShell(t *testing.T) {
	for _, c := range reachCases {
		t.Run(c.name, func(t *testing.T) {
			h := c.host(t)
			h.sandboxUp(t)
			tm := h.startOnTerminal(t, "sandbox", "shell")
			// What the shell prints, not the echo of what was typed.
			tm.typeLine(t, "echo READY-$((6*7))")
			tm.waitFor(t, "READY-42")
			if got := tm.stty(t, 1); got != fmt.Sprintf("24 %d", termWidth) {
				t.Errorf("stty size in the shell: %q, want the host terminal's 24 %d", got, termWidth)
			}
			if err := unix.IoctlSetWinsize(int(tm.ptmx.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 133}); err != nil {
				t.Fatalf("resize the host terminal: %v", err)
			}
			// The resize reaches the sandbox on its own way: ask until
			// the shell sees it.
			for i := 2; ; i++ {
				got := tm.stty(t, i)
				if got == "41 133" {
					break
				}
				if got != fmt.Sprintf("24 %d", termWidth) {
					t.Fatalf("stty size in the shell after a resize to 41x133: %q", got)
				}
			}
			tm.typeLine(t, "exit 7")
			select {
			case <-tm.done:
			case <-t.Context().Done():
				t.Fatalf("amelia sandbox shell did not end after exit 7:\n%q", tm.output())
			}
			if code := tm.cmd.ProcessState.ExitCode(); code != 7 {
				t.Errorf("amelia sandbox shell: exit %d after the shell's exit 7, want 7; output:\n%q", code, tm.output())
			}

			// amelia stopped (SIGTERM) under a running command: it exits
			// 130 and nothing of the shell's is left in the sandbox.
			tm = h.startOnTerminal(t, "sandbox", "shell")
			tm.typeLine(t, "echo STARTED-$((1+1)); sleep 4242")
			tm.waitFor(t, "STARTED-2")
			if err := tm.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-tm.done:
			case <-t.Context().Done():
				t.Fatalf("amelia sandbox shell did not end after SIGTERM:\n%q", tm.output())
			}
			if code := tm.cmd.ProcessState.ExitCode(); code != 130 {
				t.Errorf("amelia sandbox shell after SIGTERM: exit %d, want 130", code)
			}
			r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", shellLeft)
			if !strings.Contains(r.stdout, "PROBED") || strings.Contains(r.stdout, "LEFT") {
				t.Errorf("the stopped shell's command is left in the sandbox (or the probe failed: exit %d, stderr %q):\n%s", r.code, r.stderr, r.stdout)
			}
		})
	}
}

// shellLeft finds the stopped shell's sleep in the sandbox (the pattern
// does not match its own command line).
const shellLeft = `for p in /proc/[0-9]*; do
  tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^sleep 42[4]2' && echo LEFT
done; echo PROBED`

// typeLine types line and Enter on the terminal.
func (tm *terminal) typeLine(t *testing.T, line string) {
	t.Helper()
	if _, err := tm.ptmx.Write([]byte(line + "\r")); err != nil {
		t.Fatalf("type %q: %v", line, err)
	}
}

// stty asks the shell for its terminal's size, as the i-th question.
func (tm *terminal) stty(t *testing.T, i int) string {
	t.Helper()
	tm.typeLine(t, fmt.Sprintf("echo SIZE%d=$(stty size)=", i))
	re := regexp.MustCompile(fmt.Sprintf(`SIZE%d=(\d+ \d+)=`, i))
	tm.waitForMatch(t, re)
	return re.FindStringSubmatch(string(tm.output()))[1]
}

// waitForMatch waits until the terminal's output matches re.
func (tm *terminal) waitForMatch(t *testing.T, re *regexp.Regexp) {
	t.Helper()
	for {
		tm.mu.Lock()
		found, ready := re.Match(tm.out.Bytes()), tm.ready
		tm.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ready:
		case <-tm.done:
			t.Fatalf("amelia ended before drawing %s:\n%s", re, tm.screen(t))
		case <-t.Context().Done():
			t.Fatalf("the test ended before amelia drew %s:\n%s", re, tm.screen(t))
		}
	}
}

// Where a shell cannot be had, amelia says so in one line and starts
// nothing: a provider that gives no terminal (local), or no terminal on
// stdin.
func TestSandboxShellRefused(t *testing.T) {
	t.Run("provider without TTY", func(t *testing.T) {
		h := newHost(t, llmtest.Options{})
		r := h.amelia(t, "sandbox", "shell")
		want := "amelia: sandbox shell: the local provider gives no terminal (it does not declare TTY); run commands with amelia sandbox exec -- COMMAND instead\n"
		if r.code != 1 || withoutLocalWarning(r.stderr) != want {
			t.Errorf("amelia sandbox shell on local: exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, want)
		}
		if entries, _ := os.ReadDir(h.root); len(entries) != 0 {
			t.Errorf("the refused shell started a sandbox: %v", entries)
		}
	})
	t.Run("stdin not a terminal", func(t *testing.T) {
		h := reachCases[0].host(t)
		r := h.amelia(t, "sandbox", "shell")
		want := "amelia: sandbox shell: stdin is not a terminal, and an interactive shell needs one; to run commands without a terminal, use amelia sandbox exec -i -- sh\n"
		if r.code != 2 || r.stderr != want {
			t.Errorf("amelia sandbox shell without a terminal: exit %d, stderr %q; want exit 2 and %q", r.code, r.stderr, want)
		}
	})
}

// httpServer is a small HTTP server (perl, which every image here has)
// that answers every request with $2, on 127.0.0.1:$1 of the sandbox, and
// says LISTENING once it listens.
const httpServer = `use IO::Socket::INET;
my $s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", LocalPort => $ARGV[0], Listen => 16, ReuseAddr => 1) or die "listen: $!";
$| = 1; print "LISTENING\n";
while (my $c = $s->accept) {
	while (my $l = <$c>) { last if $l =~ /^\r?\n$/ }
	print $c "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " . length($ARGV[1]) . "\r\n\r\n" . $ARGV[1];
	close $c;
}`

// freePort is a port nothing listens on, on host loopback now: in a
// sandbox of its own network it is free too, and on the ssh remote, whose
// loopback is its container's, too.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a buffer written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// background is amelia running in the background until the test stops
// it: its stdout line by line, its stderr.
type background struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *syncBuffer
	done   chan struct{}
}

func (h *host) background(t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{cmd: h.command(args...), lines: make(chan string, 64), stderr: &syncBuffer{}, done: make(chan struct{})}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.cmd.Stderr = b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case b.lines <- sc.Text():
			default:
			}
		}
		b.cmd.Wait()
	}()
	t.Cleanup(func() {
		b.cmd.Process.Signal(os.Interrupt)
		<-b.done
	})
	return b
}

// line waits for the next line of stdout.
func (b *background) line(t *testing.T, what string) string {
	t.Helper()
	select {
	case l := <-b.lines:
		return l
	case <-b.done:
		t.Fatalf("amelia ended (exit %d) before %s; stderr:\n%s", b.cmd.ProcessState.ExitCode(), what, b.stderr)
	case <-t.Context().Done():
		t.Fatalf("the test ended before %s; stderr:\n%s", what, b.stderr)
	}
	return ""
}

// interrupt stops amelia as Ctrl-C does and returns its exit code.
func (b *background) interrupt(t *testing.T) int {
	t.Helper()
	if err := b.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.done:
	case <-t.Context().Done():
		t.Fatalf("amelia did not end after SIGINT; stderr:\n%s", b.stderr)
	}
	return b.cmd.ProcessState.ExitCode()
}

// forwardedAddr is the address port-forward says it listens on.
var forwardedAddr = regexp.MustCompile(`^forwarding (127\.0\.0\.1:\d+) to port (\d+) in sandbox \S+ of profile e2e \(provider \S+\); Ctrl-C ends it$`)

// workerForwards finds an amelia-worker port-forward process in the
// sandbox (the pattern does not match its own command line).
const workerForwards = `for p in /proc/[0-9]*; do
  tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'amelia-worker[^ ]* port-forward' && echo FORWARDING
done; echo PROBED`

// An HTTP server in a sandbox with network none, reached from the host
// through port-forward: a connection before anything listens is closed
// and said so; Ctrl-C closes the listener and leaves no process in the
// sandbox.
func TestSandboxPortForward(t *testing.T) {
	for _, c := range reachCases {
		t.Run(c.name, func(t *testing.T) {
			h := c.host(t)
			h.sandboxUp(t)
			port := freePort(t)
			pf := h.background(t, "sandbox", "port-forward", "0:"+strconv.Itoa(port))
			line := pf.line(t, "it said where it listens")
			m := forwardedAddr.FindStringSubmatch(line)
			if m == nil || m[2] != strconv.Itoa(port) {
				t.Fatalf("amelia sandbox port-forward 0:%d said %q", port, line)
			}
			addr := m[1]
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			url := "http://" + addr + "/"

			// Nothing listens in the sandbox yet: the connection is
			// closed (no hang: the test's deadline would end it) and
			// stderr says why.
			if resp, err := client.Get(url); err == nil {
				resp.Body.Close()
				t.Fatalf("GET %s with nothing listening in the sandbox: %s, want the connection closed", url, resp.Status)
			}
			wantLine := fmt.Sprintf("to port %d in the sandbox:", port)
			waitUntil(t, func() bool { return strings.Contains(pf.stderr.String(), wantLine) }, "port-forward to say the connection failed")
			if s := pf.stderr.String(); !strings.Contains(s, "refused") || !strings.Contains(s, fmt.Sprintf("is anything listening on 127.0.0.1:%d in the sandbox?", port)) {
				t.Errorf("port-forward's line for a refused connection:\n%s", s)
			}

			body := "served-in-sandbox-" + c.name
			srv := h.background(t, "sandbox", "exec", "--", "perl", "-e", httpServer, strconv.Itoa(port), body)
			if l := srv.line(t, "the server listened"); l != "LISTENING" {
				t.Fatalf("the server in the sandbox said %q", l)
			}
			for i := range 3 { // each a connection of its own
				resp, err := client.Get(url)
				if err != nil {
					t.Fatalf("GET %s (%d): %v; port-forward's stderr:\n%s", url, i, err, pf.stderr)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(got) != body {
					t.Fatalf("GET %s (%d): %q, want %q", url, i, got, body)
				}
			}

			// The probe sees the forward while it runs.
			if r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", workerForwards); !strings.Contains(r.stdout, "FORWARDING") {
				t.Fatalf("no amelia-worker port-forward in the sandbox while it forwards (exit %d, stderr %q):\n%s", r.code, r.stderr, r.stdout)
			}
			if code := pf.interrupt(t); code != 130 {
				t.Errorf("port-forward after Ctrl-C: exit %d, want 130; stderr:\n%s", code, pf.stderr)
			}
			if conn, err := net.Dial("tcp", addr); err == nil {
				conn.Close()
				t.Errorf("%s still accepts connections after port-forward ended", addr)
			}
			r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", workerForwards)
			if !strings.Contains(r.stdout, "PROBED") || strings.Contains(r.stdout, "FORWARDING") {
				t.Errorf("an amelia-worker port-forward is left in the sandbox (or the probe failed: exit %d, stderr %q):\n%s", r.code, r.stderr, r.stdout)
			}
		})
	}
}

// A port that is not a port is refused in one line, before anything
// starts.
func TestSandboxPortForwardBadPort(t *testing.T) {
	h := newHost(t, llmtest.Options{})
	for _, c := range []struct{ arg, want string }{
		{"http", `amelia: port-forward "http": PORT must be a number from 1 to 65535: amelia sandbox port-forward [LOCAL:]PORT, e.g. 8080 or 9000:8080` + "\n"},
		{"8080:0", `amelia: port-forward "8080:0": PORT must be a number from 1 to 65535: amelia sandbox port-forward [LOCAL:]PORT, e.g. 8080 or 9000:8080` + "\n"},
		{"x:8080", `amelia: port-forward "x:8080": LOCAL must be a number from 0 (any free port) to 65535: amelia sandbox port-forward [LOCAL:]PORT, e.g. 9000:8080` + "\n"},
	} {
		r := h.amelia(t, "sandbox", "port-forward", c.arg)
		if r.code != 2 || r.stderr != c.want {
			t.Errorf("amelia sandbox port-forward %s: exit %d, stderr %q; want exit 2 and %q", c.arg, r.code, r.stderr, c.want)
		}
	}
}

// waitUntil polls cond until it holds, within the test's deadline.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	ctx := t.Context()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("the test ended waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// With --workflow, the shell is the run's: its uid (docker separates
// runs) in its checkout, where its work is. A workflow the sandbox does
// not hold is refused in one line.
func TestSandboxShellWorkflow(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"),
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("shell.txt", "from-the-run\n")}},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
	)
	t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
	if r := h.amelia(t, "run", "--json", "--workflow", "shelled", "--keep-worktree", "Write shell.txt."); r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}

	tm := h.startOnTerminal(t, "sandbox", "shell", "--workflow", "shelled")
	tm.typeLine(t, "echo WHO=$(id -u):$(pwd):$(cat shell.txt)=")
	re := regexp.MustCompile(`WHO=(\d+):([^:\s]+):(\S*)=`)
	tm.waitForMatch(t, re)
	m := re.FindStringSubmatch(string(tm.output()))
	if uid, _ := strconv.Atoi(m[1]); uid < 60100 || uid > 64999 || m[2] != "/workspace/worktrees/shelled" || m[3] != "from-the-run" {
		t.Errorf("the workflow's shell runs as uid %s in %s, where shell.txt holds %q; want a run's uid (60100-64999) in /workspace/worktrees/shelled, with the run's work", m[1], m[2], m[3])
	}
	tm.typeLine(t, "exit")
	select {
	case <-tm.done:
	case <-t.Context().Done():
		t.Fatalf("amelia sandbox shell did not end after exit:\n%q", tm.output())
	}
	if code := tm.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("amelia sandbox shell --workflow: exit %d after the shell's exit 0", code)
	}

	nope := h.startOnTerminal(t, "sandbox", "shell", "--workflow", "nope")
	nope.waitFor(t, "amelia sandbox ls lists each sandbox's workflows")
	<-nope.done
	if code, out := nope.cmd.ProcessState.ExitCode(), string(nope.output()); code != 1 || !strings.Contains(out, "amelia: sandbox shell: no workflow nope in sandbox ") {
		t.Errorf("amelia sandbox shell --workflow nope: exit %d, output %q; want exit 1 and that no such workflow is in the sandbox", code, out)
	}
}
