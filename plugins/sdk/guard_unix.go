//go:build unix

package sdk

import (
	"os"

	"golang.org/x/sys/unix"
)

// guardStdout keeps a private copy of stdout for the go-plugin handshake and
// points file descriptor 1 at stderr, so that anything else written to fd 1
// (by the provider, a library or a child process) goes to the host's log
// instead of into the handshake.
func guardStdout() (*os.File, error) {
	fd, err := unix.Dup(1)
	if err != nil {
		return nil, err
	}
	unix.CloseOnExec(fd)
	if err := unix.Dup2(2, 1); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "plugin-handshake"), nil
}
