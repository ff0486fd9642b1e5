package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// withWatchdog starts the sandbox's watchdog, where it has one, for
// `sandbox up` and `sandbox exec`: the stack then runs commands as the
// sandbox's activity (stack.Stack.Exec), so that they keep the sandbox
// from stopping while they run. A sandbox whose worker cannot be put in
// place works as before, without stopping by itself, and amelia says so.
func (a *app) withWatchdog(ctx context.Context, st *stack.Stack) {
	if st.LifetimeDir() == "" {
		return
	}
	if err := st.InstallWorker(ctx); err != nil {
		a.logger.Warn("the sandbox will not stop by itself", "err", err)
	}
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
// its watchdog; "stopped" for a stopped one; "never: why" where the
// provider says it never stops by itself; "-" where nothing is known.
func stopsColumn(r sandboxRow, now time.Time) string {
	switch {
	case r.Lifetime != nil:
		return r.Lifetime.Describe(now, now.Location())
	case r.State == string(sdk.HealthStopped):
		return "stopped"
	case r.NeverStops != "":
		return "never: " + r.NeverStops
	}
	return "-"
}
