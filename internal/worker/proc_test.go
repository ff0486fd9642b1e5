package worker_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func pidFrom(t *testing.T, path string) int {
	t.Helper()
	// A run's pid file holds the supervisor's start time after its pid.
	first, _, _ := strings.Cut(strings.TrimSpace(readFile(t, path)), " ")
	pid, err := strconv.Atoi(first)
	if err != nil {
		t.Fatalf("pid file %s: %v", path, err)
	}
	return pid
}

// waitGone waits, through a pidfd (no polling), until process pid has
// exited, saying so in the log every 10 s it still runs (on a loaded
// machine a kill may take long; the test's deadline bounds the wait). An
// exited process that nobody reaped yet counts as gone.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Logf("process %d still runs, 10 s more after it should have been killed: %s", pid, stat)
			continue
		}
		return
	}
}
