package worker

import (
	"fmt"
	"net"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/portforward/sandboxend"
)

// portForwardCmd is the sandbox end of `amelia sandbox port-forward`: the
// host's connections, carried as yamux streams over stdin and stdout, each
// connected to a loopback port here.
func (w *worker) portForwardCmd() *cobra.Command {
	var port int
	var host string
	cmd := &cobra.Command{
		Use:   "port-forward --port PORT [--host 127.0.0.1]",
		Short: "Connect each stream the host opens over stdin and stdout to a loopback port in the sandbox",
		Long: `Write a hello line on stdout, then serve a yamux session over stdin and
stdout in which the host opens one stream per connection it accepted on
its loopback; each is connected to 127.0.0.1:PORT here (or --host, which
must be a loopback address), or answered with the error and closed. Ends,
exit 0, when stdin ends.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: want a port from 1 to 65535", port)
			}
			target := net.JoinHostPort(host, strconv.Itoa(port))
			if err := sandboxend.CheckTarget(target); err != nil {
				return err
			}
			if err := sandboxend.Serve(cmd.Context(), w.p.Stdin, w.p.Stdout, target, w.log); err != nil {
				w.log.Error("port-forward failed", "err", err)
				return exitCode(exitFailed)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "the port in the sandbox to connect to")
	cmd.Flags().StringVar(&host, "host", "127.0.0.1", "the loopback address in the sandbox to connect to")
	cmd.MarkFlagRequired("port")
	return cmd
}
