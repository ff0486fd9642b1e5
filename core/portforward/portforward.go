// Package portforward is the host end of `amelia sandbox port-forward`: a
// listener on host loopback whose every connection is carried to a
// loopback port inside the sandbox, over the stdin and stdout of one
// `amelia-worker port-forward` exec the host opened (a yamux session; the
// wire format and the sandbox end are in core/portforward/sandboxend). It
// needs no route into the sandbox, so it works under `network: none` and on
// every provider that can run a command. It never listens anywhere but
// host loopback.
package portforward

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/portforward/sandboxend"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/tunnel"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
)

// Options configure Open.
type Options struct {
	// Worker is the path of amelia-worker inside the sandbox (required).
	Worker string
	// Port is the port inside the sandbox, on its 127.0.0.1 (required).
	Port int
	// Env is extra environment for the exec (AMELIA_LOG_LEVEL...).
	Env map[string]string
	// Refused, when set, is told of each connection the sandbox end could
	// not make (nothing listens on Port): the host connection is closed.
	Refused func(err error)
	Logger  *slog.Logger
}

// Bounds of the host end.
const (
	// closeWait is how long Close waits for the worker to exit on its own
	// once its stdin is closed, before it cancels the exec.
	closeWait = 5 * time.Second
	// cancelGrace is the exec's grace between SIGTERM and SIGKILL.
	cancelGrace = 2 * time.Second
	// statusWait bounds the wait for a stream's status line: the sandbox
	// end's dial is bounded by sandboxend.DialTimeout.
	statusWait = sandboxend.DialTimeout + 20*time.Second
)

// errClosed ends the session's reads once the host end is closing.
var errClosed = errors.New("port forward closed")

// Forward is one port forward: the exec in the sandbox and the yamux
// session over its stdio. Serve carries a listener's connections over it.
type Forward struct {
	port    int
	refused func(error)
	log     *slog.Logger
	session *yamux.Session
	stdin   *io.PipeWriter
	out     *tunnel.DrainWriter
	stderr  *execreport.Stderr
	cancel  context.CancelFunc

	execDone chan struct{} // closed when Exec has returned
	status   sdk.ExitStatus
	execErr  error

	conns   sync.WaitGroup
	closing sync.Once
}

// Open starts the worker's port-forward exec and returns once it said
// hello, or with an error that says why not (the exec's exit status and
// the tail of its stderr when it ended first), bounded by ctx. The forward
// itself lives until Close, or until the exec ends (Done).
func Open(ctx context.Context, ex sandboxexec.Execer, opts Options) (*Forward, error) {
	switch {
	case opts.Worker == "":
		return nil, errors.New("port-forward: no worker path")
	case opts.Port < 1 || opts.Port > 65535:
		return nil, fmt.Errorf("port-forward: port %d: want a port from 1 to 65535", opts.Port)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	stdinR, stdinW := io.Pipe()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &Forward{
		port:     opts.Port,
		refused:  opts.Refused,
		log:      opts.Logger.With("sandbox_port", opts.Port),
		stdin:    stdinW,
		out:      tunnel.NewDrainWriter(errClosed),
		stderr:   &execreport.Stderr{},
		cancel:   cancel,
		execDone: make(chan struct{}),
	}
	req := sdk.ExecRequest{
		Argv:        []string{opts.Worker, "port-forward", "--port", strconv.Itoa(opts.Port)},
		Env:         opts.Env,
		CancelGrace: cancelGrace,
		Traffic:     sdk.TrafficMessages,
	}
	go func() {
		defer close(f.execDone)
		f.status, f.execErr = ex.Exec(runCtx, req, sdk.ExecIO{Stdin: stdinR, Stdout: f.out, Stderr: f.stderr})
		// Whatever the session still reads ends: the exec is over.
		f.out.End()
		stdinR.CloseWithError(errClosed)
	}()

	hello := make(chan error, 1)
	go func() { hello <- sandboxend.ReadHello(f.out.Reader()) }()
	select {
	case err := <-hello:
		if err != nil {
			f.abort()
			return nil, fmt.Errorf("port-forward: start amelia-worker port-forward in the sandbox: %w; %s", err, f.describeExit())
		}
	case <-ctx.Done():
		f.abort()
		return nil, fmt.Errorf("port-forward: start amelia-worker port-forward in the sandbox: %w", ctx.Err())
	}
	cfg := sandboxend.SessionConfig(opts.Logger)
	// The session never fails to start on a valid config.
	f.session, _ = yamux.Client(&tunnel.ExecConn{In: stdinW, Out: f.out}, cfg)
	return f, nil
}

// abort ends the exec at once and waits for it.
func (f *Forward) abort() {
	f.stdin.Close()
	f.out.Drain()
	f.cancel()
	<-f.execDone
}

// describeExit says how the exec ended, once it has.
func (f *Forward) describeExit() string {
	<-f.execDone
	if f.execErr != nil {
		return "the exec failed: " + f.execErr.Error()
	}
	msg := "the exec ended with " + execreport.Status(f.status)
	if tail := f.stderr.Tail(); tail != "" {
		msg += ": " + tail
	}
	return msg
}

// Done is closed when the exec has ended: the forward carries nothing
// more.
func (f *Forward) Done() <-chan struct{} { return f.execDone }

// Err says why the exec ended, once Done is closed: nil after Close or a
// clean end.
func (f *Forward) Err() error {
	select {
	case <-f.execDone:
	default:
		return nil
	}
	if f.execErr == nil && f.status.Code == 0 {
		return nil
	}
	return errors.New(f.describeExit())
}

// Serve carries every connection accepted on ln to the port in the
// sandbox until ln is closed or the exec ends; it closes ln then, and
// returns once every connection it carried is closed.
func (f *Forward) Serve(ln net.Listener) error {
	defer f.conns.Wait()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-f.execDone:
		case <-f.session.CloseChan():
		case <-stop:
		}
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("port-forward: accept: %w", err)
		}
		f.conns.Go(func() { f.carry(c) })
	}
}

// carry pipes c through a new stream to the port in the sandbox.
func (f *Forward) carry(c net.Conn) {
	defer c.Close()
	s, err := f.session.OpenStream()
	if err != nil {
		f.log.Warn("port-forward: open a stream", "err", err)
		return
	}
	defer s.Close()
	s.SetReadDeadline(time.Now().Add(statusWait))
	if err := sandboxend.ReadStatus(s); err != nil {
		err = fmt.Errorf("connection from %s to port %d in the sandbox: %w", c.RemoteAddr(), f.port, err)
		f.log.Warn("port-forward: " + err.Error())
		if f.refused != nil {
			f.refused(err)
		}
		return
	}
	s.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-f.session.CloseChan():
			c.Close()
		case <-done:
		}
	}()
	netpipe.Pipe(c, s)
}

// Close ends the forward: the session and its connections, then the exec,
// which ends on its own once its stdin closes (cancelled after a bound).
func (f *Forward) Close() error {
	f.closing.Do(func() {
		if f.session != nil {
			f.session.Close()
		}
		f.stdin.Close()
		f.out.Drain()
		select {
		case <-f.execDone:
		case <-time.After(closeWait):
			f.log.Warn("port-forward: the worker did not end when its stdin closed; stopping it")
			f.cancel()
			<-f.execDone
		}
		f.cancel()
	})
	if f.execErr != nil {
		return fmt.Errorf("port-forward: %w", f.execErr)
	}
	return nil
}

// Listen listens on host loopback, port local (0: any): the only place a
// port forward ever listens.
func Listen(local int) (net.Listener, error) {
	if local < 0 || local > 65535 {
		return nil, fmt.Errorf("local port %d: want a port from 0 to 65535", local)
	}
	addr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(local))
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, nil
}
