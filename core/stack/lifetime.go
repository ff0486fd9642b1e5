package stack

import (
	"context"
	"fmt"
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
