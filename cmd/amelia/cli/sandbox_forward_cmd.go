package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/portforward"
)

func (a *app) sandboxPortForwardCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "port-forward [LOCAL:]PORT",
		Short: "Connect a port on host loopback to a port inside the profile's sandbox, until Ctrl-C",
		Long: `Listen on 127.0.0.1:LOCAL of this host (LOCAL defaults to PORT; 0 picks a
free port) and connect every connection made to it to 127.0.0.1:PORT inside
the profile's sandbox (started if needed): the agent's dev server, a
debugger. The connections go over one exec this host opens in the sandbox,
as every command of amelia's does, so it works under network: none and on
every provider. It listens on host loopback only, never on another
address of this host, and opens nothing in the sandbox's network.

A connection to a port nothing listens on in the sandbox is closed, and
said so on stderr. Ctrl-C closes the listener, the connections and the
exec in the sandbox (exit 130, as for the other commands).`,
		Example: `  amelia sandbox port-forward 8080
  amelia sandbox port-forward 9000:8080
  amelia sandbox port-forward --profile dev 0:5173`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("sandbox port-forward needs one port: amelia sandbox port-forward [LOCAL:]PORT, e.g. 8080 or 9000:8080")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			local, port, err := parsePortSpec(args[0])
			if err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			// Listen first: a local port in use fails before anything starts.
			ln, err := portforward.Listen(local)
			if err != nil {
				return fmt.Errorf("sandbox port-forward: %w; pick another local port (LOCAL:%d), or 0 for any", err, port)
			}
			defer ln.Close()
			st, err := a.openStack(ctx)
			if err != nil {
				return err
			}
			defer st.Close(context.WithoutCancel(ctx))
			if err := st.Up(ctx); err != nil {
				return err
			}
			if err := st.InstallWorker(ctx); err != nil {
				return err
			}
			stderr := cmd.ErrOrStderr()
			f, err := portforward.Open(ctx, st, portforward.Options{
				Worker: st.Worker,
				Port:   port,
				Logger: a.logger,
				Refused: func(err error) {
					fmt.Fprintf(stderr, "amelia: %s (is anything listening on 127.0.0.1:%d in the sandbox?)\n", oneLine(err.Error()), port)
				},
			})
			if err != nil {
				if ctx.Err() != nil {
					return exitError{130}
				}
				return err
			}
			sb := st.Sandbox()
			fmt.Fprintf(cmd.OutOrStdout(), "forwarding %s to port %d in sandbox %s of profile %s (provider %s); Ctrl-C ends it\n",
				ln.Addr(), port, sb.Ref.Name, sb.Profile.Name, sb.Info.Name)
			stop := context.AfterFunc(ctx, func() { ln.Close() })
			defer stop()
			serveErr := f.Serve(ln)
			closeErr := f.Close()
			if ctx.Err() != nil {
				return exitError{130}
			}
			if serveErr != nil {
				return serveErr
			}
			if err := f.Err(); err != nil {
				return fmt.Errorf("sandbox port-forward: the forward to port %d ended: %w", port, err)
			}
			if closeErr != nil {
				return closeErr
			}
			return fmt.Errorf("sandbox port-forward: the forward to port %d ended: the sandbox end closed it (was the sandbox stopped?)", port)
		},
	}
}

// parsePortSpec reads [LOCAL:]PORT: LOCAL defaults to PORT, 0 picks one.
func parsePortSpec(s string) (local, port int, err error) {
	localS, portS, both := strings.Cut(s, ":")
	if !both {
		portS = localS
	}
	port, err = strconv.Atoi(portS)
	if err != nil || port < 1 || port > 65535 {
		return 0, 0, fmt.Errorf("port-forward %q: PORT must be a number from 1 to 65535: amelia sandbox port-forward [LOCAL:]PORT, e.g. 8080 or 9000:8080", s)
	}
	if !both {
		return port, port, nil
	}
	local, err = strconv.Atoi(localS)
	if err != nil || local < 0 || local > 65535 {
		return 0, 0, fmt.Errorf("port-forward %q: LOCAL must be a number from 0 (any free port) to 65535: amelia sandbox port-forward [LOCAL:]PORT, e.g. 9000:8080", s)
	}
	return local, port, nil
}
