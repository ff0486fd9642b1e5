package run

import (
	"context"
	"fmt"
	"strings"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// reachedDirectly is the canary of a policy without direct egress
// (allowlist, none): before the agent runs, the worker tries to reach
// addresses from inside the sandbox without the proxy (targets, or its
// defaults: public resolvers over IPv4 and IPv6). It returns those that
// answered; any at all means the provider did not enforce the policy.
func reachedDirectly(ctx context.Context, ex sdk.Execer, worker string, targets ...string) ([]string, error) {
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
