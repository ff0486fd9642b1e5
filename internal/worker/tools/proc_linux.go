package tools

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts the command in a process group of its own, to be killed
// as a whole, and kills it if the worker dies. Pdeathsig fires when the OS
// thread that started the child exits; Go only ends threads whose goroutine
// locked them, which this package never does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitExited blocks until process pid has exited but leaves it unreaped, so
// that its pid, which is also its process group's id, cannot be reused
// while the group is being killed.
func waitExited(pid int) error {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return err
		}
	}
}
