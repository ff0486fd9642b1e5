package tunnel

import (
	"io"
	"sync/atomic"
)

// ExecConn is a session's connection over an exec's stdio: it writes the
// exec's stdin and reads its stdout (Out). The tunnel's host end and the
// host end of a port forward each carry a yamux session over one.
type ExecConn struct {
	In  *io.PipeWriter
	Out *DrainWriter
}

func (c *ExecConn) Read(p []byte) (int, error)  { return c.Out.r.Read(p) }
func (c *ExecConn) Write(p []byte) (int, error) { return c.In.Write(p) }

// Close closes the exec's stdin, which tells the worker to end, and stops
// the session's reads; from then on the exec's stdout is discarded, so the
// exec can finish writing and report how it ended.
func (c *ExecConn) Close() error {
	c.In.Close()
	c.Out.Drain()
	return nil
}

// DrainWriter is an exec's stdout: a pipe to the session until the session
// stops reading (Drain), then a sink. A write never blocks on a session
// that is gone.
type DrainWriter struct {
	w       *io.PipeWriter
	r       *io.PipeReader
	closed  error // what the session's reads fail with once drained
	discard atomic.Bool
}

// NewDrainWriter is a DrainWriter whose reads fail with closed once it
// is drained.
func NewDrainWriter(closed error) *DrainWriter {
	r, w := io.Pipe()
	return &DrainWriter{w: w, r: r, closed: closed}
}

// Reader is the pipe's read end, for what reads the exec's first lines
// before the session does.
func (d *DrainWriter) Reader() io.Reader { return d.r }

func (d *DrainWriter) Write(p []byte) (int, error) {
	if d.discard.Load() {
		return len(p), nil
	}
	n, err := d.w.Write(p)
	if err != nil && d.discard.Load() {
		return len(p), nil
	}
	return n, err
}

// End is the end of the exec's stdout: the session's reads see EOF once
// they have read what was written.
func (d *DrainWriter) End() { d.w.Close() }

// Drain makes the session's reads fail and every write succeed unread.
func (d *DrainWriter) Drain() {
	d.discard.Store(true)
	d.r.CloseWithError(d.closed)
}
