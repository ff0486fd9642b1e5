package worker_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/internal/gittest"
)

// step runs `amelia-worker step` with r.
func step(t *testing.T, r workstep.Request, stdin string) result {
	t.Helper()
	args, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return runWorker(t, nil, strings.NewReader(stdin), "step", r.Step(), string(args))
}

// The workspace's steps on a real repository: a bundle received into a
// bare repository the step makes, its refs listed, work committed in a
// checkout and bundled back, each refusal with its code.
func TestSteps(t *testing.T) {
	src := t.TempDir()
	gittest.Git(t, src, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(src, "a.txt"), []byte("a\n"), 0o644)
	gittest.Git(t, src, "add", ".")
	gittest.Git(t, src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
	base := strings.TrimSpace(gittest.Git(t, src, "rev-parse", "HEAD"))
	bundle := filepath.Join(t.TempDir(), "b.bundle")
	gittest.Git(t, src, "bundle", "create", bundle, "main")
	data, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	repo := filepath.Join(root, "repo")

	if r := step(t, workstep.Refs{Root: root, Repo: repo}, ""); r.code != 0 || len(r.stdout) != 0 {
		t.Fatalf("refs of no repository: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
	if r := step(t, workstep.Receive{Root: root, Repo: repo, Bundle: true, Refs: []workstep.RefTip{{Name: "refs/heads/main", Oid: base}}}, string(data)); r.code != 0 {
		t.Fatalf("receive: exit %d: %s", r.code, r.stderr)
	}
	if r := step(t, workstep.Refs{Root: root, Repo: repo}, ""); strings.TrimSpace(string(r.stdout)) != base {
		t.Fatalf("refs after the bundle: %q (exit %d: %s), want %s", r.stdout, r.code, r.stderr, base)
	}
	if fi, err := os.Stat(filepath.Join(root, ".amelia-repo.lock")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the workspace lock: %v %v, want a file of mode 0600", fi, err)
	}

	wt := filepath.Join(root, "wt")
	co := workstep.Checkout{Dir: wt, Branch: "amelia/w", Start: base, Objects: filepath.Join(repo, "objects"), Exclude: "*.log\n", Shared: root, Stamp: true}
	r := step(t, co, "")
	uid, stamp, _ := strings.Cut(string(r.stdout), "\n")
	if r.code != 0 || uid != fmt.Sprint(os.Geteuid()) || !strings.HasPrefix(stamp, "stamp ") {
		t.Fatalf("checkout: exit %d, stdout %q, stderr %s; want the uid, then the stamp", r.code, r.stdout, r.stderr)
	}
	if got := gittest.Git(t, wt, "rev-parse", "--abbrev-ref", "HEAD"); strings.TrimSpace(got) != "amelia/w" {
		t.Errorf("the checkout is on %q, want amelia/w", got)
	}
	for d, mode := range map[string]os.FileMode{wt: 0o700 | os.ModeDir, filepath.Join(root, "worktrees"): 0o733 | os.ModeDir | os.ModeSticky} {
		if fi, err := os.Stat(d); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v %v, want mode %v", d, fi.Mode(), err, mode)
		}
	}
	if fi, err := os.Stat(filepath.Join(wt, "a.txt")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a file of a stamped checkout: %v %v, want mode 0600 (umask 077)", fi, err)
	}
	if r := step(t, co, ""); r.code != workstep.ExitRefused || !strings.Contains(string(r.stderr), "already exists") {
		t.Errorf("a checkout where one is: exit %d, stderr %q, want a refusal", r.code, r.stderr)
	}
	os.WriteFile(filepath.Join(wt, ".gitignore"), []byte("*.tmp\n"), 0o644)
	os.WriteFile(filepath.Join(wt, "b.txt"), []byte("b\n"), 0o644)
	os.WriteFile(filepath.Join(wt, "x.log"), nil, 0o644)
	os.WriteFile(filepath.Join(wt, "y.tmp"), nil, 0o644)
	ident := []string{"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a"}

	tests := []struct {
		name   string
		req    workstep.Request
		code   int
		stdout string // its start
		stderr string // within it
	}{
		{"bundle with no changes", workstep.Bundle{Dir: wt, Branch: "amelia/w", Base: base}, workstep.ExitUnmade, "", "no-changes"},
		{"no work yet", workstep.HasWork{Dir: wt, Branch: "amelia/w", Base: base}, 0, "none\n", ""},
		{"commit", workstep.Commit{Dir: wt, Message: "amelia: w", Env: ident}, 0, "committed\nours x.log\ntheirs y.tmp\n", ""},
		{"commit again", workstep.Commit{Dir: wt, Message: "amelia: w", Env: ident}, 0, "clean\n", ""},
		{"work", workstep.HasWork{Dir: wt, Branch: "amelia/w", Base: base}, 0, "work\n", ""},
		{"bundle", workstep.Bundle{Dir: wt, Branch: "amelia/w", Base: base}, 0, "# v2 git bundle\n", ""},
		{"bundle of no branch", workstep.Bundle{Dir: wt, Branch: "amelia/none", Base: base}, workstep.ExitRefused, "", "branch amelia/none not found"},
		{"bundle of no checkout", workstep.Bundle{Dir: filepath.Join(root, "none"), Branch: "amelia/w", Base: base}, workstep.ExitRefused, "", "is not in the sandbox"},
		{"commit in no checkout", workstep.Commit{Dir: filepath.Join(root, "none")}, 1, "", "amelia-worker step commit: the checkout"},
	}
	for _, tc := range tests {
		r := step(t, tc.req, "")
		if r.code != tc.code || !strings.HasPrefix(string(r.stdout), tc.stdout) || !strings.Contains(string(r.stderr), tc.stderr) {
			t.Errorf("%s: exit %d, stdout %.60q, stderr %q; want exit %d, stdout from %q, stderr with %q", tc.name, r.code, r.stdout, r.stderr, tc.code, tc.stdout, tc.stderr)
		}
	}
	if log := gittest.Git(t, wt, "log", "-1", "--format=%an %s"); strings.TrimSpace(log) != "a amelia: w" {
		t.Errorf("the commit: %q", log)
	}
}

// A step's bad request says what was wrong, naming the step.
func TestStepBadRequest(t *testing.T) {
	type badCase struct {
		args []string
		want string
	}
	cases := []badCase{
		{[]string{"step", "nope", "{}"}, `no step "nope"`},
		{[]string{"step", "refs", `{"root": 1}`}, "amelia-worker step refs: its arguments"},
		{[]string{"step", "refs", `{"unknown": "x"}`}, `unknown field "unknown"`},
		{[]string{"step", "end-uid", `{"uid": 0, "checkout": "/nonexistent"}`}, "uid 0 is no workflow's"},
	}
	for _, tc := range cases {
		r := runWorker(t, nil, nil, tc.args...)
		if r.code == 0 || !strings.Contains(string(r.stderr), tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want an error with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}

// Ending a run's uid removes its run directory at once when it holds the
// few entries a run leaves there, leaving the trash entry empty (no
// sweeper needed); one the uid filled with more, anywhere in it, goes
// into the trash whole, for a sweeper to remove.
func TestEndUIDRunDirectory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fill    func(t *testing.T, dir string)
		trashed bool
	}{
		{"the worker's files", func(t *testing.T, dir string) {
			for _, f := range []string{"prompt", "messages.jsonl", "stderr.log", "pid"} {
				writeFile(t, dir, f, "x")
			}
			// The tunnel's socket, left by its killed holder.
			ln, err := net.Listen("unix", filepath.Join(dir, "tunnel.sock"))
			if err != nil {
				t.Fatal(err)
			}
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			ln.Close()
			// The agent's HOME and TMPDIR, with a file of its own.
			for _, d := range []string{"home", "tmp"} {
				if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			writeFile(t, filepath.Join(dir, "home"), ".bash_history", "x")
		}, false},
		{"many files", func(t *testing.T, dir string) {
			for i := range 70 {
				writeFile(t, dir, fmt.Sprint("f", i), "x")
			}
		}, true},
		{"many files in the agent's HOME", func(t *testing.T, dir string) {
			writeFile(t, dir, "prompt", "x")
			home := filepath.Join(dir, "home", ".cache")
			if err := os.MkdirAll(home, 0o755); err != nil {
				t.Fatal(err)
			}
			for i := range 70 {
				writeFile(t, home, fmt.Sprint("f", i), "x")
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			runDir, trash := filepath.Join(root, "runs", "w-1"), filepath.Join(root, "parked", ".trash-1")
			for _, d := range []string{runDir, filepath.Dir(trash)} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			tc.fill(t, runDir)
			// A uid no process has: the step ends nothing.
			r := step(t, workstep.EndUID{UID: 65432, Checkout: filepath.Join(root, "worktrees", "w"), Trash: trash, RunDir: runDir}, "")
			if r.code != 0 {
				t.Fatalf("end-uid: exit %d: %s", r.code, r.stderr)
			}
			if _, err := os.Lstat(runDir); !os.IsNotExist(err) {
				t.Errorf("the run directory is still there: %v", err)
			}
			ents, err := os.ReadDir(trash)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(ents) == 1 && ents[0].Name() == "run"; got != tc.trashed || (!tc.trashed && len(ents) != 0) {
				t.Errorf("the trash entry holds %v; want the run directory in it: %v", ents, tc.trashed)
			}
		})
	}
}

// Retiring a workflow that has no uid of its own: the run directory goes
// at once, the checkout into a trash entry that the record lists and a
// sweeper the step started removes, and the dirty ref goes; a linked
// worktree of an older amelia stays, for the host to remove, and says so;
// a run directory that cannot go keeps the checkout where it is.
func TestRetire(t *testing.T) {
	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	gittest.Git(t, root, "init", "-q", "--bare", repo)
	src := t.TempDir()
	gittest.Git(t, src, "init", "-q", "-b", "main")
	gittest.Git(t, src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one")
	gittest.Git(t, src, "push", "-q", repo, "main:refs/amelia/dirty/w")
	wt, runDir := filepath.Join(root, "worktrees", "w"), filepath.Join(root, ".amelia", "runs", "w-1")
	for _, d := range []string{filepath.Join(wt, "sub"), runDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(wt, "sub"), "work.txt", "x")
	writeFile(t, runDir, "messages.jsonl", "{}")

	req := workstep.Retire{Root: root, Repo: repo, Checkout: wt, RunDir: runDir, Trash: ".trash-1", DirtyRef: "refs/amelia/dirty/w"}
	if r := step(t, req, ""); r.code != 0 || len(r.stdout) != 0 {
		t.Fatalf("retire: exit %d, %q: %s", r.code, r.stdout, r.stderr)
	}
	for _, p := range []string{wt, runDir} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	if out := gittest.Git(t, repo, "for-each-ref", "refs/amelia/dirty/"); out != "" {
		t.Errorf("the dirty ref is still there: %q", out)
	}
	if got := readFile(t, filepath.Join(root, ".amelia", "trash", "self")); got != ".trash-1\n" {
		t.Errorf("the trash record holds %q, want the entry", got)
	}
	waitFor(t, "the sweeper to remove the trash entry", func() bool {
		_, err := os.Lstat(filepath.Join(root, ".amelia", "parked", ".trash-1"))
		return os.IsNotExist(err)
	})

	// A linked worktree: it stays, and the host hears so.
	if err := os.MkdirAll(wt, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, wt, ".git", "gitdir: "+filepath.Join(repo, "worktrees", "w")+"\n")
	req.Trash, req.RunDir = ".trash-2", ""
	if r := step(t, req, ""); r.code != 0 || string(r.stdout) != "legacy\n" {
		t.Fatalf("retire a linked worktree: exit %d, %q: %s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(wt, ".git")); err != nil {
		t.Errorf("the linked worktree did not stay: %v", err)
	}
	// A run directory that cannot go into the trash: the step fails
	// before it touches the checkout, which stays.
	if err := os.Remove(filepath.Join(wt, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 70 {
		writeFile(t, runDir, fmt.Sprint("f", i), "x")
	}
	writeFile(t, filepath.Join(root, ".amelia", "parked"), ".trash-3", "not a directory")
	req.Trash, req.RunDir = ".trash-3", runDir
	if r := step(t, req, ""); r.code == 0 {
		t.Errorf("retire with a run directory that cannot move: exit 0")
	}
	if _, err := os.Stat(wt); err != nil {
		t.Errorf("the checkout did not stay: %v", err)
	}
	req.Trash = "../escape"
	if r := step(t, req, ""); r.code == 0 || !strings.Contains(string(r.stderr), "not a trash entry's name") {
		t.Errorf("a trash name with a slash: exit %d: %s", r.code, r.stderr)
	}
}
