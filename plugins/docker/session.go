package docker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
)

// Command sessions. A docker exec costs the engine three API calls
// (create, attach, inspect), a runc exec and tens of milliseconds of
// dockerd's CPU; the containers of one engine share that, so runs side by
// side in one sandbox wait on each other's execs. A command on a session
// costs a yamux stream and a fork in the container instead: the
// sandbox's user's commands go through one long-lived exec of the worker
// the image holds (`amelia-worker mux`), started on the
// first such command and kept while the container runs.
//
// Not every command: one that streams input (a bundle, say) moves it
// faster on an exec of its own than in the session's frames; and in a
// container without capabilities the worker cannot become another uid,
// so a command as a run's uid (sdk.Capabilities.RunUsers) or as root stays
// an exec of its own, which the engine starts as that user. A container
// whose image has no worker (a ready image, a profile's own Dockerfile),
// or one that does not speak the session, gets an exec per command as
// before.

// sessionStartTimeout bounds starting a session: the exec and the
// worker's hello.
const sessionStartTimeout = 30 * time.Second

// sessions are an engine's command sessions, by container and user.
type sessions struct {
	mu    sync.Mutex
	slots map[sessionKey]*sessionSlot
}

type sessionKey struct{ target, user string }

// sessionSlot is one container's session for one user. Its mutex is held
// while the session starts, so commands that come meanwhile wait for it
// rather than start sessions of their own.
type sessionSlot struct {
	mu  sync.Mutex
	mux *envelope.Mux
	// direct is set once the container showed it has no worker that
	// serves a session: every command is an exec of its own.
	direct bool
}

// slot returns the slot of target and user, made on first use.
func (s *sessions) slot(k sessionKey) *sessionSlot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil {
		s.slots = map[sessionKey]*sessionSlot{}
	}
	sl := s.slots[k]
	if sl == nil {
		sl = &sessionSlot{}
		s.slots[k] = sl
	}
	return sl
}

// forget closes and drops every session into target (its container is
// being removed), or every session when target is "" (the provider is
// closing).
func (s *sessions) forget(target string) {
	s.mu.Lock()
	var gone []*sessionSlot
	for k, sl := range s.slots {
		if target == "" || k.target == target {
			gone = append(gone, sl)
			delete(s.slots, k)
		}
	}
	s.mu.Unlock()
	for _, sl := range gone {
		sl.mu.Lock()
		if sl.mux != nil {
			sl.mux.Close()
		}
		sl.mu.Unlock()
	}
}

// session returns the open session into target as user, starting one if
// there is none or the last ended; nil when the container has no worker
// to serve one (then the caller execs as before).
func (e *engine) session(target, user string) (*envelope.Mux, error) {
	sl := e.sessions.slot(sessionKey{target, user})
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.direct {
		return nil, nil
	}
	if sl.mux != nil && !sl.mux.Ended() {
		return sl.mux, nil
	}
	m, err := e.startSession(target, user)
	if errors.Is(err, envelope.ErrNoWorker) {
		sl.direct = true
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sl.mux = m
	return m, nil
}

// startSession starts the image's worker serving a session in target as
// user, and waits for its hello. The session is not bound to any
// command's context: it lasts until its container stops or it is closed.
func (e *engine) startSession(target, user string) (*envelope.Mux, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionStartTimeout)
	defer cancel()
	x, err := e.startExec(ctx, target, client.ExecCreateOptions{
		User:         user,
		WorkingDir:   image.Workdir,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          []string{"sh", "-c", envelope.MuxLine(image.WorkerPath)},
	})
	if err != nil {
		return nil, err
	}
	// The worker writes its session to stdout; what it says on stderr (a
	// panic) is not the session's.
	out := newStdoutReader(x.conn.Reader)
	type started struct {
		m   *envelope.Mux
		err error
	}
	ch := make(chan started, 1)
	go func() {
		m, err := envelope.NewMux(hijackedWriter{x.conn}, out)
		ch <- started{m, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			x.conn.Close()
		}
		return r.m, r.err
	case <-ctx.Done():
		x.conn.Close() // ends NewMux
		<-ch
		return nil, fmt.Errorf("start the command session in container %s: no hello from amelia-worker within %v", target, sessionStartTimeout)
	}
}

// hijackedWriter is the write half of an exec's stream whose Close ends
// the whole stream, which the worker takes as its client gone.
type hijackedWriter struct{ conn client.HijackedResponse }

func (w hijackedWriter) Write(p []byte) (int, error) { return w.conn.Conn.Write(p) }
func (w hijackedWriter) Close() error                { w.conn.Close(); return nil }

// onSession says whether a command of the sandbox's user with traffic,
// which reads input if stdin, belongs on the command session: the
// session frames every byte once more in the container (0.6× the
// engine's own speed for a GiB of output), and the engine's own exec
// costs tens of milliseconds more to start.
func onSession(traffic sdk.Traffic, stdin bool) bool {
	switch traffic {
	case sdk.TrafficMessages:
		return true
	case sdk.TrafficBulk:
		return false
	default:
		return !stdin
	}
}

// execOnSession runs req on the session into target as user. ok is false
// when the container has no session to offer, and nothing ran: the caller
// execs as before. A session found ended before the command started is
// started again, once: nothing ran on it.
func (p *Provider) execOnSession(ctx context.Context, e *engine, target, user, dir string, req sdk.ExecRequest, eio sdk.ExecIO) (st sdk.ExitStatus, ok bool, err error) {
	for restarted := false; ; restarted = true {
		m, err := e.session(target, user)
		if err != nil {
			return st, true, sandboxError(err, req.Sandbox.Name)
		}
		if m == nil {
			return st, false, nil
		}
		res, err := m.Run(ctx, envelope.Command{Argv: req.Argv, Env: req.Env, Dir: dir},
			envelope.IO{Stdin: eio.Stdin, Stdout: eio.Stdout, Stderr: eio.Stderr}, req.Grace())
		if !restarted && res.Pid == 0 && (errors.Is(err, envelope.ErrClosed) || errors.Is(err, envelope.ErrBroken) && m.Ended()) {
			continue
		}
		st = sdk.ExitStatus{Code: res.Code, Signal: res.Signal, Canceled: res.Canceled}
		switch {
		case errors.Is(err, envelope.ErrNoDir):
			return st, true, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", dir)
		case errors.Is(err, envelope.ErrBroken), errors.Is(err, envelope.ErrClosed):
			// The worker kills what runs when its session ends; the
			// container going away is what usually ends it.
			return st, true, p.lostExec(e, target, req.Sandbox.Name, err)
		case err != nil:
			return st, true, err
		case res.Code > 128 && !res.Canceled:
			// Killed, and not by us: perhaps with its container.
			if err := p.checkAlive(e, target, req.Sandbox.Name, res.Code == 128+9); err != nil {
				return st, true, err
			}
		}
		return st, true, nil
	}
}
