package run

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// reachedDirectly is the canary of a policy without direct egress
// (allowlist, none): before the agent runs, the worker tries to reach
// addresses from inside the sandbox without the proxy (targets, or its
// defaults: public resolvers over IPv4 and IPv6). It returns those that
// answered; any at all means the provider did not enforce the policy.
func reachedDirectly(ctx context.Context, ex sandboxexec.Execer, worker string, targets ...string) ([]string, error) {
	var out, stderr execreport.Stderr // each keeps its last 4 KiB
	st, err := ex.Exec(ctx, sdk.ExecRequest{Argv: append([]string{worker, "egress-check", "--"}, targets...)}, sdk.ExecIO{Stdout: &out, Stderr: &stderr})
	if err != nil {
		return nil, fmt.Errorf("check the network policy: %w", err)
	}
	switch st.Code {
	case 0:
		return nil, nil
	case 3: // amelia-worker egress-check: something answered
		var reached []string
		for l := range strings.Lines(string(out.Bytes())) {
			if a, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "reachable "); ok {
				reached = append(reached, execreport.Printable(a))
			}
		}
		return reached, nil
	}
	return nil, fmt.Errorf("check the network policy: amelia-worker egress-check: %s%s", execreport.Status(st), stderr.Note())
}

// egressPolicy is what the provider says of its enforcement of a network
// policy without direct egress (sdk.DetailEgress, sdk.DetailEgressSettle).
type egressPolicy struct {
	needs  string        // what enforcement needs, for the refusal
	settle time.Duration // how long enforcement may take to begin
}

func egressPolicyOf(details map[string]string) egressPolicy {
	p := egressPolicy{needs: execreport.Printable(details[sdk.DetailEgress])}
	if d, err := time.ParseDuration(details[sdk.DetailEgressSettle]); err == nil && d > 0 {
		p.settle = d
	}
	return p
}

// reachedAfterSettling is reachedDirectly repeated, with growing pauses,
// while the sandbox still reaches out and the provider's settle time has
// not passed: a policy the provider enforces asynchronously is given that
// long to take effect. It returns what the last check reached.
func reachedAfterSettling(ctx context.Context, ex sandboxexec.Execer, worker string, settle time.Duration, targets ...string) ([]string, error) {
	deadline := time.Now().Add(settle)
	pause := 100 * time.Millisecond
	for {
		reached, err := reachedDirectly(ctx, ex, worker, targets...)
		if err != nil || len(reached) == 0 || !time.Now().Before(deadline) {
			return reached, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("check the network policy: %w", context.Cause(ctx))
		case <-time.After(min(pause, time.Until(deadline))):
		}
		pause = min(2*pause, 2*time.Second)
	}
}

// checkEgress fails closed: a policy without direct egress is checked
// from inside the sandbox before anything runs there, waiting out the
// time the provider says its enforcement may take to begin.
func (r *runner) checkEgress(ctx context.Context) error {
	p := r.req.Profile
	mode := p.Sandbox.Network
	if mode == sdk.NetworkOpen {
		return nil
	}
	return r.phase(PhaseEgress, func() error {
		reached, err := reachedAfterSettling(ctx, r.st, r.st.Worker, r.egress.settle, p.Sandbox.EgressCheckTargets...)
		if err != nil || len(reached) == 0 {
			return err
		}
		why := ""
		if r.egress.needs != "" {
			why = " (" + r.egress.needs + ")"
		}
		still := ""
		if r.egress.settle > 0 {
			still = fmt.Sprintf(" (still, after %v)", r.egress.settle)
		}
		return fmt.Errorf("profile %s asks for network %q, but the sandbox reached %s directly%s: provider %s does not enforce it here%s; nothing was run",
			p.Name, mode, strings.Join(reached, ", "), still, r.st.Sandbox().Info.Name, why)
	})
}
