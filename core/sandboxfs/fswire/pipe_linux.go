package fswire

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// pipeSize is what Pipe grows a pipe to: with the default 64 KiB, a
// writer and a reader of bulk bytes take turns every 64 KiB; 1 MiB is
// Linux's pipe-max-size for an unprivileged process.
const pipeSize = 1 << 20

// spliceChunk is the most one splice moves.
const spliceChunk = 1 << 20

// Pipe is os.Pipe, grown to hold 1 MiB where the kernel lets it (only an
// optimisation: a refusal is ignored).
func Pipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	if rc, err := w.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
	return r, w, nil
}

// FromPipe moves limit bytes of the pipe src (all to its end, if limit
// is negative) into the file dst inside the kernel (splice(2)), without
// copying them through this process; it stops early at src's end. src
// may be blocking or not (then it waits through Go's poller, and closing
// src ends the wait). handled is false, nothing moved, when src is not a
// pipe or the kernel cannot splice into dst.
func FromPipe(dst, src *os.File, limit int64) (n int64, handled bool, err error) {
	if fi, err := src.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return 0, false, nil
	}
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	out := int(dst.Fd())
	flags := unix.SPLICE_F_MOVE | unix.SPLICE_F_MORE
	_ = rc.Control(func(fd uintptr) {
		if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err == nil && fl&unix.O_NONBLOCK != 0 {
			flags |= unix.SPLICE_F_NONBLOCK // empty: EAGAIN, and the poller waits
		}
	})
	for limit < 0 || n < limit {
		chunk := spliceChunk
		if limit >= 0 {
			chunk = int(min(limit-n, spliceChunk))
		}
		var m int64
		var serr error
		rerr := rc.Read(func(fd uintptr) bool {
			for {
				m, serr = unix.Splice(int(fd), nil, out, nil, chunk, flags)
				if serr != unix.EINTR {
					return serr != unix.EAGAIN
				}
			}
		})
		if m > 0 {
			n += m
		}
		switch {
		case rerr != nil:
			return n, true, rerr
		case n == 0 && (errors.Is(serr, unix.EINVAL) || errors.Is(serr, unix.ENOSYS)):
			return 0, false, nil
		case serr != nil:
			return n, true, &os.PathError{Op: "splice", Path: dst.Name(), Err: serr}
		case m == 0:
			return n, true, nil // src's end
		}
	}
	return n, true, nil
}
