package worker_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFlockHoldsForTheShell: `amelia-worker flock 9` leaves the lock held by
// the shell that opened fd 9 after the worker has exited, and the lock goes
// when the shell does. The test probes it with its own non-blocking flock(2)
// on the same file.
func TestFlockHoldsForTheShell(t *testing.T) {
	lockFile := filepath.Join(t.TempDir(), "repo.lock")
	sh := exec.Command("sh", "-c", `exec 9>>"$1"; "$2" flock 9 || exit 1; echo locked; cat >/dev/null`, "sh", lockFile, workerBin)
	sh.Env = []string{"PATH=" + os.Getenv("PATH"), "GORACE=atexit_sleep_ms=0"}
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	sh.Stderr = &stderr
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sh.Process.Kill(); sh.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "locked\n" {
		t.Fatalf("shell said %q (%v); stderr: %s", line, err, stderr.String())
	}

	probe := func() error {
		f, err := os.OpenFile(lockFile, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	// The worker has exited (the shell went on to echo): the lock is the
	// shell's now.
	if err := probe(); !errors.Is(err, syscall.EWOULDBLOCK) {
		t.Fatalf("flock while the shell holds the lock: %v, want EWOULDBLOCK", err)
	}
	stdin.Close()
	if err := sh.Wait(); err != nil {
		t.Fatalf("shell: %v; stderr: %s", err, stderr.String())
	}
	if err := probe(); err != nil {
		t.Errorf("flock after the shell ended: %v, want the lock free", err)
	}
}

func TestFlockErrors(t *testing.T) {
	for _, c := range []struct {
		arg  string
		code int
		want string
	}{
		{"nine", 2, `want a file descriptor number`},
		{"1", 2, `want a file descriptor number`},
		{"57", 1, "amelia-worker flock 57: bad file descriptor"},
	} {
		r := runWorker(t, nil, nil, "flock", c.arg)
		if r.code != c.code || !strings.Contains(string(r.stderr), c.want) {
			t.Errorf("flock %s: exit %d, stderr %q; want exit %d and %q", c.arg, r.code, r.stderr, c.code, c.want)
		}
	}
}
