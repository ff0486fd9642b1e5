package stack

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// LifetimeDir is the sandbox's lifetime directory (core/lifetime), once
// Up; "" where the provider says of no way to stop its sandbox, which
// then gets no watchdog.
func (s *Stack) LifetimeDir() string {
	if s.Running == nil || s.Running.Details[sdk.DetailStop] == "" || s.Running.Workdir == "" {
		return ""
	}
	return path.Join(s.Running.Workdir, lifetime.Dir)
}

// ensureWatchdog starts the sandbox's watchdog with the profile's
// sandbox.idle_timeout and sandbox.max_lifetime, or hands the running one
// the profile's policy (`amelia-worker watchdog start` is idempotent).
// Nothing where the provider says of no way to stop the sandbox, or for a
// stack without a profile.
func (s *Stack) ensureWatchdog(ctx context.Context) error {
	dir := s.LifetimeDir()
	if dir == "" || s.profile == nil {
		return nil
	}
	// From now on the stack's commands are activity (asActivity).
	s.activity.Store(&activityWrap{worker: s.Worker, dir: dir})
	how := s.Running.Details[sdk.DetailStop]
	argv := []string{s.Worker, "watchdog", "start", "--dir", dir, "--stop", how,
		"--idle-timeout", s.profile.Sandbox.Idle().String(), "--max-lifetime", s.profile.Sandbox.Lifetime().String()}
	var stderr strings.Builder
	st, err := s.Exec(ctx, sdk.ExecRequest{Argv: argv}, sdk.ExecIO{Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("start the sandbox's lifetime watchdog: %w", err)
	}
	if st.Code != 0 {
		return fmt.Errorf("start the sandbox's lifetime watchdog: exit %d: %s", st.Code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// activityWrap is what asActivity needs: the worker, and the lifetime
// directory it passes on.
type activityWrap struct{ worker, dir string }

// asActivity makes req count as the sandbox's activity once the stack
// started its watchdog: it runs through `amelia-worker activity`, which
// holds the sandbox busy for as long as the command lives and then
// becomes it (execve: the same process, streams and exit status). The
// worker's own commands count themselves, and are left alone.
func (s *Stack) asActivity(req sdk.ExecRequest) sdk.ExecRequest {
	a := s.activity.Load()
	if a == nil || len(req.Argv) == 0 || req.Argv[0] == a.worker {
		return req
	}
	req.Argv = append([]string{a.worker, "activity", "--"}, req.Argv...)
	env := maps.Clone(req.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[lifetime.EnvDir] = a.dir // the worker takes it out of the command's environment
	req.Env = env
	return req
}

// keepAwakeScript says so once the activity's hold is taken (it runs
// through amelia-worker activity, which takes it first), then waits for
// its stdin to end.
const keepAwakeScript = `echo awake; exec cat >/dev/null`

// Waits between two tries to take the hold again (KeepAwake).
const (
	awakeRetryFirst = 200 * time.Millisecond
	awakeRetryMost  = 5 * time.Second
)

// KeepAwake holds the sandbox busy (core/lifetime) until release is
// called, so that its watchdog does not take the pause between two of the
// host's commands for the end of the work: a run holds it from when it
// reaches the sandbox until its work is back, past its agent's end. It is
// one exec that waits for its stdin to end, which it does however the
// host goes (released, killed, its connection gone); when the exec is
// lost while the host goes on (a dropped connection, a plugin that died),
// it is taken again. The hold outlives ctx's cancellation, for the
// cleanups of an interrupted command. Where the stack started no
// watchdog, it does nothing.
func (s *Stack) KeepAwake(ctx context.Context) (release func(context.Context) error, err error) {
	if s.activity.Load() == nil {
		return func(context.Context) error { return nil }, nil
	}
	h, err := s.holdAwake(ctx)
	if err != nil {
		return nil, fmt.Errorf("keep the sandbox awake: %w", err)
	}
	kept, stop := context.WithCancel(context.WithoutCancel(ctx))
	last := make(chan *sandboxexec.Held, 1)
	go func() { last <- s.keepHeld(kept, h) }()
	return func(ctx context.Context) error {
		stop()
		var h *sandboxexec.Held
		select {
		case h = <-last:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case <-h.Done():
			return nil // lost, and not taken again: nothing to let go
		default:
			return h.Release(ctx)
		}
	}, nil
}

// keepHeld takes the hold again whenever h ends, until ctx is done, and
// returns the last hold.
func (s *Stack) keepHeld(ctx context.Context, h *sandboxexec.Held) *sandboxexec.Held {
	log := s.host.Logger
	for {
		select {
		case <-ctx.Done():
			return h
		case <-h.Done():
		}
		log.Debug("the exec that keeps the sandbox awake ended; taking it again", "err", h.Err())
		for wait, warned := awakeRetryFirst, false; ; wait = min(2*wait, awakeRetryMost) {
			again, err := s.holdAwake(ctx)
			if err == nil {
				h = again
				break
			}
			if ctx.Err() != nil {
				return h
			}
			if !warned {
				log.Warn("the sandbox may stop between this host's commands once idle: it could not be kept awake; trying again", "err", err)
				warned = true
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return h
			case <-t.C:
			}
		}
	}
}

// holdAwake starts the exec that keeps the sandbox busy.
func (s *Stack) holdAwake(ctx context.Context) (*sandboxexec.Held, error) {
	return sandboxexec.Hold(ctx, "awake\n", func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
		var stderr strings.Builder
		st, err := s.Exec(ctx, sdk.ExecRequest{Argv: []string{"sh", "-c", keepAwakeScript}}, sdk.ExecIO{Stdin: stdin, Stdout: stdout, Stderr: &stderr})
		if err == nil && st.Code != 0 {
			err = fmt.Errorf("it ended with %s: %s", execreport.Status(st), strings.TrimSpace(stderr.String()))
		}
		return err
	})
}
