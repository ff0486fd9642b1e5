package sshtransport

import "syscall"

// childAttr makes an OpenSSH process end with this one, and keeps it out
// of the terminal's signals.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
