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

// entry makes an entry of uid in dir: a directory, the file "squat", or a
// link to the directory target.
func entry(t *testing.T, dir, name, kind string, uid int) {
	t.Helper()
	p := filepath.Join(dir, name)
	var err error
	switch kind {
	case "dir":
		err = os.Mkdir(p, 0o700)
	case "file":
		writeFile(t, dir, name, "squat")
	default:
		err = os.Symlink(filepath.Join(dir, kind), p)
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
// followed) it exchanges with it, so nothing is lost; this user's own
// entry it leaves alone (exit 3); it refuses a FROM that is not a
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
	}{
		{name: "free", made: []made{{"new", "dir", me}}, owner: me, to: "to"},
		{name: "own entry at to", made: []made{{"new", "dir", me}, {"to", "dir", me}}, owner: me, to: "to", code: 3, stderr: "is this user's"},
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
			if ents, err := os.ReadDir(filepath.Join(dir, "trap")); err == nil && len(ents) != 0 {
				t.Errorf("the link's target holds %v: the link was followed", ents)
			}
		})
	}
}
