package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/core/lifetime"
)

// Activity (core/lifetime): every worker command that does work for a
// person or an agent holds a shared flock on the sandbox's busy file for
// as long as it runs, and touches the activity stamp when it starts and
// when it ends, so the sandbox's watchdog sees it; the passive commands
// below do not. mux and serve, which last as long as their client, count
// each command and request they serve instead of their whole life.
var passiveCommands = []string{"tunnel", "follow", "status", "version", "watchdog", "help", "mux", "serve"}

// countActivity makes every command below root that is not passive (nor
// below a passive one) hold the sandbox's activity while it runs.
func (w *worker) countActivity(root *cobra.Command) {
	for _, c := range root.Commands() {
		if slices.Contains(passiveCommands, c.Name()) {
			continue
		}
		w.countActivity(c)
		if c.RunE == nil {
			continue
		}
		run := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			defer w.busy()()
			return run(cmd, args)
		}
	}
}

// busy marks the sandbox busy until the function it returns is called;
// nothing when the sandbox has no lifetime directory (no watchdog).
func (w *worker) busy() (done func()) {
	dir := lifetimeDir(w.p.Getenv)
	if dir == "" {
		return func() {}
	}
	return holdBusy(dir)
}

// holdBusy takes a shared lock on dir's busy file and touches its stamp;
// done touches the stamp again and lets the lock go.
func holdBusy(dir string) (done func()) {
	f, err := os.Open(filepath.Join(dir, lifetime.BusyFile))
	if err != nil {
		return func() {}
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return func() {}
	}
	touch(dir)
	return func() {
		touch(dir)
		f.Close()
	}
}

// touch sets the activity stamp's mtime to now.
func touch(dir string) {
	now := time.Now()
	os.Chtimes(filepath.Join(dir, lifetime.StampFile), now, now)
}

// lifetimeDir finds the sandbox's lifetime directory: $AMELIA_LIFETIME_DIR,
// else the nearest .amelia/lifetime above the working directory (the host
// runs its commands in the sandbox's workdir or below), else the one in
// the workdir of the ssh sandbox $AMELIA_SANDBOX_DIR names. "" when there
// is none: the sandbox has no watchdog.
func lifetimeDir(getenv func(string) string) string {
	if d := getenv(lifetime.EnvDir); d != "" && filepath.IsAbs(d) {
		return d
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			cand := filepath.Join(d, lifetime.Dir)
			if _, err := os.Stat(filepath.Join(cand, lifetime.BusyFile)); err == nil {
				return cand
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	if sb := getenv("AMELIA_SANDBOX_DIR"); sb != "" && filepath.IsAbs(sb) {
		cand := filepath.Join(sb, "workspace", lifetime.Dir)
		if _, err := os.Stat(filepath.Join(cand, lifetime.BusyFile)); err == nil {
			return cand
		}
	}
	return ""
}

// activityCmd runs a command as activity: the host's `sandbox exec` goes
// through it, so that commands that are not the worker's count too. The
// busy lock belongs to a descriptor the command inherits (execve keeps
// it), so it is held for as long as the command, or anything it leaves
// running with the descriptor, lives.
func (w *worker) activityCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "activity -- PROGRAM ARGS...",
		Short:  "Run PROGRAM in place of this process, as activity that keeps the sandbox from stopping",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			prog, err := exec.LookPath(args[0])
			if err != nil {
				// Said as a shell says it: the wrapper is amelia's, the
				// command the user's.
				if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
					fmt.Fprintf(w.p.Stderr, "%s: command not found\n", args[0])
					return exitCode(127)
				}
				if inner := errors.Unwrap(err); inner != nil {
					err = inner
				}
				fmt.Fprintf(w.p.Stderr, "%s: %v\n", args[0], err)
				return exitCode(126)
			}
			if dir := lifetimeDir(w.p.Getenv); dir != "" {
				if f, err := os.Open(filepath.Join(dir, lifetime.BusyFile)); err == nil {
					for unix.Flock(int(f.Fd()), unix.LOCK_SH) == unix.EINTR {
					}
					touch(dir)
					// Kept across execve, on a descriptor high enough that
					// a script's own (exec 3>FILE) leave it alone: the lock
					// lives as long as the command.
					unix.FcntlInt(f.Fd(), unix.F_DUPFD, 100)
				}
			}
			env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, lifetime.EnvDir+"=") })
			err = syscall.Exec(prog, args, env)
			w.p.Stderr.Write([]byte("amelia-worker activity: run " + args[0] + ": " + err.Error() + "\n"))
			if errors.Is(err, syscall.ENOENT) {
				return exitCode(127)
			}
			return exitCode(126)
		},
	}
	cmd.Flags().SetInterspersed(false)
	return cmd
}
