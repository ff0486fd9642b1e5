package sshtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// A test binary that dies past its cleanups, as a test timeout's panic
// does, takes its sshd with it rather than leaving it listening.
func TestServerDiesWithTestBinary(t *testing.T) {
	if os.Getenv("SSHTEST_DIE_EARLY") == "1" {
		s := Start(t, Options{})
		fmt.Printf("sshd-pid %d\n", s.cmd.Process.Pid)
		os.Exit(3) // past every cleanup
	}
	// The child's orphans come to this process, so it can reap them.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a subreaper: %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerDiesWithTestBinary$")
	// What the child leaves in its temp dirs goes with ours.
	cmd.Env = append(os.Environ(), "SSHTEST_DIE_EARLY=1", "TMPDIR="+t.TempDir())
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("the child test: %v\n%s", err, out)
	}
	field, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "sshd-pid ")
	pid, err := strconv.Atoi(field)
	if !ok || err != nil {
		t.Fatalf("the child test said %q", out)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // gone already
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	defer unix.Wait4(pid, nil, 0, nil)
	// The fd reads ready once the process has exited.
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000)
	if err != nil {
		t.Fatalf("wait for sshd %d: %v", pid, err)
	}
	if n == 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("sshd %d was still running 30 s after the test binary that started it died", pid)
	}
}
