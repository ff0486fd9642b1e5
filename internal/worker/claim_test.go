package worker_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// inode is the device and inode of path, not following a link.
func inode(t *testing.T, path string) [2]uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint64{st.Dev, st.Ino}
}

// entry makes an entry of uid in dir: a directory, the file "squat", a
// hard link to the file target ("=target"), or a symbolic link to the
// directory target.
func entry(t *testing.T, dir, name, kind string, uid int) {
	t.Helper()
	p := filepath.Join(dir, name)
	var err error
	switch target, hard := strings.CutPrefix(kind, "="); {
	case kind == "dir":
		err = os.Mkdir(p, 0o700)
	case kind == "file":
		writeFile(t, dir, name, "squat")
	case hard:
		err = os.Link(filepath.Join(dir, target), p)
	default:
		err = os.Symlink(filepath.Join(dir, target), p)
	}
	if err == nil {
		err = os.Lchown(p, uid, uid)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// claim renames the owner's directory "new" to "to" in a sticky directory
// of this user's. What another uid has at "to" (a file, a link, never
// followed) it exchanges with it, so nothing is lost; a directory of this
// user's it leaves alone (exit 3), a hard link another uid made to a file
// of this user's it moves away and removes; it refuses a FROM that is not a
// directory of the owner, a DIR that is not this user's, and a name with
// a slash. Entries of another uid take root to make (chown): without
// root, those cases are skipped.
func TestClaim(t *testing.T) {
	me, other := os.Geteuid(), 60777
	type made struct {
		name, kind string
		uid        int
	}
	for _, c := range []struct {
		name   string
		made   []made
		dir    string // DIR, below the test's directory
		owner  int
		to     string
		code   int
		stdout string
		stderr string
		gone   bool // what was at to is removed, not moved aside
	}{
		{name: "free", made: []made{{"new", "dir", me}}, owner: me, to: "to"},
		{name: "own directory at to", made: []made{{"new", "dir", me}, {"to", "dir", me}}, owner: me, to: "to", code: 3, stderr: "is a directory of this user's"},
		{name: "hard link to an own file at to", made: []made{{"new", "dir", me}, {"mine", "file", me}, {"to", "=mine", me}}, owner: me, to: "to", gone: true},
		{name: "new of another owner", made: []made{{"new", "dir", me}}, owner: 60778, to: "to", code: 1, stderr: "is not a directory of uid 60778"},
		{name: "new a link", made: []made{{"real", "dir", me}, {"new", "real", me}}, owner: me, to: "to", code: 1, stderr: "is not a directory of uid"},
		{name: "slash", made: []made{{"new", "dir", me}}, owner: me, to: "../to", code: 2, stderr: "without a slash"},
		{name: "file at to", made: []made{{"new", "dir", other}, {"to", "file", other}}, owner: other, to: "to", stdout: "aside 60777\n"},
		{name: "link at to", made: []made{{"new", "dir", other}, {"trap", "dir", other}, {"to", "trap", other}}, owner: other, to: "to", stdout: "aside 60777\n"},
		{name: "dir not mine", made: []made{{"d", "dir", other}}, dir: "d", owner: me, to: "to", code: 1, stderr: "not to this user"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Chmod(dir, 0o1733); err != nil {
				t.Fatal(err)
			}
			for _, m := range c.made {
				if m.uid != me && me != 0 {
					t.Skip("SKIPPED: making an entry of another uid needs root")
				}
				entry(t, dir, m.name, m.kind, m.uid)
			}
			var newWas, toWas [2]uint64
			if c.code == 0 {
				newWas = inode(t, filepath.Join(dir, "new"))
			}
			if c.stdout != "" {
				toWas = inode(t, filepath.Join(dir, c.to))
			}
			r := runWorker(t, nil, nil, "claim", "--owner", strconv.Itoa(c.owner), filepath.Join(dir, c.dir), "new", c.to)
			if r.code != c.code || string(r.stdout) != c.stdout || !strings.Contains(string(r.stderr), c.stderr) {
				t.Fatalf("claim: exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr with %q", r.code, r.stdout, r.stderr, c.code, c.stdout, c.stderr)
			}
			switch {
			case c.code == 0 && inode(t, filepath.Join(dir, "to")) != newWas:
				t.Errorf("to is not the directory that was new")
			case c.stdout != "" && inode(t, filepath.Join(dir, "new")) != toWas:
				t.Errorf("new is not what was at to: it was not moved aside")
			case c.code == 3 && inode(t, filepath.Join(dir, "to")) == inode(t, filepath.Join(dir, "new")):
				t.Errorf("a refused claim moved new")
			}
			if c.gone {
				if _, err := os.Lstat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
					t.Errorf("the link that was at to, moved aside to new: %v; want it removed", err)
				}
				if got := readFile(t, filepath.Join(dir, "mine")); got != "squat" {
					t.Errorf("the file the removed link led to holds %q", got)
				}
			}
			if ents, err := os.ReadDir(filepath.Join(dir, "trap")); err == nil && len(ents) != 0 {
				t.Errorf("the link's target holds %v: the link was followed", ents)
			}
		})
	}
}
