package sshtest

import "syscall"

// procAttr puts a server of the test in its own process group and has the
// kernel kill it when the test binary dies without its cleanups (a test
// timeout panics past them).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
