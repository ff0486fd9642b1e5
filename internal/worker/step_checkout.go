package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

func stepCheckout(ctx context.Context, r workstep.Checkout, sio stepIO) error {
	if r.Shared != "" {
		for _, d := range []string{filepath.Join(r.Shared, "worktrees"), filepath.Join(r.Shared, ".amelia", "runs")} {
			if err := os.MkdirAll(d, 0o777); err != nil {
				return &stepExit{workstep.ExitUnmade, "make " + d + ": " + err.Error()}
			}
			if err := os.Chmod(d, 0o733|os.ModeSticky); err != nil {
				return &stepExit{workstep.ExitUnmade, "make " + d + ": " + err.Error()}
			}
		}
	}
	var st stamp
	if r.Reuse != nil {
		var err error
		if st, err = readStamp(sio.stdin); err != nil {
			return fmt.Errorf("the parked checkout's stamp: %w", err)
		}
		// Nothing the uid ran before may outlive into this workflow.
		endUID(os.Geteuid())
		if !mine(r.Reuse.From) {
			return fmt.Errorf("the parked checkout %s is not there", r.Reuse.From)
		}
		if _, _, err := reuseCheckout(r.Reuse.From, r.Dir, r.Reuse.Repo, r.Reuse.Start, st); err != nil {
			for _, d := range []string{r.Reuse.From, r.Dir} {
				if mine(d) {
					_ = removeAll(d)
				}
			}
			return err
		}
	} else if err := os.Mkdir(r.Dir, 0o700); err != nil {
		// Mkdir is the test for a checkout already there, so of two runs
		// racing for one id, only the one that made it goes on.
		if errors.Is(err, fs.ErrExist) {
			return &stepExit{workstep.ExitRefused, r.Dir + " already exists in the sandbox"}
		}
		return &stepExit{workstep.ExitUnmade, "make the checkout: " + err.Error()}
	}
	quiet := stepIO{stderr: sio.stderr}
	if err := git(ctx, quiet, "", nil, "init", "--quiet", "--template=", "--", r.Dir); err != nil {
		return err
	}
	gitDir := filepath.Join(r.Dir, ".git")
	if err := os.WriteFile(filepath.Join(gitDir, "objects", "info", "alternates"), []byte(r.Objects+"\n"), 0o600); err != nil {
		return fmt.Errorf("point the checkout at the shared objects: %w", err)
	}
	if r.Exclude != "" {
		if err := os.MkdirAll(filepath.Join(gitDir, "info"), 0o700); err != nil {
			return fmt.Errorf("the checkout's exclude file: %w", err)
		}
		if err := os.WriteFile(filepath.Join(gitDir, "info", "exclude"), []byte(r.Exclude), 0o600); err != nil {
			return fmt.Errorf("the checkout's exclude file: %w", err)
		}
	}
	checkout := []string{"checkout", "--quiet", "-b", r.Branch, r.Start}
	if r.Reuse != nil {
		checkout = []string{"checkout", "--quiet", "-f", "-B", r.Branch, r.Start}
	}
	if err := gitPrivate(ctx, r.Stamp, quiet, r.Dir, checkout...); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(sio.stdout, os.Geteuid()); err != nil {
		return err
	}
	if !r.Stamp {
		return nil
	}
	return stampCheckout(r.Dir, sio.stdout)
}

// umaskMu serialises the worker's umask changes: the mask is the
// process's, so it holds only while a git that needs another is started.
var umaskMu sync.Mutex

// gitPrivate is git in dir, its files made with umask 077 when private.
// Meanwhile the worker's own files get that mask too: every file a step
// makes itself is given its mode explicitly.
func gitPrivate(ctx context.Context, private bool, sio stepIO, dir string, args ...string) error {
	if !private {
		return git(ctx, sio, dir, nil, args...)
	}
	return gitStarted(ctx, sio, dir, nil, args, func(start func() error) error {
		umaskMu.Lock()
		defer umaskMu.Unlock()
		old := syscall.Umask(0o077)
		defer syscall.Umask(old)
		return start()
	})
}
