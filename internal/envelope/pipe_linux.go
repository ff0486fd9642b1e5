package envelope

import (
	"os"
	"syscall"
)

// pipeSize is what the worker grows the pipes of a command's output, and
// its own output, to (Linux's default limit for an unprivileged process).
// With 64 KiB pipes a fast command hands over its output in small pieces,
// each a read, a frame and a write on the way out of the sandbox.
const pipeSize = 1 << 20

// growPipe enlarges the pipe behind f; it is only an optimisation, so a
// refusal (not a pipe, a lower pipe-max-size) is ignored.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_, _, _ = syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_SETPIPE_SZ, pipeSize)
		})
	}
}
