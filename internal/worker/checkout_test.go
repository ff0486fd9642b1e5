package worker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// git runs git in dir with a fixed identity and no hooks, umask 077 as the
// workspace's checkouts have it; it fails the test unless git succeeds.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// checkoutAt makes a checkout of commit of bare in dir as the workspace
// does (umask 077, the bare repo's objects as alternates) and stamps it.
func checkoutAt(t *testing.T, bare, dir, commit string) []byte {
	t.Helper()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "init", "-q", "--template=")
	if err := os.WriteFile(filepath.Join(dir, ".git/objects/info/alternates"), []byte(bare+"/objects\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitIn(t, dir, "checkout", "-q", "-b", "work", commit)
	r := runWorker(t, nil, nil, "checkout", "stamp", dir)
	if r.code != 0 || !strings.HasPrefix(string(r.stdout), "stamp ") {
		t.Fatalf("checkout stamp: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// A stamped checkout, tampered with in every way its owner could, then
// reused: what is left of it, once git has checked out the new base over
// the index reuse wrote, is exactly the new base: no tampered content
// (even behind an index forged to hide it), no untracked or ignored file,
// no link where a directory was, no nested .git, nothing of the old .git;
// and only what changed was written again.
func TestCheckoutReuse(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, src, "init", "-q", "-b", "main")
	files := map[string]string{
		"README.md": "readme\n", "a/one.txt": "one\n", "a/b/two.txt": "two\n", "a/b/c/three.txt": "three\n",
		"moved/x.txt": "x\n", "keep/k.txt": "k\n", "perm/p.txt": "p\n", ".gitignore": "*.log\n", "hard.txt": "hard\n",
		"tamper.txt": "original\n", "forged.txt": "original\n", "dir/inner.txt": "inner\n",
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("README.md", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	gitIn(t, src, "add", "-A")
	gitIn(t, src, "commit", "-q", "-m", "one")
	oldStart := gitIn(t, src, "rev-parse", "HEAD")
	if err := os.WriteFile(filepath.Join(src, "a/b/two.txt"), []byte("two, new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitIn(t, src, "commit", "-q", "-am", "two")
	newStart := gitIn(t, src, "rev-parse", "HEAD")
	bare := filepath.Join(tmp, "repo")
	gitIn(t, tmp, "clone", "-q", "--bare", src, bare)

	wt := filepath.Join(tmp, "wt")
	st := checkoutAt(t, bare, wt, oldStart)
	ino := func(p string) uint64 {
		fi, err := os.Lstat(filepath.Join(wt, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	keptIno := ino("keep/k.txt")

	// The earlier run: every trick its owner could play. Tampered files
	// get an old mtime, so git does not take them for racily clean and
	// look at their content: only their ctime tells.
	sh := func(script string) {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = wt
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	sh(`set -e
echo tampered >tamper.txt
echo tampered >forged.txt
echo tampered >a/one.txt
touch -d 2000-01-01 tamper.txt forged.txt a/one.txt
git -c core.hooksPath=/dev/null add forged.txt
echo untracked >new.txt
echo ignored >debug.log
mkdir -p a/b/c/nested/.git && echo planted >a/b/c/nested/.git/config
mv moved/x.txt moved/y.txt && mv moved/y.txt moved/x.txt
rm -rf dir && ln -s /etc dir
chmod 000 perm/p.txt
chmod 000 perm
ln hard.txt /tmp/../` + filepath.Base(tmp) + `.hardlink 2>/dev/null || ln hard.txt hard-elsewhere
echo hooked >.git/hooks-planted
git -c core.hooksPath=/dev/null config core.fsmonitor 'echo pwned >&2'
mkdir -p .git/info && echo 'tamper.txt' >.git/info/exclude
`)
	// The forged index: its stat data for forged.txt matches the tampered
	// file, its blob the original (update-index --cacheinfo after add).
	orig := gitIn(t, src, "rev-parse", oldStart+":forged.txt")
	sh(`git -c core.hooksPath=/dev/null update-index --cacheinfo 100644,` + orig + `,forged.txt`)

	newDir := filepath.Join(tmp, "wt2")
	r := runWorker(t, nil, strings.NewReader(string(st)), "checkout", "reuse", "--repo", bare, "--start", oldStart, "--into", newDir, wt)
	if r.code != 0 {
		t.Fatalf("checkout reuse: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Lstat(wt); !os.IsNotExist(err) {
		t.Errorf("the old directory is still there: %v", err)
	}
	wt = newDir
	gitIn(t, wt, "init", "-q", "--template=")
	if err := os.WriteFile(filepath.Join(wt, ".git/objects/info/alternates"), []byte(bare+"/objects\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gitIn(t, wt, "checkout", "-q", "-f", "-B", "next", newStart)

	if got := gitIn(t, wt, "status", "--porcelain", "--ignored", "--untracked-files=all"); got != "" {
		t.Errorf("git status after reuse:\n%s", got)
	}
	if got := gitIn(t, wt, "rev-parse", "HEAD"); got != newStart {
		t.Errorf("HEAD = %s, want %s", got, newStart)
	}
	// git status above trusts stat data: compare the bytes themselves.
	for p, want := range files {
		if p == "a/b/two.txt" {
			want = "two, new\n"
		}
		got, err := os.ReadFile(filepath.Join(wt, p))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"new.txt", "debug.log", "a/b/c/nested", ".git/hooks-planted", "hard-elsewhere"} {
		if _, err := os.Lstat(filepath.Join(wt, p)); !os.IsNotExist(err) {
			t.Errorf("%s survived the reuse (%v)", p, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(wt, "dir")); err != nil || !fi.IsDir() {
		t.Errorf("dir, a link to /etc before, is %v, %v; want a directory again", fi, err)
	}
	if got := gitIn(t, wt, "config", "--local", "--list"); strings.Contains(got, "fsmonitor") {
		t.Errorf("the old .git's config survived: %s", got)
	}
	if ino("keep/k.txt") != keptIno {
		t.Errorf("keep/k.txt, unchanged, was written again")
	}
	if ino("hard.txt") == 0 {
		t.Error("hard.txt is missing")
	}
}
