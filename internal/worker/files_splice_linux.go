package worker

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
)

// spliceChunk is the most one splice or sendfile moves.
const spliceChunk = 1 << 20

// copyFromPipe moves what the pipe src holds, to its end, into the file
// dst inside the kernel (splice), without copying it through the worker;
// ok is false, nothing moved, when src is not a pipe, or the kernel
// cannot splice between them.
func copyFromPipe(dst, src *os.File) (n int64, ok bool, err error) {
	growPipe(int(src.Fd()))
	return fswire.FromPipe(dst, src, -1)
}

// copyToOut sends size bytes of the file src to dst (the worker's
// stdout) inside the kernel (sendfile); ok is false, nothing sent, when
// dst is not a file or the kernel cannot send to it.
func copyToOut(dst io.Writer, src *os.File, size int64) (n int64, ok bool, err error) {
	out, isFile := dst.(*os.File)
	if !isFile {
		return 0, false, nil
	}
	o, in := int(out.Fd()), int(src.Fd())
	if fi, err := out.Stat(); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		growPipe(o)
	}
	for n < size {
		m, err := unix.Sendfile(o, in, nil, int(min(size-n, spliceChunk)))
		if m > 0 {
			n += int64(m)
		}
		switch {
		case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
			continue
		case n == 0 && (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS)):
			return 0, false, nil
		case err != nil:
			return n, true, err
		case m == 0:
			return n, true, io.EOF // the file shrank
		}
	}
	return n, true, nil
}

// bulkPipe is what growPipe makes a pipe hold: the default 64 KiB has
// the worker and the process at the other end (the engine's shim, sshd)
// take turns every 64 KiB; 1 MiB is Linux's pipe-max-size for a user.
const bulkPipe = 1 << 20

// growPipe enlarges the pipe fd to bulkPipe where it can; it is only an
// optimisation, so a refusal (a lower pipe-max-size, the user's pipe
// quota spent) is ignored.
func growPipe(fd int) {
	_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, bulkPipe)
}
