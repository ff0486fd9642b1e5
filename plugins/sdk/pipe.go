package sdk

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// pipeCopyBuffer is the most one read takes when a pipe's bytes are
// copied rather than spliced.
const pipeCopyBuffer = 256 << 10

// PipeWriter is what a provider sees as ExecIO.Stdout and Stderr, in a
// plugin, when the host carries the exec's bytes over the data channel:
// the write end of an OS pipe whose read end the host reads. Write writes
// to the pipe (blocking while it is full: the host's reading paces the
// provider); ReadFrom moves the bytes of a pipe of the provider's own (a
// local process's output) into it in the kernel, so they do not pass
// through the plugin. It counts what it sent.
type PipeWriter struct {
	f *os.File
	n atomic.Uint64
	// own: f is the host's own file (sdk.OutputFile there), which the
	// host does not count.
	own bool
}

// File is the caller's own output file (an sdk.OutputFile at the host),
// for a provider to give a process as its output as it is, made
// blocking, as a process expects. ok is false when the pipe is one the
// host reads and counts what comes through: then only Write and ReadFrom
// may write it. The SDK closes the file when the exec ends; the provider
// must not.
func (w *PipeWriter) File() (f *os.File, ok bool) {
	if !w.own {
		return nil, false
	}
	if rc, err := w.f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = setBlocking(fd) })
	}
	return w.f, true
}

// Write writes p to the pipe.
func (w *PipeWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.n.Add(uint64(n))
	return n, err
}

// ReadFrom copies r to the pipe until r ends. When r is an *os.File that
// is a pipe, the kernel moves the bytes (splice(2)) where it can. An
// error matching os.ErrClosed means r was closed meanwhile.
func (w *PipeWriter) ReadFrom(r io.Reader) (int64, error) {
	if f, ok := r.(*os.File); ok {
		if n, handled, err := splicePipe(w.f, f, &w.n); handled {
			if err != nil {
				if _, serr := f.Stat(); errors.Is(serr, os.ErrClosed) {
					err = fmt.Errorf("%w (%v)", os.ErrClosed, err)
				}
			}
			return n, err
		}
	}
	return io.CopyBuffer(writerOnly{w}, readerOnly{r}, make([]byte, pipeCopyBuffer))
}

// PipeReader is what a provider sees as ExecIO.Stdin, in a plugin, when
// the host carries the exec's bytes over the data channel: the read end
// of an OS pipe the host writes to, which ends when the host's input
// does.
type PipeReader struct {
	f    *os.File
	once sync.Once
}

// Read reads from the pipe.
func (r *PipeReader) Read(p []byte) (int, error) { return r.f.Read(p) }

// File is the pipe, for a provider to give a process as its standard
// input, as it is: the process then reads what the host writes with
// nothing in between. It makes the pipe blocking, as a process expects
// its input to be (Read then blocks a thread). The SDK closes it when the
// exec ends; the provider must not.
func (r *PipeReader) File() *os.File {
	r.once.Do(func() {
		if rc, err := r.f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = setBlocking(fd) })
		}
	})
	return r.f
}

// readerOnly and writerOnly hide ReadFrom and WriteTo, so that a copy
// through them uses its buffer.
type readerOnly struct{ io.Reader }

type writerOnly struct{ io.Writer }
