package sshtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/crypto/ssh"
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
	sshd(t) // skips or fails, as the package does, where there is none
	becomeReaper(t)
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
	waitGone(t, pid, "sshd, after the test binary that started it died")
}

// Stop ends what the sessions left running: a command whose connection
// dropped, and one that went into the background in a session of its own.
func TestStopEndsWhatSessionsLeft(t *testing.T) {
	becomeReaper(t)
	s := Start(t, Options{})
	key, err := os.ReadFile(s.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ssh.Dial("tcp", s.Addr(), &ssh.ClientConfig{User: s.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: ssh.FixedHostKey(s.HostKey)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	background, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := background.Output("setsid sleep 600 </dev/null >/dev/null 2>&1 & echo $!")
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	stdout, _ := dropped.StdoutPipe()
	if err := dropped.Start("echo $$; exec sleep 600"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(out) + " " + line) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("the sessions said %q and %q", out, line)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("the sessions said %q and %q; want a pid each", out, line)
	}
	s.KillSessions()
	s.Stop()
	waitGone(t, pids[0], "a background process of a session, after Stop")
	waitGone(t, pids[1], "a command whose connection dropped, after Stop")
}

// becomeReaper has the processes this test's children leave behind come to
// this process, so waitGone can reap them.
func becomeReaper(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become a subreaper: %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
}

// waitGone waits up to 30 s for pid to exit, reaps it, and fails the test
// (killing it) if it is still running; what names it.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // gone already
	}
	if err != nil {
		t.Fatalf("pidfd_open %d: %v", pid, err)
	}
	defer unix.Close(fd)
	defer unix.Wait4(pid, nil, 0, nil) // ECHILD unless it came to this process
	// The fd reads ready once the process has exited.
	n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 30_000)
	if err != nil {
		t.Fatalf("wait for %d: %v", pid, err)
	}
	if n == 0 {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Errorf("%d is still running 30 s later: %s", pid, what)
	}
}
