package datachan

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe enlarges the pipe behind f to PipeSize; it is only an
// optimisation, so a refusal (a lower pipe-max-size) is ignored.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, PipeSize) })
	}
}
