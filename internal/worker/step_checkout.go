package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
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

// endUID kills every process of uid but this one and its parent (a
// session worker of the uid's that runs it), until none is left, and
// removes the uid's files in the shared temporary directories: what a
// workflow's uid ran must not outlive it into another workflow.
func endUID(uid int) {
	self, parent := os.Getpid(), os.Getppid()
	for pass := 0; pass < 100; pass++ {
		found := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || pid == parent {
				continue
			}
			if !ranAs(pid, uid) {
				continue
			}
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				found++
			}
		}
		if found == 0 {
			break
		}
	}
	for _, dir := range []string{"/tmp", "/var/tmp", "/dev/shm"} {
		removeOwned(dir, uid)
	}
}

// ranAs reports whether pid is a live process (not a zombie) any of
// whose uids (real, effective, saved, filesystem) is uid. Its status, not
// the owner of /proc/PID, which is root's for a process that made itself
// non-dumpable.
func ranAs(pid, uid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false // gone
	}
	var zombie, match bool
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("State:")); ok {
			zombie = bytes.HasPrefix(bytes.TrimSpace(v), []byte("Z"))
		} else if v, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			for _, f := range bytes.Fields(v) {
				if n, err := strconv.Atoi(string(f)); err == nil && n == uid {
					match = true
				}
			}
		}
	}
	return match && !zombie
}

// removeOwned removes what uid owns under dir, on dir's filesystem
// alone, deepest first (as find -xdev -user UID -delete).
func removeOwned(dir string, uid int) {
	var top syscall.Stat_t
	if syscall.Lstat(dir, &top) != nil {
		return
	}
	var owned []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		if st.Dev != top.Dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if int(st.Uid) == uid {
			owned = append(owned, p)
		}
		return nil
	})
	for i := len(owned) - 1; i >= 0; i-- {
		_ = os.Remove(owned[i])
	}
}
