//go:build !linux

package sshtransport

import "syscall"

// childAttr keeps an OpenSSH process out of the terminal's signals; the
// Conn's Close ends it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
