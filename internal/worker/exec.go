package worker

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/plugins/sdk/envelope"
)

// execCmd serves the exec envelope on stdin and stdout: one command, its
// streams, pid and exit in frames, for transports that lose stderr or the
// exit status, and a kill of its whole tree on cancel or when the client
// goes away.
func (w *worker) execCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "exec",
		Short: "Run one command inside the exec envelope on stdin and stdout",
		Long: `Run the command a start frame on stdin names, as the leader of its own
session, and speak the exec envelope (plugins/sdk/envelope) on stdin and
stdout: its pid, output streams and exit come out as frames, its input,
the end of it and a cancel go in. A client that goes away without the
exit gets the command's process tree killed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Write errors, not death by SIGPIPE, when the client goes away;
			// delivered (not ignored) so that commands keep the default.
			pipe := make(chan os.Signal, 1)
			signal.Notify(pipe, syscall.SIGPIPE)
			defer signal.Stop(pipe)
			if err := envelope.Serve(w.p.Stdin, w.p.Stdout, os.Environ()); err != nil {
				fmt.Fprintf(w.p.Stderr, "amelia-worker exec: %v\n", err)
				return exitCode(exitFailed)
			}
			return nil
		},
	}
}
