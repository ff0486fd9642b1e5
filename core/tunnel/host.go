package tunnel

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
)

// HostOptions configure Open.
type HostOptions struct {
	// Worker is argv[0] of the tunnel exec: the path of amelia-worker inside
	// the sandbox (required).
	Worker string
	// Listen is the address the sandbox end listens on, inside the sandbox;
	// it must be loopback. Default "127.0.0.1:0" (the port is chosen there
	// and reported by Addr).
	Listen string
	// Run, instead of Listen, is the directory of a detached run whose
	// supervisor holds the sandbox end (amelia-worker detach --tunnel):
	// the tunnel exec only carries it (amelia-worker tunnel --run), and
	// Addr is the address the run's agent was given. The exec must run as
	// the run's user, whose directory it is. When the run has ended, Open
	// fails with ErrRunEnded.
	Run string
	// Target is the host address every connection is piped to: a loopback
	// IP and port (the proxy never leaves host loopback). Required.
	Target string
	// Env is extra environment for the tunnel exec (AMELIA_LOG_LEVEL...).
	Env    map[string]string
	Logger *slog.Logger
}

// defaultListen is the sandbox end's listen address when HostOptions.Listen is
// empty.
const defaultListen = "127.0.0.1:0"

// Bounds of the host end.
const (
	// closeWait is how long Close waits for the worker to exit on its own
	// once its stdin is closed, before it cancels the exec.
	closeWait = 5 * time.Second
	// cancelGrace is the tunnel exec's grace between SIGTERM and SIGKILL.
	cancelGrace = 2 * time.Second
	// maxLogLine bounds a line of the worker's stderr held for the log.
	maxLogLine = 4 << 10
)

// ErrRunEnded: the detached run whose tunnel Open was to carry has ended,
// and its tunnel with it.
var ErrRunEnded = errors.New("the run has ended, and its tunnel with it")

// errTunnelClosed ends the session's reads once the host end is shutting
// down, and the sandbox end's writes once the exec is over.
var errTunnelClosed = errors.New("tunnel closed")

// Host is the host end of a tunnel: the tunnel exec, the yamux session over
// its stdin and stdout, and a pipe to Target for every connection made to
// Addr inside the sandbox.
type Host struct {
	addr    string // set (under mu) before the hello reaches Open
	target  string
	runDir  string // HostOptions.Run
	worker  string
	log     *slog.Logger
	session *yamux.Session
	stdin   *io.PipeReader // the exec's stdin, written by the session
	out     *DrainWriter   // the exec's stdout, read by the session
	stderr  *execreport.Stderr
	yamuxed *lastError // yamux's last error line: why a session ended
	ctx     context.Context
	cancel  context.CancelFunc // ends the exec and pending dials

	hello    chan sandboxend.Hello // the control stream's Hello, once
	stop     chan struct{}         // closed by Close, or by Open giving up
	execDone chan struct{}         // closed when Exec has returned
	done     chan struct{}         // closed when everything has returned
	tasks    sync.WaitGroup
	stopping sync.Once

	mu       sync.Mutex
	ending   ending // why the host end stopped the tunnel, if it did
	status   sdk.ExitStatus
	execErr  error // from Exec itself
	execOver bool
	lost     error // the session ended while the exec ran
	err      error // why the tunnel ended (after done)
}

// ending is why the host end is stopping the tunnel.
type ending int

const (
	running  ending = iota
	closing         // Close: graceful
	aborting        // Open gave up: cancel at once
)

// Open starts the tunnel exec and returns once the sandbox end has said Hello
// (its listener is up), or with an error — including the exec's exit status
// and the tail of its stderr if it exited before saying Hello (a wrong worker
// path exits 127) — bounded by ctx. The tunnel's own lifetime is not ctx's:
// it runs until Close, or until the exec or the session dies (see Done).
func Open(ctx context.Context, ex sandboxexec.Execer, opts HostOptions) (*Host, error) {
	if opts.Worker == "" {
		return nil, errors.New("open tunnel: no worker path")
	}
	argv := []string{opts.Worker, "tunnel", "--run", opts.Run}
	switch {
	case opts.Run != "" && opts.Listen != "":
		return nil, errors.New("open tunnel: a run's tunnel listens where its supervisor does: give Run or Listen, not both")
	case opts.Run != "":
		if !path.IsAbs(opts.Run) {
			return nil, fmt.Errorf("open tunnel: run directory %q: want an absolute path inside the sandbox", opts.Run)
		}
	default:
		if opts.Listen == "" {
			opts.Listen = defaultListen
		}
		if err := checkListen(opts.Listen); err != nil {
			return nil, fmt.Errorf("open tunnel: %w", err)
		}
		argv = []string{opts.Worker, "tunnel", "--listen", opts.Listen}
	}
	if err := checkTarget(opts.Target); err != nil {
		return nil, fmt.Errorf("open tunnel: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open tunnel: %w", err)
	}

	stdinR, stdinW := io.Pipe()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	h := &Host{
		target:   opts.Target,
		runDir:   opts.Run,
		worker:   opts.Worker,
		log:      opts.Logger.With("tunnel_target", opts.Target),
		stdin:    stdinR,
		out:      NewDrainWriter(errTunnelClosed),
		yamuxed:  &lastError{},
		ctx:      runCtx,
		cancel:   cancel,
		hello:    make(chan sandboxend.Hello, 1),
		stop:     make(chan struct{}),
		execDone: make(chan struct{}),
		done:     make(chan struct{}),
	}
	h.stderr = &execreport.Stderr{}
	cfg := sandboxend.SessionConfig(opts.Logger)
	cfg.Logger = log.New(io.MultiWriter(h.yamuxed, slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug).Writer()), "", 0)
	// The session never fails to start on a valid config and a fresh conn.
	h.session, _ = yamux.Server(&ExecConn{In: stdinW, Out: h.out}, cfg)

	req := sdk.ExecRequest{
		Argv:        argv,
		Env:         opts.Env,
		CancelGrace: cancelGrace,
	}
	h.tasks.Add(2) // acceptLoop and supervise; run waits for them
	go h.run(ex, req)
	go h.acceptLoop()
	go h.supervise()

	select {
	case hello := <-h.hello:
		h.log.Info("tunnel open", "addr", h.addr, "worker_version", hello.Version)
		return h, nil
	case <-h.done:
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.lost != nil {
			return nil, fmt.Errorf("open tunnel: session lost before the hello: %v; %s", h.lost, describeExit(h.status, h.execErr))
		}
		if h.runEnded() {
			return nil, fmt.Errorf("open tunnel: %w", ErrRunEnded)
		}
		return nil, fmt.Errorf("open tunnel: %w", h.endReason("before it said hello"))
	case <-ctx.Done():
		h.shutdown(aborting)
		<-h.done
		msg := fmt.Sprintf("open tunnel: no hello from %s tunnel: %v", opts.Worker, context.Cause(ctx))
		if tail := h.stderr.Tail(); tail != "" {
			msg += "; its stderr: " + tail
		}
		return nil, errors.New(msg)
	}
}

// Addr is the address the sandbox end listens on, inside the sandbox (from
// its Hello, so a port 0 is resolved).
func (h *Host) Addr() string { return h.addr }

// Done is closed when the tunnel has ended: its exec died, its session died,
// or Close. By then every goroutine of the tunnel has returned.
func (h *Host) Done() <-chan struct{} { return h.done }

// Err says why the tunnel ended, once Done is closed: nil after Close,
// otherwise a one-line error naming the exec's exit status and its stderr's
// last lines, or why the session was lost. Before Done it is nil.
func (h *Host) Err() error {
	select {
	case <-h.done:
	default:
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Close ends the tunnel gracefully: it closes the exec's stdin (the worker
// then exits 0), waits for the exec a bounded time, then cancels it. It
// returns once everything has returned; calling it again is harmless. It
// always returns nil: a tunnel that had already ended keeps its Err.
func (h *Host) Close() error {
	h.shutdown(closing)
	<-h.done
	return nil
}

// shutdown ends the session, which closes the exec's stdin; supervise does
// the rest.
func (h *Host) shutdown(why ending) {
	h.stopping.Do(func() {
		h.mu.Lock()
		if h.ending == running {
			h.ending = why
		}
		h.mu.Unlock()
		close(h.stop)
		h.session.Close()
	})
}

// supervise ends the exec when it should end before it does: at once when
// the session was lost (a keepalive failure, a protocol error) or Open gave
// up, closeWait after Close closed its stdin.
func (h *Host) supervise() {
	defer h.tasks.Done()
	select {
	case <-h.execDone:
		return
	case <-h.stop:
	case <-h.session.CloseChan():
	}
	h.mu.Lock()
	why, over := h.ending, h.execOver
	if why == running && !over {
		h.lost = h.yamuxed.get()
		if h.lost == nil {
			h.lost = errors.New("the multiplexed session closed")
		}
		h.log.Warn("tunnel session lost; stopping the tunnel exec", "err", h.lost)
	}
	h.mu.Unlock()
	switch {
	case over:
	case why == closing:
		t := time.NewTimer(closeWait)
		defer t.Stop()
		select {
		case <-h.execDone:
		case <-t.C:
			h.log.Warn("tunnel exec still running after its stdin closed; cancelling it", "wait", closeWait)
			h.cancel()
		}
	default:
		h.cancel()
	}
}

// run runs the tunnel exec, then takes everything else down and closes done.
func (h *Host) run(ex sandboxexec.Execer, req sdk.ExecRequest) {
	st, err := ex.Exec(h.ctx, req, sdk.ExecIO{Stdin: h.stdin, Stdout: h.out, Stderr: io.MultiWriter(h.stderr, &debugLines{log: h.log})})
	h.mu.Lock()
	h.status, h.execErr, h.execOver = st, err, true
	h.mu.Unlock()
	close(h.execDone)

	// The exec is over: its stdin reader (still read by a provider's stdin
	// pump, perhaps) fails, and the session sees the end of its stdout.
	h.stdin.CloseWithError(errTunnelClosed)
	h.out.End()
	h.session.Close() // every stream ends, so every pipe does
	h.cancel()
	h.tasks.Wait() // acceptLoop, the pipes and supervise

	h.mu.Lock()
	switch {
	case h.ending == closing:
		h.err = nil
		h.log.Info("tunnel closed", "exit", describeExit(st, err))
	case h.lost != nil:
		h.err = fmt.Errorf("tunnel session lost: %v; %s", h.lost, describeExit(st, err))
	case h.runEnded():
		// What a run's tunnel comes to: nothing to warn of.
		h.err = fmt.Errorf("tunnel to sandbox ended: %w", ErrRunEnded)
		h.log.Info("tunnel ended with its run")
	default:
		h.err = fmt.Errorf("tunnel to sandbox ended: %w", h.endReason(""))
	}
	if h.err != nil && h.addr != "" && !errors.Is(h.err, ErrRunEnded) {
		h.log.Warn("tunnel ended", "err", h.err)
	}
	h.mu.Unlock()
	close(h.done)
}

// runEnded reports whether the exec of a run's tunnel (HostOptions.Run)
// said that run has ended; h.mu held, once the exec is over.
func (h *Host) runEnded() bool {
	return h.runDir != "" && h.execErr == nil && h.status.Code == sandboxend.ExitRunEnded
}

// endReason describes how the exec ended, with its stderr's tail; h.mu held.
func (h *Host) endReason(when string) error {
	msg := "amelia-worker tunnel"
	if h.addr == "" {
		msg += " (" + h.worker + ")"
	}
	if when != "" {
		when = " " + when
	}
	tail := h.stderr.Tail()
	if tail != "" {
		tail = ": " + tail
	}
	if h.execErr != nil {
		// Wrapped: callers tell a sandbox that is gone (sdk.ErrNotFound)
		// from the rest.
		return fmt.Errorf("exec %s%s: %w%s", msg, when, h.execErr, tail)
	}
	return fmt.Errorf("%s ended with %s%s%s", msg, execreport.Status(h.status), when, tail)
}

// describeExit is how the exec ended: its status, or why it failed to run.
func describeExit(st sdk.ExitStatus, err error) string {
	if err != nil {
		return "exec failed: " + err.Error()
	}
	return execreport.Status(st)
}

// acceptLoop reads the Hello from the control stream, then pipes every
// further stream to Target until the session ends.
func (h *Host) acceptLoop() {
	defer h.tasks.Done()
	control, err := h.session.AcceptStream()
	if err != nil {
		return
	}
	hello, err := sandboxend.ReadHello(control)
	control.Close()
	if err != nil {
		h.log.Warn("tunnel: bad control stream", "err", err)
		h.session.Close()
		return
	}
	h.mu.Lock()
	h.addr = hello.Listen
	h.mu.Unlock()
	h.hello <- hello
	for {
		s, err := h.session.AcceptStream()
		if err != nil {
			return
		}
		h.tasks.Add(1)
		go func() {
			defer h.tasks.Done()
			h.serveStream(s)
		}()
	}
}

// serveStream pipes one connection made inside the sandbox to Target. If
// Target cannot be reached, the stream is closed, and so is the connection.
func (h *Host) serveStream(s *yamux.Stream) {
	defer s.Close()
	if err := netpipe.Forward(h.ctx, s, h.target); err != nil {
		h.log.Warn("tunnel: cannot reach the target; closing the connection", "err", err)
	}
}

// checkTarget accepts only a loopback IP and port: the host end never pipes
// the sandbox's connections anywhere but host loopback.
func checkTarget(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("tunnel target %q: want a loopback IP:PORT such as 127.0.0.1:8080", addr)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("tunnel target %q: the tunnel leads to host loopback only; use 127.0.0.1 or [::1]", addr)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("tunnel target %q: bad port", addr)
	}
	return nil
}

// checkListen refuses a sandbox listen address that is not loopback, as the
// worker does, before anything starts.
func checkListen(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err == nil && host == "localhost" {
		return nil
	}
	if err == nil {
		if ip, perr := netip.ParseAddr(host); perr == nil && ip.IsLoopback() {
			return nil
		}
	}
	return fmt.Errorf("tunnel listen address %q: the sandbox end listens on loopback only, e.g. 127.0.0.1:0", addr)
}

// debugLines logs the worker's stderr, line by line, at debug level.
type debugLines struct {
	log  *slog.Logger
	line []byte // a partial line
}

func (w *debugLines) Write(p []byte) (int, error) {
	if !w.log.Enabled(context.Background(), slog.LevelDebug) {
		return len(p), nil
	}
	w.line = append(w.line, p...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			break
		}
		w.log.Debug("tunnel worker: " + execreport.Printable(string(w.line[:i])))
		w.line = w.line[i+1:]
	}
	if len(w.line) > maxLogLine {
		w.line = w.line[:0]
	}
	return len(p), nil
}

// lastError keeps yamux's last error line ("[ERR] yamux: keepalive failed:
// ..."), the only account it gives of why a session ended.
type lastError struct {
	mu   sync.Mutex
	line string
}

func (l *lastError) Write(p []byte) (int, error) {
	if s, ok := strings.CutPrefix(strings.TrimSpace(string(p)), "[ERR] "); ok {
		l.mu.Lock()
		l.line = s
		l.mu.Unlock()
	}
	return len(p), nil
}

func (l *lastError) get() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.line == "" {
		return nil
	}
	return errors.New(l.line)
}
