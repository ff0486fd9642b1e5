//go:build unix

package sdk

import "syscall"

// setBlocking clears O_NONBLOCK on fd.
func setBlocking(fd uintptr) error { return syscall.SetNonblock(int(fd), false) }
