package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// closeWait bounds how long Close waits for the worker to end on its own
// after its stdin closed, before it stops it.
const closeWait = 30 * time.Second

// Session runs ExecuteAgentic and Generate calls through one long-lived
// `amelia-worker serve` in the sandbox (the Python Amelia's persistent
// worker), started by the first call: one exec for the life of the session
// instead of three per call (the prompt file, the worker, the cleanup);
// prompts travel inside the requests. A schema is written to a file of
// the session's once and removed by Close.
//
// Calls run one at a time, in the order they get the session; each waits
// for the one before to end. The contract is Driver's (see the package
// documentation), plus: a call that is cancelled, whose iteration is
// stopped early, or that reads something that is not the protocol ends
// the worker, and so does a worker that dies; the next call starts a fresh
// one. Frames are bounded as lines are, by Driver.MaxLineBytes: the message
// a frame carries may be that long, the frame twice that.
//
// Do not call the session from inside an ExecuteAgentic loop: the call in
// progress holds it. Close the session when done.
type Session struct {
	d  *Driver
	id string // names the session's files

	mu      sync.Mutex // one call at a time, held for all of it
	w       *serveWorker
	schemas map[[sha256.Size]byte]string // schema files written, by the schema's sha256
	closed  bool
}

// Persistent returns a Session that runs d's calls through one worker in
// d's sandbox; d's fields must not change while it is open. Its worker
// needs an exec whose stdin stays open while it runs, which the provider
// contract requires of every provider (the conformance kit's Exec and
// Cancel groups check it), so there is no transport to fall back from.
func (d *Driver) Persistent() *Session {
	return &Session{d: d, id: randomHex(8), schemas: map[[sha256.Size]byte]string{}}
}

// dir is the directory of the session's files inside the sandbox.
func (s *Session) dir() string { return FilePrefix + "session-" + s.id }

// errSessionClosed is the error of a call on a closed Session.
var errSessionClosed = errors.New("the session is closed")

// ExecuteAgentic runs req in the session's worker and yields its messages
// as Driver.ExecuteAgentic does.
func (s *Session) ExecuteAgentic(ctx context.Context, req AgenticRequest) iter.Seq2[protocol.AgenticMessage, error] {
	return s.d.agentic(req, func(each func(*protocol.AgenticMessage) bool) (workerOutput, error) {
		r := &protocol.Request{Mode: protocol.ModeAgentic, Prompt: req.Prompt, Model: req.Model, Cwd: &req.Cwd, MaxTurns: req.MaxTurns}
		if req.Instructions != "" {
			r.Instructions = &req.Instructions
		}
		return s.call(ctx, r, nil, each)
	})
}

// Usage returns the usage the worker reported for the last ExecuteAgentic
// on s (or on its Driver), as Driver.Usage does.
func (s *Session) Usage() *protocol.DriverUsage { return s.d.Usage() }

// Generate runs one generate call in the session's worker, as
// Driver.Generate does; req.System goes as the request's instructions.
func (s *Session) Generate(ctx context.Context, req GenerateRequest, schema json.RawMessage) (json.RawMessage, protocol.DriverUsage, error) {
	resolved, err := s.d.prepareGenerate(req, schema)
	if err != nil {
		return nil, protocol.DriverUsage{}, err
	}
	r := &protocol.Request{Mode: protocol.ModeGenerate, Prompt: req.Prompt, Model: req.Model}
	if req.System != "" {
		r.Instructions = &req.System
	}
	out, err := s.call(ctx, r, schema, func(*protocol.AgenticMessage) bool { return true })
	return s.d.generateAnswer(out, err, resolved)
}

// call sends r to the session's worker, starting one when there is none,
// and reads its answer: each is called for every message but usage. With
// a schema, its file is written first (once per session) and named in r.
func (s *Session) call(ctx context.Context, r *protocol.Request, schema json.RawMessage, each func(*protocol.AgenticMessage) bool) (workerOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return workerOutput{}, fmt.Errorf("amelia-worker serve on %s: %w", s.d.provider(), errSessionClosed)
	}
	if len(schema) > 0 {
		path, err := s.schemaFile(ctx, schema)
		if err != nil {
			return workerOutput{}, err
		}
		r.SchemaPath = &path
	}
	frame, err := protocol.AppendRequest(nil, r)
	if err != nil {
		return workerOutput{}, fmt.Errorf("%w: %w", sdk.ErrInvalid, err)
	}
	if s.w == nil || s.w.gone() {
		s.w = s.d.startServe(ctx)
	}
	w := s.w
	out, clean, err := s.d.converse(ctx, w, frame, string(r.Mode), each)
	if !clean {
		// Frames of this command may still come: the worker is of no
		// more use.
		w.stop()
		s.w = nil
	}
	return out, err
}

// schemaFile returns the path of the session's file holding schema,
// writing it the first time.
func (s *Session) schemaFile(ctx context.Context, schema json.RawMessage) (string, error) {
	sum := sha256.Sum256(schema)
	if p, ok := s.schemas[sum]; ok {
		return p, nil
	}
	f := sandboxFile{what: "schema", path: s.dir() + "/schema-" + hex.EncodeToString(sum[:8]) + ".json", data: string(schema)}
	if err := s.d.writeFile(ctx, s.dir(), f); err != nil {
		return "", err
	}
	s.schemas[sum] = f.path
	return f.path, nil
}

// Close ends the session: the worker's stdin closes, so it exits once its
// command (if any) is done, and the session's schema files are removed. A
// call in progress ends first. Close is idempotent; calls after it fail.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if w := s.w; w != nil {
		s.w = nil
		if err := w.close(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(s.schemas) > 0 {
		// The files outlive the call that wrote them; the session's own
		// context is gone, so a fresh one bounds their removal.
		if err := s.d.removeDir(context.Background(), s.dir()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// serveWorker is one `amelia-worker serve` and the pipes to it.
type serveWorker struct {
	stdin  *io.PipeWriter
	out    *io.PipeReader
	frames *protocol.FrameDecoder
	stderr execreport.Stderr
	cancel context.CancelFunc
	ended  chan struct{} // closed when its exec has returned
	end    execEnd       // how, once ended is closed
}

// errWorkerEnded fails writes to the stdin of a worker whose exec ended.
var errWorkerEnded = errors.New("the worker's exec has ended")

// startServe starts `amelia-worker serve`. The exec lives past the call
// that starts it (its context keeps ctx's values, not its end): the
// session ends it.
func (d *Driver) startServe(ctx context.Context) *serveWorker {
	execCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	w := &serveWorker{stdin: inW, out: outR, cancel: cancel, ended: make(chan struct{})}
	w.frames = protocol.NewFrameDecoder(outR, protocol.WithMaxLineBytes(d.MaxLineBytes))
	req := sdk.ExecRequest{Argv: []string{d.Worker, "serve"}, Env: d.Env, CancelGrace: cancelGrace}
	go func() {
		st, err := d.Exec.Exec(execCtx, req, sdk.ExecIO{Stdin: inR, Stdout: outW, Stderr: &w.stderr})
		w.end = execEnd{st, err}
		outW.Close()
		inR.CloseWithError(errWorkerEnded)
		close(w.ended)
	}()
	d.logger().Debug("serve worker started")
	return w
}

// gone reports whether the worker's exec has ended.
func (w *serveWorker) gone() bool {
	select {
	case <-w.ended:
		return true
	default:
		return false
	}
}

// stop ends the worker: its exec is cancelled (the provider stops its
// process tree), what it still writes is read and dropped.
func (w *serveWorker) stop() {
	w.cancel()
	_, _ = io.Copy(io.Discard, w.out)
	<-w.ended
}

// close ends the worker as a session's end does: its stdin closes, and
// it gets closeWait to exit before it is stopped.
func (w *serveWorker) close() error {
	w.stdin.Close()
	go io.Copy(io.Discard, w.out)
	timer := time.NewTimer(closeWait)
	defer timer.Stop()
	select {
	case <-w.ended:
	case <-timer.C:
		w.cancel()
		<-w.ended
	}
	w.cancel()
	if w.end.err != nil {
		return fmt.Errorf("amelia-worker serve: %w", w.end.err)
	}
	return nil
}

// converse sends one request frame to w and reads the command's frames
// until done. clean reports whether the command ended with its done frame
// and nothing of it is left to read, so that w can take the next one.
func (d *Driver) converse(ctx context.Context, w *serveWorker, frame []byte, mode string, each func(*protocol.AgenticMessage) bool) (out workerOutput, clean bool, err error) {
	log := d.logger().With("worker", "serve", "mode", mode)
	start := time.Now()
	// A cancelled call stops the worker, which ends the reads below.
	stopWatch := context.AfterFunc(ctx, w.cancel)
	defer stopWatch()

	if _, werr := w.stdin.Write(frame); werr != nil {
		// The worker is gone: its exec ended before it took the request.
		<-w.ended
		return out, false, d.serveFailed(ctx, w, mode, fmt.Errorf("send the request: %w", werr))
	}
	var (
		failure  *string // the error frame's text
		done     bool
		frameErr error
		stopped  bool
	)
	for !done && !stopped {
		f, ferr := w.frames.Decode()
		if ferr == io.EOF {
			break
		}
		if ferr != nil {
			frameErr = ferr
			break
		}
		switch f.Kind {
		case protocol.FrameDone:
			done = true
		case protocol.FrameError:
			if failure == nil {
				failure = f.Error
				if failure == nil {
					failure = new("")
				}
			}
		case protocol.FrameMsg:
			if f.Msg != nil {
				stopped = !out.take(f.Msg, each)
			}
		}
	}
	log.Debug("command ended", "done", done, "stopped", stopped, "bad_frame", frameErr != nil, "duration", time.Since(start))

	switch {
	case ctx.Err() != nil:
		return out, false, fmt.Errorf("amelia-worker serve %s on %s: %w", mode, d.provider(), ctx.Err())
	case frameErr != nil:
		return out, false, fmt.Errorf("amelia-worker serve on %s wrote a line that is not a protocol frame, so it was stopped: %w%s",
			d.provider(), frameErr, w.stderr.Note())
	case stopped:
		return out, false, nil
	case !done:
		// The worker ended in the middle of the command: as for a one-shot
		// worker that exits non-zero, a failed result is the failure.
		<-w.ended
		if out.result == nil || w.end.err != nil {
			return out, false, d.serveFailed(ctx, w, mode, nil)
		}
		if out.result.IsError {
			return out, false, nil
		}
		return out, false, fmt.Errorf("amelia-worker serve %s on %s: %w: it ended (%s) before the command was done, after a successful result%s",
			mode, d.provider(), ErrWorkerFailed, execreport.Status(w.end.status), w.stderr.Note())
	case out.result == nil && failure != nil:
		return out, true, fmt.Errorf("amelia-worker serve %s on %s: %w: %s", mode, d.provider(), ErrWorkerFailed, execreport.Printable(*failure))
	case out.result == nil:
		return out, true, fmt.Errorf("amelia-worker serve %s on %s: %w", mode, d.provider(), ErrNoResult)
	case failure != nil && !out.result.IsError:
		return out, true, fmt.Errorf("amelia-worker serve %s on %s: %w: it reported %q after a successful result",
			mode, d.provider(), ErrWorkerFailed, execreport.Printable(*failure))
	}
	return out, true, nil
}

// serveFailed is the error of a command whose worker ended before it was
// done; cause, when not nil, is what the host saw.
func (d *Driver) serveFailed(ctx context.Context, w *serveWorker, mode string, cause error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("amelia-worker serve %s on %s: %w", mode, d.provider(), ctx.Err())
	}
	if w.end.err != nil {
		return fmt.Errorf("run amelia-worker serve on %s: %w%s", d.provider(), w.end.err, w.stderr.Note())
	}
	what := "the worker ended in the middle of the command"
	if cause != nil {
		what = cause.Error()
	}
	return fmt.Errorf("amelia-worker serve %s on %s: %w: %s (%s)%s", mode, d.provider(), ErrNoResult, what,
		execreport.Status(w.end.status), w.stderr.Note())
}
