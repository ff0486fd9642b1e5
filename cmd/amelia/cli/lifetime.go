package cli

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// asActivity makes req, a command of `sandbox exec`, count as the
// sandbox's activity (core/lifetime): where the sandbox has a watchdog,
// it is started (InstallWorker) and the command runs through
// `amelia-worker activity`, which holds the sandbox busy for as long as
// the command lives and then becomes it (execve: same process, streams
// and exit). Elsewhere req is unchanged.
func asActivity(ctx context.Context, st *stack.Stack, req sdk.ExecRequest) (sdk.ExecRequest, error) {
	dir := st.LifetimeDir()
	if dir == "" {
		return req, nil
	}
	if err := st.InstallWorker(ctx); err != nil {
		return req, err
	}
	req.Argv = append([]string{st.Worker, "activity", "--"}, req.Argv...)
	env := maps.Clone(req.Env)
	if env == nil {
		env = map[string]string{}
	}
	env[lifetime.EnvDir] = dir // the worker takes it out of the command's environment
	req.Env = env
	return req, nil
}

// lifetimeOf asks a running sandbox's watchdog when it stops and why,
// without that being activity: a shell (not the worker) that runs the
// worker's passive `watchdog status`. nil where it has no watchdog.
func lifetimeOf(ctx context.Context, ex interface {
	Exec(context.Context, sdk.ExecRequest, sdk.ExecIO) (sdk.ExitStatus, error)
}) (*lifetime.Status, error) {
	var out, stderr strings.Builder
	st, err := ex.Exec(ctx, sdk.ExecRequest{Argv: []string{"sh", "-c", lifetime.StatusScript}, Timeout: sdk.HealthCheckTimeout}, sdk.ExecIO{Stdout: &out, Stderr: &stderr})
	switch {
	case err != nil:
		return nil, fmt.Errorf("ask the sandbox's watchdog: %w", err)
	case st.Code != 0:
		return nil, fmt.Errorf("ask the sandbox's watchdog: exit %d: %s", st.Code, strings.TrimSpace(stderr.String()))
	case strings.TrimSpace(out.String()) == "":
		return nil, nil
	}
	s, err := lifetime.Parse([]byte(out.String()))
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// stopsColumn is sandbox ls's STOPS: when the sandbox stops and why, by
// its watchdog; "stopped" for a stopped one; "-" where nothing is known.
func stopsColumn(r sandboxRow, now time.Time) string {
	switch {
	case r.Lifetime != nil:
		return r.Lifetime.Describe(now, now.Location())
	case r.State == string(sdk.HealthStopped):
		return "stopped"
	}
	return "-"
}
