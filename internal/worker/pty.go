package worker

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/ptyframe"
)

// ptyDrain bounds how long the terminal's output is read once its command
// has ended, for what it wrote last: a process it left in the background
// may hold the terminal open for ever.
const ptyDrain = time.Second

// ptyCmd runs a command on a terminal of its own, for transports that
// carry no terminal (see package ptyframe): stdin is framed input and
// sizes, stdout the terminal's output, the exit code the command's.
func (w *worker) ptyCmd() *cobra.Command {
	var rows, cols uint16
	cmd := &cobra.Command{
		Use:   "pty [--rows 24] [--cols 80] -- COMMAND [ARG...]",
		Short: "Run a command on a new terminal; stdin carries its input and size changes as frames",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ptmx, pts, err := openPTY(ptyframe.Size{Rows: rows, Cols: cols})
			if err != nil {
				return fmt.Errorf("pty: %w", err)
			}
			defer ptmx.Close()
			c := exec.Command(args[0], args[1:]...)
			c.Stdin, c.Stdout, c.Stderr = pts, pts, pts
			// A session of its own with the terminal as its controlling
			// one, as a login's shell has.
			c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
			if err := c.Start(); err != nil {
				pts.Close()
				fmt.Fprintf(w.p.Stderr, "amelia-worker pty: %v\n", err)
				return exitCode(127)
			}
			pts.Close()
			output := make(chan struct{})
			go func() {
				defer close(output)
				buf := make([]byte, 32<<10)
				for {
					n, err := ptmx.Read(buf)
					if n > 0 {
						if _, werr := w.p.Stdout.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil { // EIO once no process holds the terminal
						return
					}
				}
			}()
			go func() {
				err := ptyframe.Decode(w.p.Stdin, func(p []byte) error {
					_, err := ptmx.Write(p)
					return err
				}, func(sz ptyframe.Size) {
					if err := setSize(ptmx, sz); err != nil {
						w.log.Debug("pty: resize", "err", err)
					}
				})
				if err != nil {
					w.log.Warn("pty: input", "err", err)
				}
			}()
			werr := c.Wait()
			select {
			case <-output:
			case <-time.After(ptyDrain):
			}
			var ee *exec.ExitError
			switch {
			case werr == nil:
				return nil
			case errors.As(werr, &ee):
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return exitCode(128 + int(ws.Signal()))
				}
				return exitCode(ee.ExitCode())
			}
			return fmt.Errorf("pty: %w", werr)
		},
	}
	cmd.Flags().Uint16Var(&rows, "rows", 24, "the terminal's rows")
	cmd.Flags().Uint16Var(&cols, "cols", 80, "the terminal's columns")
	return cmd
}
