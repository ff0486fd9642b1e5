//go:build unix && !linux

package datachan

import "syscall"

// socketpair makes a unix stream socket pair whose ends are close-on-exec.
// Without SOCK_CLOEXEC (macOS) the flag is set after, under ForkLock, as
// Go's own net package does, so no exec of another goroutine's starts
// between.
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
