package datachan

import "syscall"

// socketpair makes a unix stream socket pair whose ends are close-on-exec
// from the start.
func socketpair() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
