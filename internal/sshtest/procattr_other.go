//go:build !linux

package sshtest

import "syscall"

// procAttr puts a server of the test in its own process group.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
