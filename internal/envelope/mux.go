package envelope

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// Many commands over one stream: a session through Daytona's gateway costs
// two fresh SSH connections upstream (about 20 ms), a round trip on a
// session that is open about 0.5 ms. ServeMux (`amelia-worker mux`) runs a
// yamux session on its stdin and stdout and serves the envelope on every
// stream the client opens; Mux is the client.

// streamWindow is how much of one command's output may be in flight.
const streamWindow = 4 << 20

// MuxHello is the first line ServeMux writes; the yamux session follows.
const MuxHello = "amelia-envelope-mux 1\n"

// ErrClosed: the mux session is closed, so a command could not start on
// it; nothing ran, and a new session may take it.
var ErrClosed = errors.New("the exec session is closed")

// muxConfig is the yamux configuration of both ends: keepalives notice a
// dead peer while no command runs; yamux logs nothing.
func muxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = 15 * time.Second
	cfg.LogOutput = io.Discard
	// yamux's default 256 KiB is all a stream may have in flight: through
	// a gateway a few milliseconds away, that caps a command's output well
	// below what the connection carries.
	cfg.MaxStreamWindowSize = streamWindow
	return cfg
}

// streamConn joins a stream's two directions for yamux.
type streamConn struct {
	io.Reader
	io.Writer
	close func() error
}

func (c *streamConn) Close() error {
	if c.close != nil {
		return c.close()
	}
	return nil
}

// ServeMux serves commands over in and out: it writes MuxHello, then
// serves every stream of the yamux session that follows as Serve does. It
// returns when the session ends (the client went away), once every
// command it ran has ended: those still running get killed, as Serve does
// for a client gone.
func ServeMux(in io.Reader, out io.Writer, environ []string) error {
	return serveMux(in, out, environ, nil)
}

// serveMux is ServeMux, serving the Steps in commands with steps.
func serveMux(in io.Reader, out io.Writer, environ []string, steps StepFunc) error {
	if f, ok := out.(*os.File); ok {
		growPipe(f) // the session's frames leave in fewer, larger pieces
	}
	if _, err := io.WriteString(out, MuxHello); err != nil {
		return fmt.Errorf("envelope: write the hello: %w", err)
	}
	sess, err := yamux.Server(&streamConn{Reader: in, Writer: newJoinedWriter(out)}, muxConfig())
	if err != nil {
		return fmt.Errorf("envelope: start the session: %w", err)
	}
	var wg sync.WaitGroup
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			break
		}
		wg.Go(func() {
			defer st.Close()
			_ = serve(st, st, environ, steps)
		})
	}
	sess.Close()
	wg.Wait()
	return nil
}

// MuxLine is the shell command line that starts the worker at path
// worker serving ServeMux. A worker that is not there says so on stdout,
// the one stream every transport carries, so that NewMux reports
// ErrNoWorker with the path.
func MuxLine(worker string) string {
	w := shexec.Quote(worker)
	return "test -x " + w + " || { echo 'no amelia-worker at '" + w + "; exit 127; }; exec " + w + " mux"
}

// Mux runs commands on a ServeMux at the other end of one stream.
type Mux struct {
	sess *yamux.Session
}

// NewMux starts the client end: in carries the session to the worker, out
// is its output, read up to MuxHello first (past a login shell's banner).
// It gives ErrNoWorker when something else answered, ErrBroken when the
// stream ended first. The session closes in when it ends, possibly while a
// Write is under way, so in's Close must be safe then: close the whole
// transport, not just its write half (x/crypto/ssh's CloseWrite races a
// concurrent Write).
func NewMux(in io.WriteCloser, out io.Reader) (*Mux, error) {
	br := bufio.NewReaderSize(out, 64<<10)
	if err := skipTo(br, MuxHello); err != nil {
		return nil, err
	}
	sess, err := yamux.Client(&streamConn{Reader: br, Writer: newJoinedWriter(in), close: in.Close}, muxConfig())
	if err != nil {
		return nil, fmt.Errorf("envelope: start the session: %w", err)
	}
	return &Mux{sess: sess}, nil
}

// Run runs cmd as Run does, on a stream of its own. A session that is
// already closed gives ErrClosed: nothing ran.
func (m *Mux) Run(ctx context.Context, cmd Command, eio IO, grace time.Duration) (Result, error) {
	st, err := m.sess.OpenStream()
	if err != nil {
		return Result{}, fmt.Errorf("%w (%v)", ErrClosed, err)
	}
	defer st.Close()
	return Run(ctx, st, st, cmd, eio, grace)
}

// Done is closed when the session ends.
func (m *Mux) Done() <-chan struct{} { return m.sess.CloseChan() }

// Ended reports whether the session has ended.
func (m *Mux) Ended() bool { return m.sess.IsClosed() }

// Close ends the session; the worker kills what still runs.
func (m *Mux) Close() error { return m.sess.Close() }
