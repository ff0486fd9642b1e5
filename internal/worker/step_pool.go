package worker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// The steps of the workspace's uids and of its pool of parked checkouts
// (core/workspace's pool.go and users.go say what each holds).

// shared makes the workspace's shared directories, 1733: any uid may
// make an entry, none may list or remove another's.
func shared(root string, dirs ...string) error {
	for _, d := range dirs {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o777); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o733|os.ModeSticky); err != nil {
			return err
		}
	}
	return nil
}

func stepSharedDirs(_ context.Context, r workstep.SharedDirs, _ stepIO) error {
	for _, d := range r.Dirs {
		if !filepath.IsLocal(d) {
			return fmt.Errorf("%q is not a directory under the workspace", d)
		}
	}
	return shared(r.Root, r.Dirs...)
}

func stepAllocate(ctx context.Context, r workstep.Allocate, sio stepIO) error {
	release, err := lockWorkspace(ctx, r.Root)
	if err != nil {
		return err
	}
	defer release()
	users := filepath.Join(r.Root, ".amelia", "users")
	if err := os.MkdirAll(users, 0o777); err != nil {
		return err
	}
	if err := shared(r.Root, "worktrees", ".amelia/runs", ".amelia/parked"); err != nil {
		return err
	}
	if exists(filepath.Join(users, r.ID)) {
		return &stepExit{workstep.ExitRefused, "workflow " + r.ID + " has a uid in the sandbox already"}
	}
	pk := filepath.Join(r.Root, ".amelia", "parked")
	pool := filepath.Join(r.Root, ".amelia", "pool")
	trashd := filepath.Join(r.Root, ".amelia", "trash")
	if err := pendingSweeps(trashd, pk, sio.stdout); err != nil {
		return err
	}
	record := func(uid int) error {
		return writeFileFrom(filepath.Join(users, r.ID), strings.NewReader(strconv.Itoa(uid)+"\n"))
	}
	if r.Parking {
		if best, name, ok := newestParked(ctx, r, pool, trashd); ok {
			stamp, err := os.ReadFile(filepath.Join(pool, strconv.Itoa(best)+".stamp"))
			if err == nil && mineOf(filepath.Join(pk, name), best) {
				if err := record(best); err != nil {
					return err
				}
				if _, err := fmt.Fprintf(sio.stdout, "%d\nreuse %s\n%s", best, name, stamp); err != nil {
					return err
				}
				removePoolRecord(pool, best)
				return nil
			}
			// Its checkout is not there: the record goes, and what the uid
			// has left goes with its next release.
			removePoolRecord(pool, best)
		}
	}
	used := usedUIDs(users, pool, trashd, r.IDFiles)
	uid := r.First
	for used[uid] {
		uid++
		if uid > r.Last {
			held, _ := os.ReadDir(users)
			return fmt.Errorf("no uid left for a run in %d-%d: %d workflows hold one; remove kept work (amelia results --discard)", r.First, r.Last, len(held))
		}
	}
	if err := record(uid); err != nil {
		return err
	}
	_, err = fmt.Fprintln(sio.stdout, uid)
	return err
}

// pendingSweeps drops from each uid's trash record (TRASHD/UID) the
// entries of parked/ that are gone, and the record once none is left;
// for each entry left whose uid's sweeper is not running (it holds
// TRASHD/UID.lock), it writes "sweep UID NAME" for the host to start one.
func pendingSweeps(trashd, pk string, out io.Writer) error {
	ents, err := os.ReadDir(trashd)
	if err != nil {
		return nil // none yet
	}
	for _, e := range ents {
		u := e.Name()
		if strings.HasSuffix(u, ".lock") || strings.HasPrefix(u, ".") || strings.Trim(u, "0123456789abcdefghijklmnopqrstuvwxyz") != "" {
			continue
		}
		f := filepath.Join(trashd, u)
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var left []string
		for n := range strings.FieldsSeq(string(data)) {
			if strings.HasPrefix(n, ".trash-") && exists(filepath.Join(pk, n)) {
				left = append(left, n)
			}
		}
		if len(left) == 0 {
			_ = os.Remove(f)
			continue
		}
		if err := os.WriteFile(f, []byte(strings.Join(left, "\n")+"\n"), 0o644); err != nil {
			return fmt.Errorf("rewrite the trash record of %s: %w", u, err)
		}
		if sweeperIdle(f + ".lock") {
			for _, n := range left {
				if _, err := fmt.Fprintf(out, "sweep %s %s\n", u, n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sweeperIdle reports whether no sweeper holds the lock file lock.
func sweeperIdle(lock string) bool {
	f, err := os.Open(lock)
	if err != nil {
		return false
	}
	defer f.Close()
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil
}

// newestParked is the uid in r's range whose parked checkout (its record
// POOL/UID: "park NAME KEY TIME") is the newest of the repository of
// r.Start, with no trash left, and that checkout's name.
func newestParked(ctx context.Context, r workstep.Allocate, pool, trashd string) (int, string, bool) {
	ents, err := os.ReadDir(pool)
	if err != nil {
		return 0, "", false
	}
	key := rootKey(ctx, filepath.Join(r.Root, "repo"), r.Start)
	if key == "" {
		return 0, "", false
	}
	best, bestName, bestT := 0, "", int64(-1)
	for _, e := range ents {
		u, err := strconv.Atoi(e.Name())
		if err != nil || strconv.Itoa(u) != e.Name() || u < r.First || u > r.Last || exists(filepath.Join(trashd, e.Name())) {
			continue
		}
		f := poolRecord(filepath.Join(pool, e.Name()))
		if len(f) < 4 || f[2] != key {
			continue
		}
		if t, err := strconv.ParseInt(f[3], 10, 64); err == nil && t > bestT {
			best, bestName, bestT = u, f[1], t
		}
	}
	return best, bestName, bestT >= 0
}

// poolRecord is the fields of the first line of a pool record.
func poolRecord(name string) []string {
	f, err := os.Open(name)
	if err != nil {
		return nil
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	return strings.Fields(line)
}

func removePoolRecord(pool string, uid int) {
	_ = os.Remove(filepath.Join(pool, strconv.Itoa(uid)))
	_ = os.Remove(filepath.Join(pool, strconv.Itoa(uid)+".stamp"))
}

// rootKey is the first (in name order) of the root commits of the bare
// repository repo that commit descends from: checkouts of one repository
// share it. "" when git cannot tell.
func rootKey(ctx context.Context, repo, commit string) string {
	out, err := gitOutput(ctx, stepIO{stderr: io.Discard}, repo, "rev-list", "--max-parents=0", commit, "--")
	if err != nil {
		return ""
	}
	roots := strings.Fields(out)
	if len(roots) == 0 {
		return ""
	}
	return slices.Min(roots)
}

// usedUIDs are the uids a run may not get: those the workflows' records
// hold, those of parked checkouts and of trash, and the image's ids.
func usedUIDs(users, pool, trashd string, idFiles []string) map[int]bool {
	used := map[int]bool{}
	add := func(s string) {
		if n, err := strconv.Atoi(s); err == nil {
			used[n] = true
		}
	}
	if ents, err := os.ReadDir(users); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			if b, err := os.ReadFile(filepath.Join(users, e.Name())); err == nil {
				for s := range strings.FieldsSeq(string(b)) {
					add(s)
				}
			}
		}
	}
	for _, d := range []string{pool, trashd} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			add(e.Name())
		}
	}
	for _, f := range idFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for line := range bytes.SplitSeq(b, []byte("\n")) {
			if fields := strings.Split(string(line), ":"); len(fields) > 2 {
				add(fields[2])
			}
		}
	}
	return used
}

// exists reports whether name is there, a link not followed.
func exists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}

// mineOf reports whether dir is a directory of uid, not a link.
func mineOf(dir string, uid int) bool {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == uid
}

func stepPark(ctx context.Context, r workstep.Park, sio stepIO) error {
	for _, name := range []string{r.Name, r.Trash} {
		if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
			return fmt.Errorf("%q is not a name in a directory", name)
		}
	}
	release, err := lockWorkspace(ctx, r.Root)
	if err != nil {
		return err
	}
	defer release()
	dot := filepath.Join(r.Root, ".amelia")
	pk, stamps, pool, trashd := filepath.Join(dot, "parked"), filepath.Join(dot, "stamps"), filepath.Join(dot, "pool"), filepath.Join(dot, "trash")
	for d, mode := range map[string]os.FileMode{stamps: 0o700, pool: 0o700, trashd: 0o755} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			return err
		}
		if err := os.Chmod(d, mode); err != nil {
			return err
		}
	}
	// What else the uid has where entries of any uid may be, it is to
	// move into its trash first.
	var left []string
	for _, d := range []string{filepath.Join(r.Root, "worktrees"), filepath.Join(dot, "runs"), pk} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			p := filepath.Join(d, e.Name())
			if (d == pk && (e.Name() == r.Trash || e.Name() == r.Name)) || !ownedBy(p, r.UID) {
				continue
			}
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		if _, err := io.WriteString(sio.stdout, strings.Join(left, "\x00")+"\x00"); err != nil {
			return err
		}
		return &stepExit{code: workstep.ExitUserLeft}
	}
	sweep := func(uid int, name string) error {
		rec := filepath.Join(trashd, strconv.Itoa(uid))
		if err := appendLine(rec, name); err != nil {
			return fmt.Errorf("record the trash of %d: %w", uid, err)
		}
		if err := recordLock(rec); err != nil {
			return err
		}
		_, err := fmt.Fprintf(sio.stdout, "sweep %d %s\n", uid, name)
		return err
	}
	// trashOf renames a parked checkout of uid within parked/ (moving a
	// directory of another uid's elsewhere writes its ".."), as trash.
	trashOf := func(uid int, name string) error {
		to := ".trash-" + randomHex(16)
		if err := os.Rename(filepath.Join(pk, name), filepath.Join(pk, to)); err != nil {
			return fmt.Errorf("put the parked checkout %s into the trash: %w", name, err)
		}
		return sweep(uid, to)
	}
	stampFile := filepath.Join(stamps, r.ID)
	if r.Parking && mineOf(filepath.Join(pk, r.Name), r.UID) {
		if data, err := os.ReadFile(stampFile); err == nil {
			start, _, _ := strings.Cut(string(data), "\n")
			start = strings.TrimPrefix(start, "start ")
			if err := os.Rename(stampFile, filepath.Join(pool, strconv.Itoa(r.UID)+".stamp")); err != nil {
				return fmt.Errorf("pool the stamp: %w", err)
			}
			rec := fmt.Sprintf("park %s %s %d\n", r.Name, rootKey(ctx, r.Repo, start), time.Now().Unix())
			if err := os.WriteFile(filepath.Join(pool, strconv.Itoa(r.UID)), []byte(rec), 0o600); err != nil {
				return fmt.Errorf("pool the checkout: %w", err)
			}
		} else if err := trashOf(r.UID, r.Name); err != nil {
			// Unstamped (made where parking was off): not reusable.
			return err
		}
	}
	_ = os.Remove(stampFile)
	// An empty trash entry goes now (the sandbox's user owns parked/);
	// else the uid's sweeper removes it.
	if err := os.Remove(filepath.Join(pk, r.Trash)); err != nil && exists(filepath.Join(pk, r.Trash)) {
		if err := sweep(r.UID, r.Trash); err != nil {
			return err
		}
	}
	if err := dropRef(ctx, sio, r.Repo, r.DirtyRef); err != nil {
		return err
	}
	if err := os.Remove(r.Record); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("release the uid: %w", err)
	}
	// Over the bound: the oldest parked checkouts go into their uids'
	// trash.
	for {
		ents, _ := os.ReadDir(pool)
		old, oldT, n := -1, int64(0), 0
		for _, e := range ents {
			u, err := strconv.Atoi(e.Name())
			if err != nil || strconv.Itoa(u) != e.Name() {
				continue
			}
			n++
			f := poolRecord(filepath.Join(pool, e.Name()))
			var t int64
			if len(f) > 3 {
				t, _ = strconv.ParseInt(f[3], 10, 64)
			}
			if old < 0 || t < oldT {
				old, oldT = u, t
			}
		}
		if n <= r.Bound || old < 0 {
			return nil
		}
		if f := poolRecord(filepath.Join(pool, strconv.Itoa(old))); len(f) > 1 && mineOf(filepath.Join(pk, f[1]), old) {
			if err := trashOf(old, f[1]); err != nil {
				return err
			}
		}
		removePoolRecord(pool, old)
	}
}

func stepPruneParked(ctx context.Context, r workstep.PruneParked, sio stepIO) error {
	if r.OlderThan <= 0 {
		return fmt.Errorf("prune the parked checkouts: older than %d seconds: give a positive age", r.OlderThan)
	}
	release, err := lockWorkspace(ctx, r.Root)
	if err != nil {
		return err
	}
	defer release()
	dot := filepath.Join(r.Root, ".amelia")
	pk, pool, trashd := filepath.Join(dot, "parked"), filepath.Join(dot, "pool"), filepath.Join(dot, "trash")
	ents, err := os.ReadDir(pool)
	if err != nil {
		return nil // nothing was ever parked
	}
	now := time.Now().Unix()
	type old struct {
		uid  int
		name string
	}
	var olds []old
	for _, e := range ents {
		u, err := strconv.Atoi(e.Name())
		if err != nil || strconv.Itoa(u) != e.Name() {
			continue
		}
		f := poolRecord(filepath.Join(pool, e.Name()))
		if len(f) < 4 || f[0] != "park" || !strings.HasPrefix(f[1], ".park-") || strings.ContainsAny(f[1], "/\x00") {
			continue
		}
		t, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil || now-t <= r.OlderThan {
			continue
		}
		if _, err := fmt.Fprintf(sio.stdout, "parked %d %s %d\n", u, f[1], now-t); err != nil {
			return err
		}
		olds = append(olds, old{u, f[1]})
	}
	if r.Dry {
		return nil
	}
	for _, o := range olds {
		// Renamed within parked/ (moving a directory of another uid's
		// elsewhere writes its ".."), recorded for the uid's sweeper.
		if mineOf(filepath.Join(pk, o.name), o.uid) {
			to := ".trash-" + randomHex(16)
			if err := os.Rename(filepath.Join(pk, o.name), filepath.Join(pk, to)); err != nil {
				return fmt.Errorf("put the parked checkout %s into the trash: %w", o.name, err)
			}
			rec := filepath.Join(trashd, strconv.Itoa(o.uid))
			if err := os.MkdirAll(trashd, 0o755); err != nil {
				return err
			}
			if err := appendLine(rec, to); err != nil {
				return fmt.Errorf("record the trash of %d: %w", o.uid, err)
			}
			if err := recordLock(rec); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(sio.stdout, "sweep %d %s\n", o.uid, to); err != nil {
				return err
			}
		}
		removePoolRecord(pool, o.uid)
	}
	return nil
}

// dropRef deletes ref from the bare repository repo, where both are
// there.
func dropRef(ctx context.Context, sio stepIO, repo, ref string) error {
	if fi, err := os.Stat(repo); err != nil || !fi.IsDir() {
		return nil
	}
	if git(ctx, stepIO{stderr: io.Discard}, repo, nil, "show-ref", "--verify", "--quiet", ref) != nil {
		return nil
	}
	return git(ctx, stepIO{stderr: sio.stderr}, repo, nil, "update-ref", "-d", ref)
}

// recordLock makes the lock of the trash record rec, which every uid's
// sweeper opens (mode 0644), unless it is there.
func recordLock(rec string) error {
	if exists(rec + ".lock") {
		return nil
	}
	if err := os.WriteFile(rec+".lock", nil, 0o644); err != nil {
		return err
	}
	return os.Chmod(rec+".lock", 0o644)
}

// ownedBy reports whether the entry p (a link not followed) is uid's.
func ownedBy(p string, uid int) bool {
	var st syscall.Stat_t
	return syscall.Lstat(p, &st) == nil && int(st.Uid) == uid
}

// appendLine adds line to the file name (made 0644 if need be).
func appendLine(name, line string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
