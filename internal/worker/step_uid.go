package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

func stepEndUID(_ context.Context, r workstep.EndUID, _ stepIO) error {
	if r.UID <= 0 {
		return fmt.Errorf("uid %d is no workflow's: it would end root's every process", r.UID)
	}
	endUID(r.UID)
	if r.Trash == "" {
		if mine(r.Checkout) {
			if err := removeAll(r.Checkout); err != nil {
				return fmt.Errorf("remove the checkout %s: %w", r.Checkout, err)
			}
		}
		return nil
	}
	if err := os.Mkdir(r.Trash, 0o700); err != nil {
		return fmt.Errorf("make the trash entry: %w", err)
	}
	if r.RunDir != "" && mine(r.RunDir) {
		if err := os.Chmod(r.RunDir, 0o700); err != nil {
			return fmt.Errorf("move the run directory into the trash: %w", err)
		}
		if !removeFew(r.RunDir) {
			if err := os.Rename(r.RunDir, filepath.Join(r.Trash, "run")); err != nil {
				return fmt.Errorf("move the run directory into the trash: %w", err)
			}
		}
	}
	if !mine(r.Checkout) {
		return nil
	}
	if err := os.Chmod(r.Checkout, 0o700); err != nil {
		return fmt.Errorf("put the checkout away: %w", err)
	}
	to := r.Park
	if to == "" {
		to = filepath.Join(r.Trash, "checkout")
	}
	if err := os.Rename(r.Checkout, to); err != nil {
		return fmt.Errorf("put the checkout away: %w", err)
	}
	return nil
}

// fewEntries is the most entries removeFew removes at once: a run
// directory holds a handful (the prompt, the protocol lines, the
// supervisor's pid and exit, stderr, the tunnel's socket, and the agent's
// HOME and TMPDIR, as often as not empty).
const fewEntries = 64

// removeFew removes dir when it holds at most fewEntries entries in all,
// and reports whether it did. A run directory as most runs leave it goes
// at once, so that its trash entry stays empty and no sweeper need start;
// one that the run's uid filled with more goes into the trash as a tree
// of any size would, so that ending a run takes the same time whatever
// the uid left: the count stops reading at the bound.
func removeFew(dir string) bool {
	left := fewEntries
	if !fewIn(dir, &left) {
		return false
	}
	// Not os.RemoveAll: it opens dir's parent, .amelia/runs (1733), which
	// the uid may write and search but not read.
	return removeAll(dir) == nil
}

// fewIn reports whether dir holds at most *left entries, its
// subdirectories' included, taking them off *left.
func fewIn(dir string, left *int) bool {
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	ents, err := f.ReadDir(*left + 1)
	f.Close()
	if err != nil && err != io.EOF {
		return false
	}
	if *left -= len(ents); *left < 0 {
		return false
	}
	for _, e := range ents {
		if e.IsDir() && !fewIn(filepath.Join(dir, e.Name()), left) {
			return false
		}
	}
	return true
}

// endUID kills every process of uid but this one and its parent, until a
// pass finds none alive (zombies are dead), so what forked meanwhile goes
// too, and removes the uid's files in the shared temporary directories:
// what a workflow's uid ran must not outlive it into another workflow.
// The parent is the run's command session as the uid (execsession) when
// the step runs on one (a reset before the agent starts); the steps that
// end a uid's run end its session first and run as an exec of their own,
// whose parent is outside the sandbox.
func endUID(uid int) {
	self, parent := os.Getpid(), os.Getppid()
	for range 100 {
		found := 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self || pid == parent || !ranAs(pid, uid) {
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

func stepSweep(_ context.Context, r workstep.Sweep, _ stepIO) error {
	return startSweeper(r.Root, r.Record)
}

// startSweeper starts `amelia-worker sweep root rec`, detached: in a
// session of its own, it outlives the step.
func startSweeper(root, rec string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the worker to start the sweeper: %w", err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	// A session of its own, apart from the exec's, so that it outlives it.
	p, err := os.StartProcess(self, []string{self, "sweep", root, rec}, &os.ProcAttr{
		Files: []*os.File{null, null, null},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return fmt.Errorf("start the sweeper: %w", err)
	}
	return p.Release()
}

// sweepCmd is the sweeper the sweep step starts.
func (w *worker) sweepCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "sweep ROOT RECORD",
		Short:  "Remove the trash entries in ROOT/.amelia/parked that RECORD lists, unless another sweeper of RECORD runs",
		Args:   cobra.ExactArgs(2),
		Hidden: true,
		RunE: func(_ *cobra.Command, args []string) error {
			sweepTrash(args[0], args[1])
			return nil
		},
	}
}

// sweepTrash removes the trash entries rec lists, holding rec.lock, and
// goes on while rec names more; another sweeper holding the lock, it
// leaves them to that one.
func sweepTrash(root, rec string) {
	lock, err := os.Open(rec + ".lock")
	if err != nil {
		return
	}
	defer lock.Close()
	if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		return
	}
	done := map[string]bool{}
	for {
		data, err := os.ReadFile(rec)
		if err != nil {
			return
		}
		more := false
		for n := range strings.FieldsSeq(string(data)) {
			if !strings.HasPrefix(n, ".trash-") || strings.Contains(n, "/") || done[n] {
				continue
			}
			_ = removeAll(filepath.Join(root, ".amelia", "parked", n))
			done[n], more = true, true
		}
		if !more {
			return
		}
	}
}
