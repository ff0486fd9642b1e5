// Package execsession runs a run user's commands over one long-lived exec
// of the worker (`amelia-worker mux`, envelope.ServeMux) instead of an
// exec each.
//
// Where the provider separates runs by uid (sdk.Capabilities.RunUsers:
// docker), every step of a run inside its checkout runs as the run's uid:
// the checkout, its prompt, starting and following the agent, the commit,
// the result bundle. Each was an exec of its own, which on docker costs the
// engine three API calls and a runc exec, shared by every run on the
// engine. Through Sessions, the first command as a uid starts the worker
// as that uid, serving a session over the exec's stdin and stdout, and
// every later command as the uid is a stream on it: a fork in the sandbox.
//
// A session runs only what the host sends it, as the uid it runs as: it
// gives the uid nothing it does not have. The run's agent runs as the same
// uid and can signal the session's worker (which then ends its session:
// the next command starts another), but not read or write its streams:
// the worker makes itself non-dumpable. What separates runs must not rest
// on a session the agent's uid lived beside, so End closes the uid's
// session before the uid's processes are ended and its files removed, and
// that step runs as an exec of its own.
package execsession

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/internal/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Sessions is an sandboxexec.Execer that runs commands as a user other than the
// sandbox's (ExecRequest.User set) on a session per user, and every other
// command (the sandbox's user's, or one with a terminal) through the
// Execer under it as before.
type Sessions struct {
	ex     sandboxexec.Execer
	worker string
	log    *slog.Logger

	mu     sync.Mutex
	byUser map[string]*slot
}

// New returns Sessions over ex, with the worker at worker (an absolute
// path in the sandbox that every run user may execute).
func New(ex sandboxexec.Execer, worker string, log *slog.Logger) *Sessions {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sessions{ex: ex, worker: worker, log: log, byUser: map[string]*slot{}}
}

// slot is one user's session; its mutex is held while the session starts,
// so that commands meanwhile wait for it rather than start their own.
type slot struct {
	mu sync.Mutex
	s  *session
	// direct is set once the sandbox showed it cannot serve a session
	// (no worker where the path says), or the session was ended (End):
	// commands go through the Execer under Sessions.
	direct bool
}

// session is a running `amelia-worker mux` and the exec that carries it.
type session struct {
	mux   *envelope.Mux
	stdin *io.PipeWriter
	ended chan struct{} // closed when the exec returned
	err   error         // the exec's error, once ended
}

// SandboxRef is the sandbox of the Execer under it.
func (s *Sessions) SandboxRef() sdk.SandboxRef { return s.ex.SandboxRef() }

// Exec runs req: as a run user, on that user's session.
func (s *Sessions) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.User == "" || req.TTY {
		return s.ex.Exec(ctx, req, eio)
	}
	st, ran, err := s.onSession(ctx, req, envelope.Command{Argv: req.Argv, Env: req.Env, Dir: req.Dir}, eio)
	if !ran {
		return s.ex.Exec(ctx, req, eio)
	}
	return st, err
}

// Step runs the worker's typed request r as user ("": the sandbox's
// user): on the user's session, where the worker serves it in its own
// process; as `amelia-worker step` in an exec of its own where the user
// has no session (the sandbox cannot serve one, or End ended it), and for
// a bulky request (workstep.Bulky), which goes faster outside the
// session's framing.
func (s *Sessions) Step(ctx context.Context, user string, r workstep.Request, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if b, ok := r.(workstep.Bulky); !ok || !b.Bulky() {
		step, err := workstep.Encode(r)
		if err != nil {
			return sdk.ExitStatus{}, err
		}
		st, ran, err := s.onSession(ctx, sdk.ExecRequest{User: user}, envelope.Command{Step: &step}, eio)
		if ran {
			return st, err
		}
	}
	return StepExec(ctx, s.ex, s.worker, user, r, eio)
}

// StepExec runs the worker's typed request r as user in an exec of its
// own (`amelia-worker step`), the worker at worker.
func StepExec(ctx context.Context, ex sandboxexec.Execer, worker, user string, r workstep.Request, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	argv, err := workstep.Argv(worker, r)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	return ex.Exec(ctx, sdk.ExecRequest{Argv: argv, User: user}, eio)
}

// onSession runs cmd on req.User's session (started for req if need be);
// ran is false when the sandbox cannot serve one, and nothing ran.
func (s *Sessions) onSession(ctx context.Context, req sdk.ExecRequest, cmd envelope.Command, eio sdk.ExecIO) (st sdk.ExitStatus, ran bool, err error) {
	for restarted := false; ; restarted = true {
		m, err := s.session(ctx, req)
		if err != nil {
			return sdk.ExitStatus{}, true, err
		}
		if m == nil {
			return sdk.ExitStatus{}, false, nil
		}
		res, err := m.Run(ctx, cmd, envelope.IO{Stdin: eio.Stdin, Stdout: eio.Stdout, Stderr: eio.Stderr}, req.Grace())
		if !restarted && res.Pid == 0 && (errors.Is(err, envelope.ErrClosed) || errors.Is(err, envelope.ErrBroken) && m.Ended()) {
			// The session was gone before the command started (its
			// worker was killed): nothing ran; a new one takes it.
			continue
		}
		st := sdk.ExitStatus{Code: res.Code, Signal: res.Signal, Canceled: res.Canceled}
		switch {
		case errors.Is(err, envelope.ErrNoDir):
			return st, true, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", req.Dir)
		case errors.Is(err, envelope.ErrBroken), errors.Is(err, envelope.ErrClosed):
			return st, true, fmt.Errorf("%w: the command session as %s broke: %w", sdk.ErrUnavailable, userName(req.User), err)
		}
		return st, true, err
	}
}

// userName names user in messages.
func userName(user string) string {
	if user == "" {
		return "the sandbox's user"
	}
	return user
}

// session returns req.User's open session, starting one when there is
// none or the last ended; nil when the sandbox cannot serve one.
func (s *Sessions) session(ctx context.Context, req sdk.ExecRequest) (*envelope.Mux, error) {
	s.mu.Lock()
	sl := s.byUser[req.User]
	if sl == nil {
		sl = &slot{}
		s.byUser[req.User] = sl
	}
	s.mu.Unlock()
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.direct {
		return nil, nil
	}
	if sl.s != nil && !sl.s.mux.Ended() {
		return sl.s.mux, nil
	}
	ss, err := s.start(ctx, req)
	if errors.Is(err, envelope.ErrNoWorker) {
		s.log.Warn("no amelia-worker to serve a command session: an exec per command", "user", req.User, "worker", s.worker, "err", err)
		sl.direct = true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("start the command session as %s: %w", userName(req.User), err)
	}
	sl.s = ss
	return ss.mux, nil
}

// start starts the worker's mux as req.User, in the sandbox req names,
// and waits within ctx for its hello. The exec outlives ctx: it lasts
// until End or Close, or until its worker ends. Its input is the
// session's frames, so it is an interactive exec: a provider with a
// session of its own for the sandbox's user (docker) carries the
// sandbox's user's on it, a fork in the sandbox instead of an exec of
// the engine's.
func (s *Sessions) start(ctx context.Context, req sdk.ExecRequest) (*session, error) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ss := &session{stdin: inW, ended: make(chan struct{})}
	go func() {
		_, err := s.ex.Exec(context.Background(), sdk.ExecRequest{Sandbox: req.Sandbox, Argv: []string{s.worker, "mux"}, User: req.User, Traffic: sdk.TrafficMessages},
			sdk.ExecIO{Stdin: inR, Stdout: outW})
		if err == nil {
			err = io.EOF
		}
		ss.err = err
		outW.CloseWithError(err)
		inR.CloseWithError(err)
		close(ss.ended)
	}()
	type started struct {
		m   *envelope.Mux
		err error
	}
	ch := make(chan started, 1)
	go func() {
		m, err := envelope.NewMux(inW, outR)
		ch <- started{m, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			inW.Close()
			<-ss.ended
			return nil, r.err
		}
		ss.mux = r.m
		return ss, nil
	case <-ctx.Done():
		inW.Close()
		<-ss.ended
		if r := <-ch; r.m != nil {
			r.m.Close()
		}
		return nil, ctx.Err()
	}
}

// End ends user's session, if it has one, and waits within ctx for its
// exec to return (its worker kills whatever still runs on it); the user's
// later commands each get an exec of their own. For the step that ends
// the uid's processes and removes its files: nothing of the uid's may
// outlive that, the session included, and that step must not run on a
// session the uid's agent lived beside.
func (s *Sessions) End(ctx context.Context, user string) error {
	s.mu.Lock()
	sl := s.byUser[user]
	if sl == nil {
		sl = &slot{}
		s.byUser[user] = sl
	}
	s.mu.Unlock()
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.direct = true
	if sl.s == nil {
		return nil
	}
	err := sl.s.close(ctx)
	sl.s = nil
	return err
}

// Close ends every session, waiting within ctx for each.
func (s *Sessions) Close(ctx context.Context) error {
	s.mu.Lock()
	users := make([]string, 0, len(s.byUser))
	for u := range s.byUser {
		users = append(users, u)
	}
	s.mu.Unlock()
	var errs []error
	for _, u := range users {
		errs = append(errs, s.End(ctx, u))
	}
	return errors.Join(errs...)
}

// close ends the session and waits for its exec.
func (ss *session) close(ctx context.Context) error {
	ss.mux.Close()
	ss.stdin.Close()
	select {
	case <-ss.ended:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("end the command session: %w", ctx.Err())
	}
}

var _ sandboxexec.Execer = (*Sessions)(nil)
