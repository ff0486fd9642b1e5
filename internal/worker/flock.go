package worker

import (
	"fmt"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"
)

// flockCmd takes an exclusive flock(2) on a descriptor it inherited, like
// `flock FD` of util-linux, for sandboxes without flock(1): the lock belongs
// to the open file, so it stays held by the shell that opened the
// descriptor after the worker exits, and is released when that shell ends,
// however it ends. Core's workspace scripts use it to serialise writers of
// the shared bare repository.
func (w *worker) flockCmd() *cobra.Command {
	var nonblock bool
	cmd := &cobra.Command{
		Use:   "flock [-n] FD",
		Short: "Wait for an exclusive lock on an inherited file descriptor (-n: exit 1 at once if it is held)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fd, err := strconv.Atoi(args[0])
			if err != nil || fd < 3 {
				return fmt.Errorf("flock %q: want a file descriptor number of 3 or more, such as 9", args[0])
			}
			how := syscall.LOCK_EX
			if nonblock {
				how |= syscall.LOCK_NB
			}
			for {
				err = syscall.Flock(fd, how)
				if err != syscall.EINTR {
					break
				}
			}
			if err != nil {
				fmt.Fprintf(w.p.Stderr, "amelia-worker flock %d: %v\n", fd, err)
				return exitCode(exitFailed)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&nonblock, "nonblock", "n", false, "fail (exit 1) instead of waiting when the lock is held")
	return cmd
}
