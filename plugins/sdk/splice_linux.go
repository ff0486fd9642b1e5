package sdk

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// spliceMax is the most one splice(2) moves.
const spliceMax = 1 << 20

// splicePipe moves what src holds into dst, both pipes, until src's end,
// with splice(2): pipe buffers change hands in the kernel, no byte is
// copied. It waits for src to have bytes and dst room through Go's poller,
// so closing either file ends it. It adds what it moved to count. handled
// is false (and nothing was moved) when src is not a pipe.
func splicePipe(dst, src *os.File, count *atomic.Uint64) (written int64, handled bool, err error) {
	if fi, err := src.Stat(); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return 0, false, nil
	}
	sc, err := src.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	dc, err := dst.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	for {
		var n int64
		var serr error
		rerr := sc.Read(func(sfd uintptr) bool {
			srcEmpty := false
			werr := dc.Write(func(dfd uintptr) bool {
				for {
					n, serr = unix.Splice(int(sfd), nil, int(dfd), nil, spliceMax, unix.SPLICE_F_NONBLOCK|unix.SPLICE_F_MOVE)
					if serr == unix.EINTR {
						continue
					}
					if serr != unix.EAGAIN {
						return true
					}
					// src empty or dst full: wait for the one that is.
					in, out := ready(int(sfd), int(dfd))
					if !in {
						srcEmpty = true
						return true
					}
					if !out {
						return false
					}
				}
			})
			if werr != nil {
				serr = werr
				return true
			}
			return !srcEmpty
		})
		if n > 0 {
			written += n
			count.Add(uint64(n))
		}
		switch {
		case rerr != nil:
			return written, true, rerr
		case serr != nil:
			return written, true, os.NewSyscallError("splice", serr)
		case n == 0:
			return written, true, nil // src's end: every writer closed it
		}
	}
}

// ready polls, without waiting, whether the pipe in has bytes (or its
// end) and the pipe out room (or an error to report).
func ready(in, out int) (bool, bool) {
	fds := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}, {Fd: int32(out), Events: unix.POLLOUT}}
	for {
		if _, err := unix.Poll(fds, 0); err != unix.EINTR {
			break
		}
	}
	return fds[0].Revents != 0, fds[1].Revents != 0
}
