package envelope

import (
	"context"
	"errors"
	"time"
)

// Sessions is how a provider whose commands all ride one command session
// (a Mux on `amelia-worker mux`) gives RunOn the worker and the session.
type Sessions interface {
	// Worker returns the worker's path in the sandbox, installing it the
	// first time.
	Worker(ctx context.Context) (string, error)
	// WorkerGone forgets worker, which the sandbox no longer has (err says
	// how that showed), so that the next Worker installs it again.
	WorkerGone(worker string, err error)
	// Session returns the command session on worker, starting it when
	// there is none or it ended.
	Session(ctx context.Context, worker string) (*Mux, error)
	// KillLeft kills the process session pid leads and the processes
	// tagged tag: what a command whose session broke may have left, in
	// case the break did not reach the worker (which kills them itself
	// when it sees its client gone). It runs in the background.
	KillLeft(tag string, pid int)
}

// RunOn runs cmd on s's command session. A worker found missing is put
// back, and a session found ended before the command started is started
// again, once each: nothing had run. A session that broke once the command
// had started returns ErrBroken (the command's fate is unknown), with
// KillLeft started for what it may have left.
func RunOn(ctx context.Context, s Sessions, cmd Command, eio IO, grace time.Duration) (Result, error) {
	reinstalled, restarted := false, false
	for {
		worker, err := s.Worker(ctx)
		if err != nil {
			return Result{}, err
		}
		m, err := s.Session(ctx, worker)
		if errors.Is(err, ErrNoWorker) && !reinstalled {
			s.WorkerGone(worker, err)
			reinstalled = true
			continue
		}
		if err != nil {
			return Result{}, err
		}
		res, err := m.Run(ctx, cmd, eio, grace)
		if !restarted && (errors.Is(err, ErrClosed) || errors.Is(err, ErrBroken) && res.Pid == 0 && m.Ended()) {
			// The session was gone before the command started (a dropped
			// connection not yet noticed): nothing ran.
			restarted = true
			continue
		}
		if errors.Is(err, ErrBroken) && res.Pid > 0 {
			go s.KillLeft(cmd.Tag, res.Pid)
		}
		return res, err
	}
}
