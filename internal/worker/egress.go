package worker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
)

// CanaryTargets are the addresses egress-check tries when given none:
// public resolvers, by address (a sandbox without a network has no DNS),
// over IPv4 and IPv6.
var CanaryTargets = []string{"1.1.1.1:443", "8.8.8.8:53", "[2606:4700:4700::1111]:443"}

// exitReachable is egress-check's exit code when a target answered.
const exitReachable = 3

// egressCheckCmd is the canary of a network policy that allows no direct
// egress: the host runs it in the sandbox before the agent starts and
// refuses to go on if anything outside answers without the proxy.
func (w *worker) egressCheckCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "egress-check [HOST:PORT...]",
		Short: "Exit 0 when no address answers a direct TCP connection, 3 when one does",
		Long: `Try a TCP connection to each address (default: public resolvers over IPv4 and
IPv6, ` + strings.Join(CanaryTargets, " ") + `) without any proxy, and print one
line each: "reachable ADDR" or "unreachable ADDR: why". Exit 0 when none is
reachable, 3 when one is.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = CanaryTargets
			}
			for _, a := range args {
				if _, _, err := net.SplitHostPort(a); err != nil {
					return fmt.Errorf("%q is not HOST:PORT", a)
				}
			}
			results := make([]error, len(args))
			var wg sync.WaitGroup
			for i, a := range args {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
					defer cancel()
					c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
					if err == nil {
						c.Close()
					}
					results[i] = err
				})
			}
			wg.Wait()
			reached := false
			for i, a := range args {
				if results[i] == nil {
					reached = true
					fmt.Fprintf(w.p.Stdout, "reachable %s\n", a)
				} else {
					fmt.Fprintf(w.p.Stdout, "unreachable %s: %v\n", a, results[i])
				}
			}
			if reached {
				return exitCode(exitReachable)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "how long each connection may take (a dropped packet never answers)")
	return cmd
}
