package worker

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// execCmd serves the exec envelope on stdin and stdout: one command, its
// streams, pid and exit in frames, for transports that lose stderr or the
// exit status, and a kill of its whole tree on cancel or when the client
// goes away.
func (w *worker) execCmd() *cobra.Command {
	return w.envelopeCmd(&cobra.Command{
		Use:   "exec",
		Short: "Run one command inside the exec envelope on stdin and stdout",
		Long: `Run the command a start frame on stdin names, as the leader of its own
session, and speak the exec envelope (plugins/sdk/toolkit/envelope) on stdin and
stdout: its pid, output streams and exit come out as frames, its input,
the end of it and a cancel go in. A client that goes away without the
exit gets the command's process tree killed.`,
	}, envelope.Serve)
}

// muxCmd serves the exec envelope for many commands over stdin and stdout,
// each in a stream of a yamux session: for transports where a new session
// costs more than a round trip.
func (w *worker) muxCmd() *cobra.Command {
	return w.envelopeCmd(&cobra.Command{
		Use:   "mux",
		Short: "Run commands inside the exec envelope, many over stdin and stdout",
		Long: `Write a hello line, then serve a yamux session on stdin and stdout in which
every stream the client opens runs one command as exec does, or serves one
typed request of the workspace (see step) in the worker itself. When the
session ends, commands still running are killed, and the worker exits once
they are gone.`,
	}, func(in io.Reader, out io.Writer, environ []string) error {
		return envelope.ServeMuxSteps(in, out, environ, w.activeStep)
	})
}

// activeStep serves a step on a session as the sandbox's activity, as the
// step command is. A command on the session is activity only as it would
// be alone (a worker command that counts itself, or one the host runs
// through activity): a shell asking the watchdog (sandbox ls) is none,
// nor is a host's own session nested in this one, which counts its steps.
func (w *worker) activeStep(ctx context.Context, s envelope.Step, stdin io.Reader, stdout, stderr io.Writer) int {
	defer w.busy()()
	return serveStep(ctx, s, stdin, stdout, stderr)
}

// envelopeCmd makes cmd serve the envelope with serve on stdin and stdout.
func (w *worker) envelopeCmd(cmd *cobra.Command, serve func(io.Reader, io.Writer, []string) error) *cobra.Command {
	cmd.Args = noArgs
	cmd.RunE = func(*cobra.Command, []string) error {
		// Write errors, not death by SIGPIPE, when the client goes away;
		// delivered (not ignored) so that commands keep the default.
		pipe := make(chan os.Signal, 1)
		signal.Notify(pipe, syscall.SIGPIPE)
		defer signal.Stop(pipe)
		// Other processes of its uid (a run's agent, where the host runs
		// its steps as the run's uid) must not read or write its streams
		// through /proc or ptrace it: those carry the host's commands.
		// Its commands are dumpable again once they exec.
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			fmt.Fprintf(w.p.Stderr, "amelia-worker %s: make the worker non-dumpable: %v\n", cmd.Name(), err)
			return exitCode(exitFailed)
		}
		if err := serve(w.p.Stdin, w.p.Stdout, os.Environ()); err != nil {
			fmt.Fprintf(w.p.Stderr, "amelia-worker %s: %v\n", cmd.Name(), err)
			return exitCode(exitFailed)
		}
		return nil
	}
	return cmd
}
