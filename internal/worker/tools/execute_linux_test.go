package tools

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// quietShell keeps bash -l from reading the developer's own profile: the
// tests stay hermetic and fast.
func quietShell(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
}

// subreaper makes this test process the reaper of the orphans its commands
// leave, so that waitKilled can wait for them to be reaped instead of
// sleeping and hoping init did it.
func subreaper(t *testing.T) {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a child subreaper (needed to see killed processes reaped): %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// waitKilled reaps pid, which was orphaned to this process (see
// subreaper), checks that SIGKILL ended it, and that it is gone. The wait
// is bounded so that a process that was not killed fails the test instead
// of hanging it.
func waitKilled(t *testing.T, pid int) {
	t.Helper()
	type waited struct {
		ws  unix.WaitStatus
		err error
	}
	done := make(chan waited, 1)
	go func() {
		var w waited
		for {
			_, w.err = unix.Wait4(pid, &w.ws, 0, nil)
			if w.err != unix.EINTR {
				break
			}
		}
		done <- w
	}()
	select {
	case w := <-done:
		if errors.Is(w.err, unix.ECHILD) {
			// Not our child: bash, dying from the same SIGKILL, may still
			// have reaped it (say, while blocked in the wait builtin).
			// Then it must be gone already.
			break
		}
		if w.err != nil {
			t.Fatalf("wait for process %d: %v", pid, w.err)
		}
		if !w.ws.Signaled() || w.ws.Signal() != unix.SIGKILL {
			t.Errorf("process %d ended with status %#x, want killed by SIGKILL", pid, w.ws)
		}
	case <-time.After(30 * time.Second):
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("process %d is still running 30s after the call returned", pid)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) = %v, want ESRCH", pid, err)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the command did not write its background pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	return pid
}

func execArgs(command string, timeout float64) map[string]any {
	args := map[string]any{"command": command}
	if timeout != 0 {
		args["timeout"] = timeout
	}
	return args
}

func TestExecute(t *testing.T) {
	quietShell(t)
	t.Setenv("AMELIA_TOOLS_TEST", "inherited")
	s, dir := newSet(t, Options{}, map[string]string{"a.txt": "in a\n"})
	ok := func(name, command, want string) toolCase {
		return toolCase{name: name, tool: "execute", args: execArgs(command, 0), want: want + "[Command succeeded with exit code 0]"}
	}
	fail := func(name string, args any, want string) toolCase {
		return toolCase{name: name, tool: "execute", args: args, want: want, wantErr: true}
	}
	wide := strings.Repeat("é", 2424)
	runCases(t, s, []toolCase{
		ok("output", "echo hello", "hello\n"),
		ok("stdout and stderr", "echo out; echo err >&2; echo out2", "out\nerr\nout2\n"),
		ok("no final newline", "printf 'no newline'", "no newline\n"),
		ok("no output", "true", "(no output)\n"),
		ok("working directory", "pwd; cat a.txt", dir+"\nin a\n"),
		ok("environment", "echo $AMELIA_TOOLS_TEST", "inherited\n"),
		ok("stdin is empty", "cat; echo stdin closed", "stdin closed\n"),
		ok("invalid UTF-8", `printf 'a\377b'`, "a\uFFFDb\n"),
		ok("long output", `head -c 100000 /dev/zero | tr '\0' a; echo; echo END`,
			strings.Repeat("a", execHalf)+"\n[... 90305 bytes of output omitted ...]\n"+strings.Repeat("a", execHalf-5)+"\nEND\n"),
		ok("long multibyte output", `printf x; printf 'é%.0s' {1..30000}; printf y`,
			"x"+wide+"\n[... 50304 bytes of output omitted ...]\n"+wide+"y\n"),
		fail("exit code", execArgs("echo bad; exit 3", 0), "bad\n[Command failed with exit code 3]"),
		fail("killed by a signal", execArgs("kill -9 $$", 0), "(no output)\n[Command was killed by signal 9 (killed)]"),
		fail("negative timeout", execArgs("true", -1), "timeout must be a positive number of seconds, not -1"),
		fail("empty command", execArgs(" ", 0), "command is empty; give a shell command to run"),
		fail("no command", map[string]any{}, `missing required argument "command"`),
		fail("string timeout", map[string]any{"command": "true", "timeout": "5"}, `argument "timeout" must be a number, not a JSON string`),
	})
	t.Run("explicit zero timeout", func(t *testing.T) {
		res := call(t, s, "execute", `{"command": "true", "timeout": 0}`)
		if want := "timeout must be a positive number of seconds, not 0"; !res.IsError || res.Output != want {
			t.Errorf("got %+v, want error %q", res, want)
		}
	})
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := s.Call(ctx, "execute", json.RawMessage(`{"command": "touch ran"}`))
		if want := "command not run: the run was cancelled (context canceled)"; !res.IsError || res.Output != want {
			t.Errorf("got %+v, want error %q", res, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
			t.Error("the command ran")
		}
	})
}

func TestExecuteTimeouts(t *testing.T) {
	quietShell(t)
	subreaper(t)
	tests := []struct {
		name    string
		opts    Options
		timeout float64
		want    string
	}{
		{"explicit", Options{}, 1.5, "[Command timed out after 1.5s and was killed]"},
		{"default", Options{DefaultTimeout: time.Second}, 0, "[Command timed out after 1s and was killed]"},
		{"capped", Options{MaxTimeout: time.Second}, 1000, "[Command timed out after 1s and was killed]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := newSet(t, tt.opts, nil)
			// The background sleep is in the command's process group; the
			// timeout must kill it too, not only bash.
			res := call(t, s, "execute", execArgs("sleep 1000 & echo $! > pid; echo started; wait", tt.timeout))
			if want := "started\n" + tt.want; !res.IsError || res.Output != want {
				t.Errorf("got %+v, want error %q", res, want)
			}
			waitKilled(t, readPid(t, filepath.Join(dir, "pid")))
		})
	}
}

func TestExecuteKillsBackgroundJobs(t *testing.T) {
	quietShell(t)
	subreaper(t)
	s, dir := newSet(t, Options{}, nil)
	// The background sleep holds the output pipe: unless it is killed when
	// bash exits, the call would wait for it.
	res := call(t, s, "execute", execArgs("sleep 1000 & echo $! > pid; echo done", 0))
	if want := "done\n[Command succeeded with exit code 0]"; res.IsError || res.Output != want {
		t.Errorf("got %+v, want %q", res, want)
	}
	waitKilled(t, readPid(t, filepath.Join(dir, "pid")))
}

func TestExecuteCancel(t *testing.T) {
	quietShell(t)
	subreaper(t)
	s, dir := newSet(t, Options{}, nil)
	fifo := filepath.Join(dir, "pid")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	// Opened read-write so that the open does not wait for the command;
	// reading it waits for the command to start its background sleep.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan Result, 1)
	go func() {
		results <- s.Call(ctx, "execute", json.RawMessage(`{"command": "sleep 1000 & echo $! > pid; wait"}`))
	}()
	pids := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(f).ReadString('\n')
		pids <- line
	}()
	var pid int
	select {
	case line := <-pids:
		if pid, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
			t.Fatalf("pid %q: %v", line, err)
		}
	case res := <-results:
		t.Fatalf("the command ended before it was cancelled: %+v", res)
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not start within 30s")
	}

	cancel()
	select {
	case res := <-results:
		if want := "(no output)\n[Command cancelled (context canceled) and was killed]"; !res.IsError || res.Output != want {
			t.Errorf("got %+v, want error %q", res, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not return within 30s of the cancellation")
	}
	waitKilled(t, pid)
}

func TestExecuteEscapedGrandchild(t *testing.T) {
	quietShell(t)
	subreaper(t)
	s, dir := newSet(t, Options{}, nil)
	// With job control (set -m), the background job gets a process group of
	// its own, so killing the command's group misses it, and it keeps the
	// output pipe open. The call must still return, after drainTimeout.
	start := time.Now()
	res := call(t, s, "execute", execArgs("set -m; sleep 1000 & echo $! > pid; echo done", 0))
	elapsed := time.Since(start)
	pid := readPid(t, filepath.Join(dir, "pid"))
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGKILL)
		waitKilled(t, pid)
	})
	want := "done\n[stopped reading output: a background process that left the command's process group still holds it open]\n[Command succeeded with exit code 0]"
	if res.IsError || res.Output != want {
		t.Errorf("got %+v, want %q", res, want)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("the escaped sleep is not running (%v), so the test did not test the escape", err)
	}
	if elapsed < drainTimeout || elapsed > 20*time.Second {
		t.Errorf("the call took %v, want about drainTimeout (%v)", elapsed, drainTimeout)
	}
}

func TestHeadTail(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"empty", nil, ""},
		{"fits", []string{"abc", "def"}, "abcdef"},
		{"exactly both halves", []string{"abcd", "efgh"}, "abcdefgh"},
		{"one over", []string{"abcdefghi"}, "abcd\n[... 1 bytes of output omitted ...]\nfghi"},
		{"many small writes", strings.Split("abcdefghijklmnopqrstuvwxyz", ""), "abcd\n[... 18 bytes of output omitted ...]\nwxyz"},
		{"one big write", []string{strings.Repeat("x", 100) + "wxyz"}, "xxxx\n[... 96 bytes of output omitted ...]\nwxyz"},
		{"broken characters", []string{"abcé", strings.Repeat("-", 10), "éxyz"}, "abc\n[... 14 bytes of output omitted ...]\nxyz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &headTail{half: 4}
			for _, w := range tt.writes {
				if n, err := h.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := h.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}
