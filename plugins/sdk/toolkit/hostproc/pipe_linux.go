package hostproc

import (
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is what output and input pipes are grown to (Linux's default limit for an
// unprivileged process). A 64 KiB pipe makes a fast producer hand over its
// output in small pieces, each one read, message and syscall on the way to
// the host; a bigger one lets reads take more at once.
const pipeSize = 1 << 20

// growPipe enlarges the pipe behind f; it is only an optimisation, so a
// refusal (a lower pipe-max-size) is ignored.
func growPipe(f *os.File) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, pipeSize)
}
