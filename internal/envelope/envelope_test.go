package envelope_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// The test binary doubles as the worker: with serveEnv set it serves the
// envelope on its stdin and stdout, as `amelia-worker exec` does in a
// sandbox, in a process of its own.
const serveEnv = "ENVELOPE_TEST_SERVE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(serveEnv); mode != "" {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
		serve := envelope.Serve
		switch mode {
		case "mux":
			serve = envelope.ServeMux
		case "steps":
			serve = func(in io.Reader, out io.Writer, environ []string) error {
				return envelope.ServeMuxSteps(in, out, environ, testSteps)
			}
		}
		if err := serve(os.Stdin, os.Stdout, os.Environ()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// worker is a running worker process and the stream to it.
type worker struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.Reader
}

// startWorker starts the worker, behind a shell that prints banner first
// when banner is not empty (a login shell's rc files). It is killed when
// the test ends.
func startWorker(t testing.TB, banner string) *worker {
	t.Helper()
	return startServing(t, banner, "exec")
}

// startServing starts the worker serving mode: exec, or mux.
func startServing(t testing.TB, banner, mode string) *worker {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	if banner != "" {
		cmd = exec.Command("sh", "-c", `printf '%s' "$1"; exec "$2"`, "sh", banner, self)
	}
	cmd.Env = append(os.Environ(), serveEnv+"="+mode)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &testWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return &worker{cmd: cmd, in: in, out: out}
}

type testWriter struct{ t testing.TB }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Logf("worker stderr: %s", bytes.TrimSpace(p))
	return len(p), nil
}

type result struct {
	envelope.Result
	stdout, stderr string
	err            error
}

// run runs argv through a fresh worker.
func run(ctx context.Context, t *testing.T, cmd envelope.Command, stdin io.Reader) result {
	t.Helper()
	w := startWorker(t, "")
	return w.run(ctx, cmd, stdin, time.Second)
}

func (w *worker) run(ctx context.Context, cmd envelope.Command, stdin io.Reader, grace time.Duration) result {
	var out, errb bytes.Buffer
	res, err := envelope.Run(ctx, w.in, w.out, cmd, envelope.IO{Stdin: stdin, Stdout: &out, Stderr: &errb}, grace)
	w.in.Close()
	return result{res, out.String(), errb.String(), err}
}

func sh(script string) envelope.Command {
	return envelope.Command{Argv: []string{"sh", "-c", script}}
}

func TestStreamsAndExit(t *testing.T) {
	for _, tc := range []struct {
		name, script   string
		stdout, stderr string
		code           int
		signal         string
	}{
		{"streams kept apart", "echo out; echo err >&2; echo more", "out\nmore\n", "err\n", 0, ""},
		{"exit code", "echo bye; exit 3", "bye\n", "", 3, ""},
		{"killed by a signal", "echo x; kill -9 $$", "x\n", "", 137, "KILL"},
		{"binary, no newline", `printf '\000\001\377end'`, "\x00\x01\xffend", "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run(t.Context(), t, sh(tc.script), nil)
			if r.err != nil || r.stdout != tc.stdout || r.stderr != tc.stderr || r.Code != tc.code || r.Signal != tc.signal || r.Pid <= 0 || r.Canceled {
				t.Errorf("got %+v stdout %q stderr %q err %v; want stdout %q stderr %q code %d signal %q", r.Result, r.stdout, r.stderr, r.err, tc.stdout, tc.stderr, tc.code, tc.signal)
			}
		})
	}
}

func TestEnvDirAndLookup(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "hello"), []byte("#!/bin/sh\necho hello from $PWD with $GREETING\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "plain"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := bin + ":" + os.Getenv("PATH")
	env := map[string]string{"GREETING": "a b'c", "PATH": path}

	r := run(t.Context(), t, envelope.Command{Argv: []string{"hello"}, Env: env, Dir: dir}, nil)
	if want := "hello from " + dir + " with a b'c\n"; r.err != nil || r.stdout != want || r.Code != 0 {
		t.Errorf("a command on the request's PATH in its dir: %+v %q %v; want %q", r.Result, r.stdout, r.err, want)
	}
	r = run(t.Context(), t, envelope.Command{Argv: []string{"sh", "-c", `echo "$AMELIA_EXEC_ID"`}, Env: map[string]string{"AMELIA_EXEC_ID": "forged"}, Tag: "the-tag"}, nil)
	if r.stdout != "the-tag\n" {
		t.Errorf("the tag in the environment: %q, want the request's tag, not its env's", r.stdout)
	}
	for _, tc := range []struct {
		argv []string
		code int
		msg  string
	}{
		{[]string{"no-such-command-here"}, 127, "no-such-command-here: command not found"},
		{[]string{"./bin/plain"}, 126, "./bin/plain: permission denied"},
		{[]string{"plain"}, 126, "plain: permission denied"},
	} {
		r := run(t.Context(), t, envelope.Command{Argv: tc.argv, Env: env, Dir: dir}, nil)
		if r.err != nil || r.Code != tc.code || r.stderr != tc.msg+"\n" {
			t.Errorf("%v: %+v stderr %q err %v; want exit %d and %q", tc.argv, r.Result, r.stderr, r.err, tc.code, tc.msg)
		}
	}
	r = run(t.Context(), t, envelope.Command{Argv: []string{"true"}, Dir: filepath.Join(dir, "missing")}, nil)
	if !errors.Is(r.err, envelope.ErrNoDir) || r.Pid != 0 {
		t.Errorf("a missing working directory: %+v %v; want ErrNoDir and nothing started", r.Result, r.err)
	}
}

func TestStdin(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16+3)
	sum := sha256.Sum256(big)
	r := run(t.Context(), t, sh("sha256sum"), bytes.NewReader(big))
	if want := fmt.Sprintf("%x  -\n", sum); r.err != nil || r.stdout != want {
		t.Errorf("10 MiB of input: %q %v; want %q", r.stdout, r.err, want)
	}
	r = run(t.Context(), t, sh("cat; echo end"), nil)
	if r.stdout != "end\n" || r.err != nil {
		t.Errorf("no input is an empty input: %q %v", r.stdout, r.err)
	}
	// A command that exits without reading still ends the exec, however
	// much input there is.
	r = run(t.Context(), t, sh("exit 4"), io.LimitReader(endless{}, 50<<20))
	if r.Code != 4 || r.err != nil {
		t.Errorf("unread input: %+v %v", r.Result, r.err)
	}
}

// Five MiB of stderr, interleaved with stdout, comes back whole: nothing
// in the envelope depends on a side channel.
func TestLargeStderr(t *testing.T) {
	r := run(t.Context(), t, sh(`i=0; while [ $i -lt 80 ]; do head -c 65536 /dev/zero | tr '\0' e >&2; echo $i; i=$((i+1)); done`), nil)
	if r.err != nil || r.stderr != strings.Repeat("e", 5<<20) || strings.Count(r.stdout, "\n") != 80 {
		t.Errorf("stderr %d bytes (want %d), stdout %d lines, err %v", len(r.stderr), 5<<20, strings.Count(r.stdout, "\n"), r.err)
	}
}

// endless is input that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// watched are processes a test expects to end: pidfds opened while they
// run, which poll readable once each has exited.
type watched struct {
	pids []int
	fds  []int
}

func watch(t *testing.T, pids []int) *watched {
	t.Helper()
	w := &watched{pids: pids}
	for _, p := range pids {
		fd, err := unix.PidfdOpen(p, 0)
		if err != nil {
			t.Fatalf("pidfd_open %d: %v", p, err)
		}
		w.fds = append(w.fds, fd)
	}
	t.Cleanup(func() {
		for _, fd := range w.fds {
			unix.Close(fd)
		}
	})
	return w
}

// alive lists those that have not exited within a few seconds: a process
// that was killed closes its files (which ends the exec's output) just
// before it exits.
func (w *watched) alive() []int {
	var out []int
	deadline := time.Now().Add(5 * time.Second)
	for i, fd := range w.fds {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, max(1, int(time.Until(deadline).Milliseconds())))
			if err == unix.EINTR {
				continue
			}
			if n == 0 || err != nil {
				out = append(out, w.pids[i])
			}
			break
		}
	}
	return out
}

// startTree runs script, which prints n pids to watch, one per line, and
// returns them once it did, with a cancel and the run's outcome.
func startTree(t *testing.T, w *worker, script string, n int, grace time.Duration, stdin io.Reader) (*watched, context.CancelFunc, <-chan result) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		var errb bytes.Buffer
		res, err := envelope.Run(ctx, w.in, w.out, sh(script),
			envelope.IO{Stdin: stdin, Stdout: pw, Stderr: &errb}, grace)
		pw.Close()
		done <- result{res, "", errb.String(), err}
	}()
	sc := bufio.NewScanner(pr)
	var pids []int
	for len(pids) < n && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatalf("line %q, want a pid", sc.Text())
		}
		pids = append(pids, pid)
	}
	if len(pids) < n {
		t.Fatalf("got pids %v, want %d", pids, n)
	}
	go io.Copy(io.Discard, pr)
	return watch(t, pids), cancel, done
}

// The tree: the shell, a child shell in the same session, and a sleep
// that left the session (setsid) but keeps the tag in its environment.
const tree = `echo $$; sh -c 'echo $$; exec sleep 600' & setsid sh -c 'echo $$; exec sleep 600' & wait`

func TestCancelKillsTheTree(t *testing.T) {
	w := startWorker(t, "")
	pids, cancel, done := startTree(t, w, tree, 3, 5*time.Second, nil)
	cancel()
	r := <-done
	if !r.Canceled || r.err != nil || r.Signal != "TERM" || r.Code != 143 {
		t.Errorf("after cancel: %+v %v; want canceled, killed by TERM", r.Result, r.err)
	}
	if left := pids.alive(); len(left) != 0 {
		t.Errorf("still running after cancel: %v of %v", left, pids.pids)
	}
}

func TestCancelGraceThenKill(t *testing.T) {
	const grace = 700 * time.Millisecond
	w := startWorker(t, "")
	pids, cancel, done := startTree(t, w, `trap '' TERM; echo $$; while :; do sleep 0.05; done`, 1, grace, nil)
	start := time.Now()
	cancel()
	r := <-done
	if took := time.Since(start); took < grace {
		t.Errorf("a process ignoring TERM ended %v after cancel, within the %v grace", took, grace)
	}
	if left := pids.alive(); !r.Canceled || r.Signal != "KILL" || r.Code != 137 || len(left) != 0 {
		t.Errorf("after cancel: %+v %v, alive %v; want killed by KILL", r.Result, r.err, left)
	}
}

// A command that never reads its endless input still gets the cancel:
// the worker keeps reading frames, as the input stays within its window.
func TestCancelWhileInputIsBlocked(t *testing.T) {
	w := startWorker(t, "")
	pids, cancel, done := startTree(t, w, `echo $$; exec sleep 600`, 1, time.Second, endless{})
	cancel()
	r := <-done
	if left := pids.alive(); !r.Canceled || r.err != nil || len(left) != 0 {
		t.Errorf("after cancel: %+v %v, alive %v", r.Result, r.err, left)
	}
}

// The client going away (its stream ends without a cancel) kills the
// tree: the transports this is for leave commands running when their
// client disconnects.
func TestClientGoneKillsTheTree(t *testing.T) {
	w := startWorker(t, "")
	pids, _, done := startTree(t, w, tree, 3, time.Second, endless{})
	w.in.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("the worker after its client left: %v", err)
	}
	if left := pids.alive(); len(left) != 0 {
		t.Errorf("still running after the client left: %v of %v", left, pids.pids)
	}
	if r := <-done; !errors.Is(r.err, envelope.ErrBroken) {
		t.Errorf("Run after its stream was cut: %v, want ErrBroken", r.err)
	}
}

// A worker that dies mid-command is a broken stream, not an exit.
func TestWorkerDies(t *testing.T) {
	w := startWorker(t, "")
	pids, _, done := startTree(t, w, `echo $$; exec sleep 600`, 1, time.Second, nil)
	// Nobody is left to kill the command: the test does.
	t.Cleanup(func() { syscall.Kill(pids.pids[0], syscall.SIGKILL) })
	w.cmd.Process.Signal(syscall.SIGKILL)
	r := <-done
	if !errors.Is(r.err, envelope.ErrBroken) || r.Pid == 0 {
		t.Errorf("after the worker died: %+v %v; want ErrBroken with the pid", r.Result, r.err)
	}
}

// What a login shell prints before the worker starts is skipped.
func TestBannerBeforeHello(t *testing.T) {
	w := startWorker(t, "Welcome!\nlast login: never\nno newline at the end")
	r := w.run(t.Context(), sh("echo hi"), nil, time.Second)
	if r.err != nil || r.stdout != "hi\n" {
		t.Errorf("behind a banner: %q %v", r.stdout, r.err)
	}
}

// Something that is not the worker at all gives a clear error.
func TestNotAWorker(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo sh: 1: amelia-worker: not found; exit 127")
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Wait() })
	_, err := envelope.Run(t.Context(), in, out, sh("true"), envelope.IO{}, time.Second)
	if !errors.Is(err, envelope.ErrNoWorker) || !strings.Contains(err.Error(), "amelia-worker: not found") {
		t.Errorf("Run against a shell that has no worker: %v; want ErrNoWorker quoting what came", err)
	}
}

func TestBootstrap(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		args         []string
		stdin        string
		output       string
		code         int
	}{
		{"stdout and stderr merged, exit code", `echo "out $1"; echo "err $2" >&2; exit 5`, []string{"a b", "c'd"}, "", "out a b\nerr c'd\n", 5},
		{"no trailing newline", `printf 'x'`, nil, "", "x", 0},
		{"stdin passes", `head -c 3`, nil, "abcdef", "abc", 0},
		{"output that looks like a marker", `echo 'amelia-exit:other:9'`, nil, "", "amelia-exit:other:9\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := envelope.Bootstrap("tag1", tc.script, tc.args...)
			cmd := exec.Command("sh", "-c", line)
			cmd.Stdin = strings.NewReader(tc.stdin)
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			output, code, ok := envelope.BootstrapResult("tag1", out)
			if !ok || string(output) != tc.output || code != tc.code {
				t.Errorf("BootstrapResult(%q) = %q, %d, %v; want %q, %d", out, output, code, ok, tc.output, tc.code)
			}
		})
	}
	for _, cut := range []string{"out\n", "out\namelia-exit:tag1:", "out\namelia-exit:tag1:3", "out\namelia-exit:other:0\n"} {
		if _, _, ok := envelope.BootstrapResult("tag1", []byte(cut)); ok {
			t.Errorf("BootstrapResult(%q) reported an exit", cut)
		}
	}
}
