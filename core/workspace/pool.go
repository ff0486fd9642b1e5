package workspace

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// Parked checkouts. A run's cost must not grow with the repository: when a
// run of a workflow with a uid ends with nothing of it to keep, its
// checkout is parked instead of removed (Retire), and a later workflow
// given the same uid resets it to its own base, writing only the files
// that differ (see internal/worker/checkout.go, which proves which files
// are unchanged since amelia wrote them). What must go (a checkout over
// the bound, one that is not parked, a run directory) is renamed into a
// trash entry and removed by a process of its uid detached in the
// sandbox: nothing waits for a removal, however big.
//
// Layout, beside the checkouts:
//
//	ROOT/.amelia/parked/         mode 1733, as worktrees/ is
//	ROOT/.amelia/parked/.park-<hex>   a parked checkout, of its uid
//	ROOT/.amelia/parked/.trash-<hex>  what a uid's sweeper removes
//	ROOT/.amelia/stamps/<id>     the stamp of workflow id's checkout
//	ROOT/.amelia/pool/<uid>      "park NAME KEY TIME": the uid's parked
//	                             checkout, made of a repository whose
//	                             first root commit is KEY
//	ROOT/.amelia/pool/<uid>.stamp  its stamp ("start COMMIT", then
//	                             checkout stamp's output)
//	ROOT/.amelia/trash/<uid>     the uid's trash entries, one a line
//	ROOT/.amelia/trash/<uid>.lock  held by the uid's sweeper
//
// A uid moves its own checkout and run directory into parked/ (only it
// may: renaming a directory into another one writes its "..", which
// needs its owner's permission); the sandbox's user checks what it
// moved and records it. So worktrees/ holds workflows' checkouts alone.
// The rest of .amelia/ is the sandbox's user's: no uid writes a record
// or a stamp. A uid with a parked checkout, or with trash left, is given to no
// workflow but, when its trash is gone, one that reuses its checkout;
// the allocation (allocateUser) drops trash entries that are gone. The
// parked and trash entries keep the uid's ownership: only the uid can
// remove them, and it runs nothing else while they exist.

// parking reports whether the workspace parks checkouts: with run users
// and a bound above 0.
func (w *Workspace) parking() bool { return w.runUsers && w.parked > 0 }

// Retire ends the checkout of id once nothing of it is to be kept (its
// work was delivered, or there was none): with run users, its uid's
// processes and shared temporary files go at once; the checkout is
// parked for a later workflow of the same uid (unless the workspace
// parks none), the run directory runDir ("": none) and whatever else the
// uid has in worktrees/ and .amelia/runs/ is renamed into a trash entry,
// and the uid is released. Without run users the checkout is renamed
// into the trash. A process of the uid detached in the sandbox removes
// the trash, so Retire takes the same time whatever the checkout's size.
// Parked checkouts over the bound go into their own uids' trash, oldest
// first. A legacy linked worktree is removed as RemoveWorktree does.
func (w *Workspace) Retire(ctx context.Context, id, runDir string) error {
	if err := ValidateWorkflowID(id); err != nil {
		return err
	}
	if runDir != "" && path.Dir(runDir) != path.Join(w.root, ".amelia", "runs") {
		return fmt.Errorf("retire the checkout of %s: %q is not one of this workspace's run directories", id, runDir)
	}
	uid, err := w.RunUser(ctx, id)
	if err != nil {
		return fmt.Errorf("retire the checkout of %s: %w", id, err)
	}
	if uid == "" {
		return w.retireUnseparated(ctx, id, runDir)
	}
	wt := w.WorktreeDir(id)
	trash := newTrashName()
	parking := w.parking()
	name := ".park-" + randomHex(16)
	parkedDir := path.Join(w.root, ".amelia", "parked")
	trashDir := path.Join(parkedDir, trash)
	if err := w.ensureParkedDir(ctx); err != nil {
		return fmt.Errorf("retire the checkout of %s: %w", id, err)
	}
	if err := w.endSession(ctx, uid); err != nil {
		return fmt.Errorf("retire the checkout of %s: %w", id, err)
	}
	uidN, _ := strconv.Atoi(uid) // RunUser's, valid
	end := workstep.EndUID{UID: uidN, Checkout: wt, Trash: trashDir, RunDir: runDir}
	if parking {
		end.Park = path.Join(parkedDir, name)
	}
	if err := w.step(ctx, uid, "end the checkout's processes", end, nil, nil); err != nil {
		return fmt.Errorf("retire the checkout of %s: %w", id, err)
	}
	// The sandbox's user parks the checkout, has the uid move into its
	// trash what else it has in worktrees/ and .amelia/runs/, then
	// releases the uid and puts parked checkouts over the bound into
	// their uids' trash (workstep.Park).
	parkReq := workstep.Park{Root: w.root, Repo: w.RepoDir(), ID: id, UID: uidN, Name: name, Trash: trash,
		DirtyRef: dirtyRef(id), Record: w.userRecord(id), Parking: parking, Bound: w.parked}
	var sweeps []string
	for pass := 1; ; pass++ {
		var out bytes.Buffer
		err := w.step(ctx, "", "park the checkout", parkReq, nil, &out)
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitUserLeft {
			if err := w.moveLeft(ctx, uid, trashDir, out.Bytes(), pass); err != nil {
				return fmt.Errorf("retire the checkout of %s: %w", id, err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("retire the checkout of %s: %w", id, err)
		}
		sweeps = strings.Split(strings.TrimSpace(out.String()), "\n")
		break
	}
	w.forgetUser(id)
	w.sweep(ctx, sweeps)
	w.log.Info("checkout retired", "workflow", id, "parked", parking)
	return nil
}

// ensureParkedDir makes ROOT/.amelia/parked, 1733, as the sandbox's user.
func (w *Workspace) ensureParkedDir(ctx context.Context) error {
	return w.step(ctx, "", "make the parked directory", workstep.SharedDirs{Root: w.root, Dirs: []string{".amelia/parked"}}, nil, nil)
}

// newTrashName is the name of a new trash entry in .amelia/parked/.
func newTrashName() string { return ".trash-" + randomHex(16) }

// moveLeft has uid move the entries listed (NUL-terminated paths in
// worktrees/ or .amelia/runs/, as the sandbox's user found them) into its
// trash entry, each only if it is still the uid's. It fails once pass
// reaches removePasses.
func (w *Workspace) moveLeft(ctx context.Context, uid, trash string, listing []byte, pass int) error {
	paths, err := w.leftPaths(uid, listing, pass, "move away")
	if err != nil {
		return err
	}
	const body = `uid=$1 trash=$2
shift 2
i=0
for p; do
	i=$((i + 1))
	[ -n "$(find "$p" -maxdepth 0 -user "$uid" 2>/dev/null)" ] || continue
	if [ ! -L "$p" ]; then chmod u+rwx -- "$p" 2>/dev/null || true; fi
	mv -- "$p" "$trash/left-$$-$i" 2>/dev/null || { chmod -R u+rwx -- "$p" 2>/dev/null; rm -rf -- "$p" 2>/dev/null; } || true
done
`
	for chunk := range slices.Chunk(paths, 100) {
		if err := w.scriptAs(ctx, uid, "move away what the uid left", nil, nil, nil, body, append([]string{uid, trash}, chunk...)...); err != nil {
			return fmt.Errorf("release uid %s: %w", uid, err)
		}
	}
	return nil
}

// sweep starts, for each "sweep UID NAME" line, a process of that uid
// detached in the sandbox that removes worktrees/NAME, unless one of the
// uid's sweepers runs already (it holds .amelia/trash/UID.lock; it is
// then left to it: a sweeper removes every trash entry its uid has when
// it ends). Nothing waits for the removal: a sweeper that fails to start
// is logged, and the next allocation asks for it again.
func (w *Workspace) sweep(ctx context.Context, lines []string) {
	seen := map[string]bool{}
	var uids []string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "sweep" || !strings.HasPrefix(f[2], ".trash-") || strings.Contains(f[2], "/") {
			continue
		}
		uid, err := validUID(f[1], w.uids[0], w.uids[1])
		if err != nil && w.runUsers {
			continue
		}
		if !w.runUsers {
			uid = ""
		}
		if !seen[uid] {
			seen[uid] = true
			uids = append(uids, uid)
		}
	}
	// The sweeper takes its uid's lock, then removes every trash entry
	// the record lists (what it was started for among them), and goes
	// on while the record names more. The record is the sandbox's
	// user's, readable by all; the sandbox's user drops what is gone.
	for _, uid := range uids {
		rec := path.Join(w.root, ".amelia", "trash", cmp.Or(uid, "self"))
		if err := w.step(context.WithoutCancel(ctx), uid, "start the removal of the trash", workstep.Sweep{Root: w.root, Record: rec}, nil, nil); err != nil {
			w.log.Warn("could not start removing a retired checkout; the next run's workspace starts it again", "uid", uid, "err", err)
		}
	}
}

// retireUnseparated is Retire where runs have no uid of their own: the
// run directory goes (at once when it holds few entries) and the checkout
// is renamed into a trash entry of the sandbox's user, which a detached
// process of its own removes (workstep.Retire).
func (w *Workspace) retireUnseparated(ctx context.Context, id, runDir string) error {
	var out strings.Builder
	req := workstep.Retire{Root: w.root, Repo: w.RepoDir(), Checkout: w.WorktreeDir(id), RunDir: runDir, Trash: newTrashName(), DirtyRef: dirtyRef(id)}
	if err := w.step(ctx, "", "retire the checkout", req, nil, &out); err != nil {
		return fmt.Errorf("retire the checkout of %s: %w", id, err)
	}
	if strings.TrimSpace(out.String()) == "legacy" {
		return w.RemoveWorktree(ctx, id)
	}
	w.log.Info("checkout retired", "workflow", id)
	return nil
}

// ParkedCheckout is a checkout parked for reuse (see Retire).
type ParkedCheckout struct {
	// Name is its entry in ROOT/.amelia/parked/.
	Name string
	UID  int
	// Age is how long ago it was parked, by the sandbox's clock.
	Age time.Duration
}

// PruneParked removes the checkouts parked longer than olderThan ago
// (with dry, it only lists them): each goes into its uid's trash, which
// a sweeper of the uid removes, detached, as Retire's. A parked checkout
// holds no work: only one whose work was delivered, or had none, is
// parked. It returns those it removed (or would remove).
func (w *Workspace) PruneParked(ctx context.Context, olderThan time.Duration, dry bool) ([]ParkedCheckout, error) {
	secs := int64(olderThan / time.Second)
	if secs <= 0 {
		return nil, fmt.Errorf("prune the parked checkouts: older than %s: give at least a second", olderThan)
	}
	var out bytes.Buffer
	if err := w.step(ctx, "", "prune the parked checkouts", workstep.PruneParked{Root: w.root, OlderThan: secs, Dry: dry}, nil, &out); err != nil {
		return nil, err
	}
	var parked []ParkedCheckout
	var sweeps []string
	for l := range strings.Lines(out.String()) {
		f := strings.Fields(l)
		switch {
		case len(f) == 4 && f[0] == "parked" && strings.HasPrefix(f[2], ".park-") && !strings.Contains(f[2], "/"):
			uid, err1 := strconv.Atoi(f[1])
			age, err2 := strconv.ParseInt(f[3], 10, 64)
			if err1 == nil && err2 == nil {
				parked = append(parked, ParkedCheckout{Name: f[2], UID: uid, Age: time.Duration(age) * time.Second})
			}
		case len(f) == 3 && f[0] == "sweep":
			sweeps = append(sweeps, strings.TrimSpace(l))
		}
	}
	w.sweep(ctx, sweeps)
	return parked, nil
}
