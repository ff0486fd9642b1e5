package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// stepIO is a step's streams.
type stepIO struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// stepFunc serves one kind of step, its arguments decoded.
type stepFunc func(ctx context.Context, args []byte, sio stepIO) error

// stepExit is a step's failure with an exit code other than 1
// (workstep.Exit*), its message for stderr.
type stepExit struct {
	code int
	msg  string
}

func (e *stepExit) Error() string { return e.msg }

// typed adapts a step on a workstep request of type R.
func typed[R workstep.Request](f func(context.Context, R, stepIO) error) stepFunc {
	return func(ctx context.Context, args []byte, sio stepIO) error {
		var r R
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("its arguments: %w", err)
		}
		return f(ctx, r, sio)
	}
}

// steps are the steps the worker serves, by name.
var steps = map[string]stepFunc{
	workstep.Refs{}.Step():        typed(stepRefs),
	workstep.Receive{}.Step():     typed(stepReceive),
	workstep.Commit{}.Step():      typed(stepCommit),
	workstep.HasWork{}.Step():     typed(stepHasWork),
	workstep.Bundle{}.Step():      typed(stepBundle),
	workstep.Checkout{}.Step():    typed(stepCheckout),
	workstep.Place{}.Step():       typed(stepPlace),
	workstep.EndUID{}.Step():      typed(stepEndUID),
	workstep.Allocate{}.Step():    typed(stepAllocate),
	workstep.Park{}.Step():        typed(stepPark),
	workstep.PruneParked{}.Step(): typed(stepPruneParked),
	workstep.SharedDirs{}.Step():  typed(stepSharedDirs),
	workstep.Sweep{}.Step():       typed(stepSweep),
	workstep.Retire{}.Step():      typed(stepRetire),
	workstep.WriteFile{}.Step():   typed(stepWriteFile),
}

// serveStep is the worker's envelope.StepFunc: it runs the step and says
// on stderr, naming it, what failed.
func serveStep(ctx context.Context, s envelope.Step, stdin io.Reader, stdout, stderr io.Writer) int {
	f, ok := steps[s.Name]
	if !ok {
		fmt.Fprintf(stderr, "amelia-worker step: no step %q\n", s.Name)
		return 127
	}
	err := f(ctx, s.Args, stepIO{stdin: stdin, stdout: stdout, stderr: stderr})
	if err == nil {
		return 0
	}
	var se *stepExit
	if errors.As(err, &se) {
		if se.msg != "" {
			fmt.Fprintln(stderr, se.msg)
		}
		return se.code
	}
	fmt.Fprintf(stderr, "amelia-worker step %s: %v\n", s.Name, err)
	return exitFailed
}

// stepCmd serves one step as a process of its own, for a sandbox command
// that has no session to send it on.
func (w *worker) stepCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "step NAME ARGS",
		Short: "Serve one typed request of the workspace (core/workstep), its arguments as JSON",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := serveStep(cmd.Context(), envelope.Step{Name: args[0], Args: json.RawMessage(args[1])}, w.p.Stdin, w.p.Stdout, w.p.Stderr); code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
}

// gitStopGrace is how long git has between SIGTERM and SIGKILL when its
// step is cancelled.
const gitStopGrace = 2 * time.Second

// git runs git in dir (as `git -C dir`, "" for none) with amelia's
// settings: no hooks, no automatic gc or maintenance (a commit would start
// git maintenance run --auto), no ext:: transport, no prompt, the
// C locale; env is added to the worker's environment. It runs in a
// process group of its own, all of which a cancel ends.
func git(ctx context.Context, sio stepIO, dir string, env []string, args ...string) error {
	return gitStarted(ctx, sio, dir, env, args, nil)
}

// gitStarted is git, started through around where it is not nil.
func gitStarted(ctx context.Context, sio stepIO, dir string, env, args []string, around func(start func() error) error) error {
	argv := []string{"-c", "core.hooksPath=/dev/null", "-c", "gc.auto=0", "-c", "maintenance.auto=false", "-c", "protocol.ext.allow=never"}
	if dir != "" {
		argv = append(argv, "-C", dir)
	}
	cmd := exec.CommandContext(ctx, "git", append(argv, args...)...)
	cmd.Env = append(append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C"), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = sio.stdin, sio.stdout, sio.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = gitStopGrace
	var err error
	if around != nil {
		err = around(cmd.Start)
	} else {
		err = cmd.Start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("git %s: %w", args[0], ctx.Err())
		}
		return fmt.Errorf("git %s: %w", args[0], err)
	}
	return nil
}

// gitOutput is git's stdout, its stderr the step's.
func gitOutput(ctx context.Context, sio stepIO, dir string, args ...string) (string, error) {
	var out strings.Builder
	err := git(ctx, stepIO{stdout: &out, stderr: sio.stderr}, dir, nil, args...)
	return out.String(), err
}

// mine reports whether dir is a directory of the worker's uid, not a link.
func mine(dir string) bool { return mineOf(dir, os.Geteuid()) }

// lockWorkspace takes the workspace lock, flock(2) on
// ROOT/.amelia-repo.lock (the file the workspace's scripts lock too),
// making ROOT if it is not there; release gives it back. A cancel while
// waiting gives ctx's error; the lock, if it comes later, is let go.
func lockWorkspace(ctx context.Context, root string) (release func(), err error) {
	if err := os.MkdirAll(root, 0o777); err != nil {
		return nil, fmt.Errorf("make the workspace root: %w", err)
	}
	name := filepath.Join(root, ".amelia-repo.lock")
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the workspace lock: %w", err)
	}
	// The sandbox's user's alone: a uid that could open it could flock it
	// and stall every run's workspace.
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("the workspace lock: %w", err)
	}
	locked := make(chan error, 1)
	go func() {
		var err error
		for {
			if err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != syscall.EINTR {
				break
			}
		}
		locked <- err
	}()
	select {
	case err := <-locked:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("lock the workspace: %w", err)
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		go func() {
			<-locked
			f.Close()
		}()
		return nil, fmt.Errorf("wait for the workspace lock: %w", ctx.Err())
	}
}
