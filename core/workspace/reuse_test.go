package workspace

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
)

// parkingSandbox is dockerSandbox with a workspace that parks up to bound
// checkouts.
func parkingSandbox(t *testing.T, bound int) (sandboxexec.Execer, *Workspace) {
	t.Helper()
	ex, ws0 := dockerSandbox(t)
	ws, err := New(ex, ws0.root, Options{Worker: ws0.worker, RunUsers: true, ParkedCheckouts: bound})
	if err != nil {
		t.Fatal(err)
	}
	return ex, ws
}

// A parked checkout reused by the next workflow of its uid gives that
// workflow exactly its base, however the earlier run left it: the earlier
// run's uid tampers with tracked files behind a forged index, leaves
// untracked and ignored files, a nested .git, a link in place of a
// directory, files and directories without permissions, a hard link,
// another uid's file in a directory it opened to all, a process, a /tmp
// file, and a .git of its own (hooks, config, exclude, attributes, refs,
// reflog, objects). The next workflow, on a base with new commits, gets
// the same uid and the parked checkout (a file no one changed is the same
// inode), and of the earlier run: nothing.
func TestDockerParkedCheckoutReuse(t *testing.T) {
	ctx := t.Context()
	ex, ws := parkingSandbox(t, 2)
	host, hostDir := newHostRepo(t)
	writeFile(t, filepath.Join(hostDir, "keep", "k.txt"), "kept\n")
	writeFile(t, filepath.Join(hostDir, "gone.txt"), "gone\n")
	writeFile(t, filepath.Join(hostDir, "same", "s.txt"), "the same\n")
	gitT(t, hostDir, "add", "-A")
	gitT(t, hostDir, "commit", "-q", "-m", "more files")
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.AddWorktree(ctx, "other", s.Base); err != nil {
		t.Fatal(err)
	}
	other, _ := ws.RunUser(ctx, "other")
	if _, err := ws.AddWorktree(ctx, "one", s.Base); err != nil {
		t.Fatal(err)
	}
	uid, _ := ws.RunUser(ctx, "one")
	as := uid + ":" + uid
	wt := ws.WorktreeDir("one")
	keptIno := mustAs(t, ex, as, `stat -c %i "$1/same/s.txt"`, wt)
	tmpFile := "/tmp/left-" + randomHex(4)
	secret := mustAs(t, ex, as, `set -e
cd "$1"
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@x
g() { git -c core.hooksPath=/dev/null "$@"; }
orig=$(g rev-parse HEAD:README.md)
echo "# tampered" >README.md
touch -d 2000-01-01 README.md
g add README.md
g update-index --cacheinfo "100644,$orig,README.md"
echo untracked >new.txt
mkdir -p .git/info && printf 'ignored.txt\n' >>.git/info/exclude
echo ignored >ignored.txt
mkdir -p keep/nested/.git && echo '[core]' >keep/nested/.git/config
mv src src-old && ln -s /etc src
ln keep/k.txt hard.txt 2>/dev/null || true
chmod 777 . src-old
mkdir -p .git/hooks && printf '#!/bin/sh\necho hooked\n' >.git/hooks/post-checkout && chmod +x .git/hooks/post-checkout
echo '* filter=evil' >.git/info/attributes
g commit -q --no-verify --allow-empty -m secret
g branch secret-branch
g config core.fsmonitor 'echo pwned'
mkdir noperm && echo x >noperm/f && chmod 000 noperm/f noperm
echo secret >"$2"
setsid sleep 100000 </dev/null >/dev/null 2>&1 &
git -c core.hooksPath=/dev/null -c core.fsmonitor=false rev-parse HEAD
`, wt, tmpFile)
	mustAs(t, ex, other+":"+other, `echo foreign >"$1/src-old/foreign.txt"`, wt)
	if err := ws.Retire(ctx, "one", ""); err != nil {
		t.Fatal(err)
	}
	parked := path.Join(ws.root, ".amelia", "parked")
	if ids, err := Workflows(ctx, ex); err != nil || !slices.Equal(ids, []string{"other"}) {
		t.Errorf("Workflows after the park = %q, %v; want other alone (a parked checkout is no workflow)", ids, err)
	}
	if uids, err := RunUsers(ctx, ex); err != nil || uids["one"] != "" {
		t.Errorf("RunUsers after the park = %v, %v; want no uid for one", uids, err)
	}
	if got := mustAs(t, ex, "", `find "$1" -mindepth 1 -maxdepth 1 -name '.park-*' -user "$2" | wc -l; ls -A "$3"`, parked, uid, path.Join(ws.root, "worktrees")); got != "1\nother" {
		t.Errorf("parked checkouts of uid %s, then worktrees/: %q; want 1, and other's checkout alone", uid, got)
	}
	if got := mustAs(t, ex, "", `n=0; for p in /proc/[0-9]*; do [ "$(stat -c %u "$p" 2>/dev/null)" = "$1" ] && n=$((n+1)); done; echo $n; [ ! -e "$2" ] && echo gone`, uid, tmpFile); got != "0\ngone" {
		t.Errorf("the uid's processes and /tmp file after the park: %q; want 0 and gone", got)
	}

	// The host moves on: a file changed, one added, one removed.
	writeFile(t, filepath.Join(hostDir, "src", "app.go"), "package app\n\nfunc B() {}\n")
	writeFile(t, filepath.Join(hostDir, "added.txt"), "added\n")
	if err := os.Remove(filepath.Join(hostDir, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	gitT(t, hostDir, "add", "-A")
	gitT(t, hostDir, "commit", "-q", "-m", "next")
	s2, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.AddWorktree(ctx, "two", s2.Base); err != nil {
		t.Fatal(err)
	}
	if got, _ := ws.RunUser(ctx, "two"); got != uid {
		t.Fatalf("two got uid %s; want %s, whose checkout is parked", got, uid)
	}
	wt2 := ws.WorktreeDir("two")
	got := mustAs(t, ex, as, `cd "$1" || exit 1
git status --porcelain --ignored --untracked-files=all
echo "head $(git rev-parse HEAD) $(git symbolic-ref HEAD)"
git for-each-ref --format='ref %(refname)'
find . -path ./.git -prune -o ! -type d -print | sort | sed 's/^/file /'
git ls-files | while read -r f; do [ "$(git hash-object --no-filters -- "$f")" = "$(git rev-parse "HEAD:$f")" ] || echo "differs $f"; done
git cat-file -e "$2" 2>/dev/null && echo "has the secret commit"
grep -rl secret .git/logs 2>/dev/null | sed 's/^/reflog /'
ls -A .git/hooks .git/info/attributes 2>/dev/null | sed 's/^/meta /'
git config --local --list | grep -iE 'fsmonitor|hookspath' | sed 's/^/config /'
echo "kept $(stat -c %i same/s.txt)"
`, wt2, secret)
	want := "head " + s2.Base.Start + " refs/heads/amelia/two\nref refs/heads/amelia/two\n" +
		"file ./README.md\nfile ./added.txt\nfile ./keep/k.txt\nfile ./same/s.txt\nfile ./src/app.go\nkept " + keptIno
	if got != want {
		t.Errorf("the reused checkout of two:\n%s\nwant:\n%s", got, want)
	}
	if got := mustAs(t, ex, "", `n=0; for p in /proc/[0-9]*; do [ "$(stat -c %u "$p" 2>/dev/null)" = "$1" ] && n=$((n+1)); done; echo $n`, uid); got != "0" {
		t.Errorf("uid %s runs %s processes once two has its checkout; want none of the earlier run's", uid, got)
	}

	// A repository of another history does not get the parked checkout.
	if err := ws.Retire(ctx, "two", ""); err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	gitT(t, otherDir, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(otherDir, "unrelated.txt"), randomHex(8)+"\n")
	gitT(t, otherDir, "add", "-A")
	gitT(t, otherDir, "commit", "-q", "-m", "another root")
	otherRepo, err := OpenHostRepo(ctx, otherDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	s3, err := ws.SyncLocal(ctx, LocalSource{Repo: otherRepo})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.AddWorktree(ctx, "three", s3.Base); err != nil {
		t.Fatal(err)
	}
	if got, _ := ws.RunUser(ctx, "three"); got == uid {
		t.Errorf("three, of another repository, got uid %s with its parked checkout", got)
	}
}

// The bound holds: with one parked checkout allowed, of two workflows
// that end one after the other only the later's stays parked, and the
// earlier's goes into its uid's trash, which is removed in the
// background; a checkout made where parking was off is not parked
// either. Nothing of them is in worktrees/, and the next workflow gets
// the parked one's uid.
func TestDockerParkedCheckoutsBound(t *testing.T) {
	ctx := t.Context()
	ex, ws := parkingSandbox(t, 1)
	host, _ := newHostRepo(t)
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	unparked, err := New(ex, ws.root, Options{Worker: ws.worker, RunUsers: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unparked.AddWorktree(ctx, "plain", s.Base); err != nil {
		t.Fatal(err)
	}
	uids := map[string]string{}
	for _, id := range []string{"a", "b"} {
		if _, err := ws.AddWorktree(ctx, id, s.Base); err != nil {
			t.Fatal(err)
		}
		uids[id], _ = ws.RunUser(ctx, id)
	}
	for _, id := range []string{"plain", "a", "b"} {
		if err := ws.Retire(ctx, id, ""); err != nil {
			t.Fatalf("Retire(%s): %v", id, err)
		}
	}
	parked := path.Join(ws.root, ".amelia", "parked")
	got := mustAs(t, ex, "", `i=0
while ls -d "$1"/.trash-* >/dev/null 2>&1; do i=$((i + 1)); [ "$i" -lt 3000 ] || { echo "trash left: $(ls -A "$1")"; exit 0; }; sleep 0.1; done
find "$1" -mindepth 1 -maxdepth 1 -printf '%u %f\n' | sed 's/-[0-9a-f]*$//'
ls -A "$2"`, parked, path.Join(ws.root, "worktrees"))
	if got != uids["b"]+" .park" {
		t.Errorf("parked/ and worktrees/ once the trash is gone: %q; want b's checkout parked alone (uid %s)", got, uids["b"])
	}
	if _, err := ws.AddWorktree(ctx, "c", s.Base); err != nil {
		t.Fatal(err)
	}
	if got, _ := ws.RunUser(ctx, "c"); got != uids["b"] {
		t.Errorf("c got uid %s; want %s, whose checkout is parked", got, uids["b"])
	}
}
