package stack

import (
	"context"
	"fmt"
	"maps"
	"path"
	"strings"

	"github.com/amelia-sandbox/amelia/core/lifetime"
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
