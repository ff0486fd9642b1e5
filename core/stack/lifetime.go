package stack

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/backoff"
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

// KeepAwake holds the sandbox busy (core/lifetime) until release is
// called, so that its watchdog does not take the pause between two of the
// host's commands for the end of the work: a run holds it from when its
// worker is in until its cleanups end, past its agent's end. It is one
// exec that waits for its stdin to end, which it does when the host
// goes, however it goes (released, killed, its connection closed). When
// the exec is lost while the host goes on (a dropped connection, a plugin
// that died), it is taken again. KeepAwake returns once the first try
// took the hold or failed; a failure is a warning, as a watchdog that
// does not start is, and the tries go on. The hold outlives ctx's
// cancellation, for the cleanups of an interrupted command; release may
// be called more than once. Where the stack starts no watchdog, it does
// nothing.
func (s *Stack) KeepAwake(ctx context.Context) (release func(context.Context) error) {
	if s.activity.Load() == nil {
		return func(context.Context) error { return nil }
	}
	kept, stop := context.WithCancel(context.WithoutCancel(ctx))
	first := make(chan struct{})
	last := make(chan *sandboxexec.Held, 1)
	go func() { last <- s.keepAwake(kept, first) }()
	select {
	case <-first:
	case <-ctx.Done():
	}
	var (
		mu  sync.Mutex // one release at a time
		h   *sandboxexec.Held
		got bool // h is the last hold
	)
	return func(ctx context.Context) error {
		stop()
		mu.Lock()
		defer mu.Unlock()
		if !got {
			select {
			case h = <-last:
				got = true
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if h == nil {
			return nil
		}
		select {
		case <-h.Done():
			return nil // lost, not taken again, or released before
		default:
			return h.Release(ctx)
		}
	}
}

// keepAwake takes the hold, and again whenever it is lost, until ctx is
// done; first is closed once the first try is over. It returns the last
// hold (nil: none was taken).
func (s *Stack) keepAwake(ctx context.Context, first chan<- struct{}) *sandboxexec.Held {
	log := s.host.Logger
	b := backoff.Reconnect() // started over by a hold that lasted longer than its longest wait
	var h *sandboxexec.Held
	warned := false
	for {
		again, err := s.holdAwake(ctx)
		if first != nil {
			close(first)
			first = nil
		}
		switch {
		case err == nil:
			h, warned = again, false
			took := time.Now()
			select {
			case <-ctx.Done():
				return h
			case <-h.Done():
			}
			if time.Since(took) > b.Most {
				b.Reset()
			}
			log.Debug("the exec that keeps the sandbox awake ended; taking it again", "err", h.Err())
		case ctx.Err() != nil:
			return h
		case !warned:
			log.Warn("the sandbox may stop between this host's commands once past its lifetime: it could not be kept awake; trying again", "err", err)
			warned = true
		}
		if !b.Wait(ctx) {
			return h
		}
		// A plugin that died is started again (nothing when it lives).
		if _, err := s.Repair(ctx); err != nil {
			log.Debug("start the provider plugin again", "err", err)
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
