package workspace

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestValidateWorkflowID(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"a", "fix-login-3f9a", "A1._-z", strings.Repeat("x", 63), "v1.2"} {
		if err := ValidateWorkflowID(id); err != nil {
			t.Errorf("ValidateWorkflowID(%q) = %v, want nil", id, err)
		}
	}
	for _, tc := range []struct{ id, says string }{
		{"", "empty"},
		{"../x", "bad character"},
		{"a..b", `".."`},
		{"x.lock", ".lock"},
		{"-x", "first character"},
		{".x", "first character"},
		{strings.Repeat("x", 64), "64 characters"},
		{"has space", "bad character"},
		{"amelia/x", "bad character"},
		{"a\nb", "bad character"},
		{"x~1", "bad character"},
		{"x:y", "bad character"},
	} {
		err := ValidateWorkflowID(tc.id)
		if !errors.Is(err, ErrInvalidID) || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("ValidateWorkflowID(%q) = %v, want a one-line error saying %q", tc.id, err, tc.says)
		}
	}
}

func TestNewWorkflowID(t *testing.T) {
	t.Parallel()
	for prompt, prefix := range map[string]string{
		"Fix the login page!": "fix-the-login-",
		"":                    "run-",
		"   ../../etc/passwd": "etc-passwd-",
		"日本語だけ":               "run-",
		strings.Repeat("supercalifragilistic", 3):      "run-",
		"refactor: split core/workspace into packages": "refactor-split-core-",
	} {
		id := NewWorkflowID(prompt)
		if err := ValidateWorkflowID(id); err != nil {
			t.Errorf("NewWorkflowID(%q) = %q: %v", prompt, id, err)
		}
		if !strings.HasPrefix(id, prefix) || len(id) != len(prefix)+4 {
			t.Errorf("NewWorkflowID(%q) = %q, want %s + 4 hex digits", prompt, id, prefix)
		}
	}
	if a, b := NewWorkflowID("same"), NewWorkflowID("same"); a == b {
		t.Errorf("two ids for one prompt are both %q", a)
	}
	if Branch("x") != "amelia/x" {
		t.Errorf("Branch(x) = %q", Branch("x"))
	}
}

func TestOpenHostRepoErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, err := OpenHostRepo(ctx, t.TempDir(), nil)
	if err == nil || !strings.Contains(err.Error(), "not inside a git checkout") {
		t.Errorf("OpenHostRepo(not a repo) = %v", err)
	}
	h, dir := newHostRepo(t)
	sub, err := OpenHostRepo(ctx, filepath.Join(dir, "src"), nil)
	if err != nil || sub.Dir != h.Dir {
		t.Errorf("OpenHostRepo(subdir) = %+v, %v; want top level %s", sub, err, h.Dir)
	}
	if b, err := h.DefaultBranch(ctx); b != "main" || err != nil {
		t.Errorf("DefaultBranch = %q, %v", b, err)
	}
	gitT(t, dir, "checkout", "-q", "--detach")
	if _, err := h.DefaultBranch(ctx); err == nil || !strings.Contains(err.Error(), "--base") {
		t.Errorf("DefaultBranch(detached) = %v, want an error asking for --base", err)
	}
	if _, err := h.ResolveBranch(ctx, "nope"); err == nil {
		t.Error("ResolveBranch(nope) succeeded")
	}
	if _, err := h.ResolveBranch(ctx, "--upload-pack=x"); err == nil {
		t.Error("ResolveBranch(option) succeeded")
	}
}

// Of two runs racing to make one workflow's checkout, one makes it and
// the other is refused, saying so once; the refused one removes nothing.
func TestAddWorktreeRace(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newSynced(t)
	sb, ws := s.sb, s.ws
	for round := range 20 {
		id := fmt.Sprintf("race-%d", round)
		var errs [2]error
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() { _, errs[i] = ws.AddWorktree(ctx, id, s.Base) })
		}
		wg.Wait()
		made := 0
		for _, err := range errs {
			switch {
			case err == nil:
				made++
			case !errors.Is(err, ErrBranchExists):
				t.Errorf("%s: the loser of the race: %v, want ErrBranchExists", id, err)
			case strings.Count(err.Error(), "already exists in the sandbox") != 1:
				t.Errorf("%s: the refusal says it more than once: %v", id, err)
			}
		}
		if made != 1 {
			t.Errorf("%s: %d of 2 racing runs made the checkout, want 1", id, made)
		}
		if got := inSandbox(t, sb, `git -C "$1" symbolic-ref --short HEAD`, ws.WorktreeDir(id)); got != "amelia/"+id {
			t.Errorf("%s: the winner's checkout after the race: %q", id, got)
		}
	}
}

// TestRoundTrip: sync, worktree, the agent edits, commit, bundle back,
// fetch — the host gains exactly amelia/<id> with those changes; its
// checked-out branch, index and worktree are untouched and no hook ran.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, dir := newHostRepo(t)
	sb, ws := newSandbox(t)
	refsBefore := refs(t, dir)
	indexBefore := fileSum(t, filepath.Join(dir, ".git", "index"))
	headBefore := gitT(t, dir, "rev-parse", "HEAD")

	synced, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	if synced.Base.Branch != "main" || synced.Base.Commit != headBefore || synced.Base.Start != headBefore {
		t.Errorf("base = %+v, want main at %s", synced.Base, headBefore)
	}
	if synced.Commits != 2 || synced.Bytes == 0 {
		t.Errorf("first sync sent %d commits in %d bytes, want 2 commits", synced.Commits, synced.Bytes)
	}
	id := "edit-files-1a2b"
	wt, err := ws.AddWorktree(ctx, id, synced.Base)
	if err != nil {
		t.Fatal(err)
	}
	if got := inSandbox(t, sb, `cd "$1" && git symbolic-ref --short HEAD && cat src/app.go`, wt); !strings.HasPrefix(got, "amelia/"+id+"\npackage app") {
		t.Errorf("worktree: %q", got)
	}
	// The agent commits one change itself and leaves others uncommitted.
	inSandbox(t, sb, agentGit+`echo one >first.txt && git add first.txt && git commit -qm "agent commit"
printf 'hello\n' >new.txt && rm README.md && echo 'func B() {}' >>src/app.go`, wt)
	if c, err := ws.CommitAll(ctx, id, "Edit the files\nwith details"); err != nil || !c.Committed {
		t.Fatalf("CommitAll = %+v, %v", c, err)
	}
	if c, err := ws.CommitAll(ctx, id, "again"); err != nil || c.Committed {
		t.Errorf("CommitAll on a clean worktree = %+v, %v; want nothing committed", c, err)
	}
	// The checkout is a repository of its own, 0700, that borrows the bare
	// repo's objects: the agent's commits and branch stay in it, and the
	// repository other workflows read has neither.
	if got := inSandbox(t, sb, `cd "$1" && stat -c %a . && git rev-parse --absolute-git-dir && cat .git/objects/info/alternates && stat -c %a "$2/worktrees" "$2/.amelia/runs"`, wt, ws.root); got != "700\n"+wt+"/.git\n"+ws.RepoDir()+"/objects\n1733\n1733" {
		t.Errorf("checkout mode, git dir, alternates, shared directories' modes:\n%s", got)
	}
	if got := inSandbox(t, sb, `git -C "$1" for-each-ref --format='%(refname)'; git -C "$1" cat-file -e "$(git -C "$2" rev-parse HEAD)" 2>/dev/null || echo "no agent commit"`, ws.RepoDir(), wt); got != "refs/heads/main\nno agent commit" {
		t.Errorf("the bare repo after the agent's commits: %q, want only main and none of the agent's objects", got)
	}
	if _, err := ws.AddWorktree(ctx, id, synced.Base); !errors.Is(err, ErrBranchExists) {
		t.Errorf("AddWorktree twice = %v, want ErrBranchExists", err)
	}

	res, err := ws.FetchResult(ctx, host, id, synced.Base, ResultOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Branch != "amelia/"+id || res.Commits != 2 {
		t.Errorf("result = %+v, want amelia/%s with 2 commits", res, id)
	}
	want := append(slices.Clone(refsBefore), "refs/heads/amelia/"+id+" "+res.Commit)
	slices.Sort(want)
	if got := refs(t, dir); !slices.Equal(got, want) {
		t.Errorf("host refs after fetch:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := gitT(t, dir, "log", "--format=%an <%ae>|%s|%b", "-1", "amelia/"+id); got != "Amelia <amelia@localhost>|amelia: "+id+"|Edit the files" {
		t.Errorf("commit = %q", got)
	}
	if got := gitT(t, dir, "diff", "--name-status", headBefore, "amelia/"+id); got != "D\tREADME.md\nA\tfirst.txt\nA\tnew.txt\nM\tsrc/app.go" {
		t.Errorf("changes on the branch:\n%s", got)
	}
	stat, err := host.DiffStat(ctx, synced.Base.Commit, res.Branch)
	if err != nil || !strings.Contains(stat, "new.txt") || !strings.Contains(stat, "4 files changed") {
		t.Errorf("DiffStat = %q, %v", stat, err)
	}
	if got := gitT(t, dir, "symbolic-ref", "HEAD"); got != "refs/heads/main" {
		t.Errorf("host HEAD = %s", got)
	}
	if got := gitT(t, dir, "status", "--porcelain"); got != "" {
		t.Errorf("host worktree changed:\n%s", got)
	}
	if fileSum(t, filepath.Join(dir, ".git", "index")) != indexBefore {
		t.Error("host index changed")
	}

	if _, err := ws.FetchResult(ctx, host, id, synced.Base, ResultOptions{}); !errors.Is(err, ErrBranchExists) {
		t.Errorf("second FetchResult = %v, want ErrBranchExists", err)
	}
	for range 2 {
		if err := ws.RemoveWorktree(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := inSandbox(t, sb, `[ ! -e "$1" ] && git -C "$2" for-each-ref --format='%(refname)' && git -C "$2" worktree list | wc -l`, wt, ws.RepoDir()); got != "refs/heads/main\n1" {
		t.Errorf("after removal, sandbox refs and worktree count:\n%s", got)
	}
}

func TestNoChanges(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newSynced(t)
	host, ws := s.host, s.ws
	if _, err := ws.AddWorktree(ctx, "idle", s.Base); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.FetchResult(ctx, host, "idle", s.Base, ResultOptions{}); !errors.Is(err, ErrNoChanges) {
		t.Errorf("FetchResult with nothing done = %v, want ErrNoChanges", err)
	}
	if ok, _ := host.BranchExists(ctx, "amelia/idle"); ok {
		t.Error("branch created with no changes")
	}
}

// TestIncrementalSync: after one new commit only that commit travels, and
// with none nothing does.
func TestIncrementalSync(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, dir := newHostRepo(t)
	for i := range 20 {
		// Lines that compress little, so the first sync's pack is large
		// next to the fixed part of an index (1 KB).
		var f strings.Builder
		for j := range 200 {
			fmt.Fprintf(&f, "%x\n", sha256.Sum256(fmt.Appendf(nil, "%d %d", i, j)))
		}
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%d.txt", i)), f.String())
		gitT(t, dir, "add", "-A")
		gitT(t, dir, "commit", "-qm", fmt.Sprintf("c%d", i))
	}
	sb, ws := newSandbox(t)
	first, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "new.txt"), "new\n")
	gitT(t, dir, "add", "new.txt")
	gitT(t, dir, "commit", "-qm", "one more")
	second, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	if first.Commits != 22 || second.Commits != 1 {
		t.Errorf("commits sent: first %d, second %d; want 22 then 1", first.Commits, second.Commits)
	}
	if second.Bytes == 0 || second.Bytes > 2048 || second.Bytes*5 > first.Bytes {
		t.Errorf("incremental pack and index are %d bytes (first %d): not just one small commit", second.Bytes, first.Bytes)
	}
	third, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil || third.Bytes != 0 || third.Commits != 0 {
		t.Errorf("sync with nothing new = %+v, %v; want nothing sent", third, err)
	}
	if got := inSandbox(t, sb, `git -C "$1" rev-parse main`, ws.RepoDir()); got != second.Base.Commit {
		t.Errorf("sandbox main = %s, want %s", got, second.Base.Commit)
	}
	// A rewritten host branch (amend) is still synced: the base ref is a
	// mirror of the host's.
	gitT(t, dir, "commit", "-q", "--amend", "-m", "amended")
	fourth, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil || fourth.Commits != 1 {
		t.Fatalf("sync after amend = %+v, %v", fourth, err)
	}
	if got := inSandbox(t, sb, `git -C "$1" rev-parse main`, ws.RepoDir()); got != fourth.Base.Commit {
		t.Errorf("sandbox main = %s, want %s", got, fourth.Base.Commit)
	}
	// Nothing of the syncs' packs is left in the repository's git directory.
	if left, _ := filepath.Glob(filepath.Join(dir, ".git", "amelia-pack-*")); len(left) != 0 {
		t.Errorf("the syncs left %v in the repository's git directory", left)
	}
}

// TestDirty: uncommitted changes are refused, or carried as one commit
// without touching the user's index, worktree, refs or object store.
func TestDirty(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, dir := newHostRepo(t)
	writeFile(t, filepath.Join(dir, "src", "app.go"), "package app // edited\n")
	writeFile(t, filepath.Join(dir, "staged.txt"), "staged\n")
	gitT(t, dir, "add", "staged.txt")
	writeFile(t, filepath.Join(dir, "untracked dir", "u.txt"), "untracked\n")
	writeFile(t, filepath.Join(dir, ".gitignore"), "*.log\n")
	writeFile(t, filepath.Join(dir, "debug.log"), "ignored\n")
	_, ws := newSandbox(t)

	_, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if !errors.Is(err, ErrDirty) || !strings.Contains(err.Error(), "src/app.go") ||
		!strings.Contains(err.Error(), "untracked dir/u.txt") || !strings.Contains(err.Error(), "--include-dirty") {
		t.Fatalf("SyncLocal(dirty) = %v, want ErrDirty naming the paths and --include-dirty", err)
	}

	statusBefore := gitT(t, dir, "status", "--porcelain")
	indexBefore := fileSum(t, filepath.Join(dir, ".git", "index"))
	refsBefore := refs(t, dir)
	objectsBefore := gitT(t, dir, "count-objects", "-v")
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host, IncludeDirty: true, Workflow: "dirty-1"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Base.Start == s.Base.Commit || s.Commits != 3 {
		t.Errorf("base = %+v with %d commits, want a dirty commit on top of 2", s.Base, s.Commits)
	}
	if gitT(t, dir, "status", "--porcelain") != statusBefore || fileSum(t, filepath.Join(dir, ".git", "index")) != indexBefore ||
		!slices.Equal(refs(t, dir), refsBefore) || gitT(t, dir, "count-objects", "-v") != objectsBefore {
		t.Error("include-dirty touched the user's index, worktree, refs or objects")
	}
	wt, err := ws.AddWorktree(ctx, "dirty-1", s.Base)
	if err != nil {
		t.Fatal(err)
	}
	got := inSandboxWS(t, ws, `cd "$1" && cat src/app.go staged.txt "untracked dir/u.txt" && ls debug.log 2>&1 || true`, wt)
	if !strings.Contains(got, "edited") || !strings.Contains(got, "staged") || !strings.Contains(got, "untracked") || !strings.Contains(got, "No such file") {
		t.Errorf("worktree does not hold the uncommitted changes (without ignored files):\n%s", got)
	}
	if _, err := ws.CommitAll(ctx, "dirty-1", "more"); err != nil {
		t.Fatal(err)
	}
	inSandboxWS(t, ws, `cd "$1" && echo agent >agent.txt`, wt)
	if _, err := ws.CommitAll(ctx, "dirty-1", "more"); err != nil {
		t.Fatal(err)
	}
	res, err := ws.FetchResult(ctx, host, "dirty-1", s.Base, ResultOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Commits != 2 {
		t.Errorf("result has %d commits, want the dirty commit and the agent's", res.Commits)
	}
	if err := ws.RemoveWorktree(ctx, "dirty-1"); err != nil {
		t.Fatal(err)
	}
	if got := inSandboxWS(t, ws, `git -C "$1" for-each-ref --format='%(refname)'`, ws.RepoDir()); got != "refs/heads/main" {
		t.Errorf("sandbox refs after removal: %s", got)
	}
}

func fileSum(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestConcurrentWorkflows: workflows on one sandbox, in parallel, each sync
// (serialised by the lock), get their own worktree and branch, and come back
// with only their own changes. Run with flock(1) and with the worker's lock.
func TestConcurrentWorkflows(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"flock", "worker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			host, dir := newHostRepo(t)
			_, ws := newSandbox(t)
			ws.lockWith = mode
			const n = 4
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					id := fmt.Sprintf("wf-%d", i)
					errs[i] = func() error {
						s, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
						if err != nil {
							return err
						}
						wt, err := ws.AddWorktree(ctx, id, s.Base)
						if err != nil {
							return err
						}
						if err := ws.script(ctx, "edit", nil, nil, nil, `printf '%s\n' "$2" >"$1/$2.txt"`, wt, id); err != nil {
							return err
						}
						if _, err := ws.CommitAll(ctx, id, "workflow "+id); err != nil {
							return err
						}
						if _, err := ws.FetchResult(ctx, host, id, s.Base, ResultOptions{}); err != nil {
							return err
						}
						return ws.RemoveWorktree(ctx, id)
					}()
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("workflow %d: %v", i, err)
				}
			}
			for i := range n {
				got := gitT(t, dir, "diff", "--name-only", "main", fmt.Sprintf("amelia/wf-%d", i))
				if got != fmt.Sprintf("wf-%d.txt", i) {
					t.Errorf("amelia/wf-%d changes %q", i, got)
				}
			}
			if got := inSandboxWS(t, ws, `ls -A "$1"; ls -A "$1/worktrees"`, ws.root); got != ".amelia\n.amelia-repo.lock\nrepo\nworktrees" {
				t.Errorf("sandbox root after all workflows:\n%s", got)
			}
		})
	}
}

// TestLockDiesWithItsHolder: a script killed while it holds the lock (a run
// cancelled mid-sync) leaves nothing that blocks the next one, whichever
// way the lock was taken.
func TestLockDiesWithItsHolder(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"flock", "worker"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			host, _ := newHostRepo(t)
			_, ws := newSandbox(t)
			ws.lockWith = mode
			holding, cancel := context.WithCancel(t.Context())
			locked := make(chan struct{})
			held := make(chan error, 1)
			go func() {
				// Holds the lock until killed: its stdin never ends.
				stdin, _ := io.Pipe()
				held <- ws.script(holding, "hold the lock", nil, stdin, signalWriter(locked), `lock; echo locked; cat >/dev/null`)
			}()
			select {
			case <-locked:
			case err := <-held:
				t.Fatalf("the holder ended before it locked: %v", err)
			}
			cancel()
			if err := <-held; !errors.Is(err, context.Canceled) {
				t.Errorf("the holder ended with %v, want context.Canceled", err)
			}
			if _, err := ws.SyncLocal(t.Context(), LocalSource{Repo: host}); err != nil {
				t.Fatalf("sync after the holder was killed: %v", err)
			}
		})
	}
}

// signalWriter closes c at its first write.
type signalWriter chan struct{}

func (c signalWriter) Write(p []byte) (int, error) {
	select {
	case <-c:
	default:
		close(c)
	}
	return len(p), nil
}

func TestRemoveWorktreeIdempotent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, _ := newHostRepo(t)
	_, ws := newSandbox(t)
	if err := ws.RemoveWorktree(ctx, "never-added"); err != nil {
		t.Errorf("RemoveWorktree before any repo: %v", err)
	}
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := ws.AddWorktree(ctx, "half", s.Base)
	if err != nil {
		t.Fatal(err)
	}
	// A removal that failed half-way: the checkout is gone, the rest
	// remains.
	inSandboxWS(t, ws, `rm -rf "$1"`, wt)
	for range 2 {
		if err := ws.RemoveWorktree(ctx, "half"); err != nil {
			t.Fatal(err)
		}
	}
	if got := inSandboxWS(t, ws, `git -C "$1" worktree list --porcelain | grep -c '^worktree' ; git -C "$1" branch --list 'amelia/*'`, ws.RepoDir()); got != "1" {
		t.Errorf("after removal: %q", got)
	}
	// The id can be used again.
	if _, err := ws.AddWorktree(ctx, "half", s.Base); err != nil {
		t.Errorf("AddWorktree after removal: %v", err)
	}
	inSandboxWS(t, ws, `chmod 0500 "$1/src"`, ws.WorktreeDir("half"))
	if err := ws.RemoveWorktree(ctx, "half"); err != nil {
		t.Errorf("RemoveWorktree with a read-only directory: %v", err)
	}
	if err := ws.RemoveWorktree(ctx, "../x"); !errors.Is(err, ErrInvalidID) {
		t.Errorf("RemoveWorktree(../x) = %v", err)
	}
}

// A result branch that git could not create at the end is known at the
// start: taken, blocked by a branch named like its directory, or by one
// below it. Nothing is written by asking.
func TestCheckNewBranch(t *testing.T) {
	ctx := t.Context()
	host, dir := newHostRepo(t)
	head := gitT(t, dir, "rev-parse", "HEAD")
	before := refs(t, dir)
	for _, c := range []struct {
		name, existing, branch, want string
	}{
		{"free", "", "amelia/free", ""},
		{"taken", "amelia/taken", "amelia/taken", "already exists"},
		{"parent is a branch", "amelia", "amelia/df1", "'refs/heads/amelia' exists"},
		{"child is a branch", "amelia/y/z", "amelia/y", "'refs/heads/amelia/y/z' exists"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.existing != "" {
				gitT(t, dir, "branch", c.existing)
				t.Cleanup(func() { gitT(t, dir, "branch", "-D", c.existing) })
			}
			err := host.CheckNewBranch(ctx, c.branch, head)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("CheckNewBranch(%s) = %v, want nil", c.branch, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("CheckNewBranch(%s) = %v, want an error with %q", c.branch, err, c.want)
			}
			if ok, _ := host.BranchExists(ctx, c.branch); ok && c.existing != c.branch {
				t.Errorf("asking created %s", c.branch)
			}
		})
	}
	if after := refs(t, dir); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Errorf("refs changed: %v, were %v", after, before)
	}
}

// TestDirtyDeletedAndRenamed: the dirty commit carries deletions and
// renames (staged or not) as the working tree has them, though it reads
// only the paths git status names.
func TestDirtyDeletedAndRenamed(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, dir := newHostRepo(t)
	if err := os.Remove(filepath.Join(dir, "README.md")); err != nil {
		t.Fatal(err)
	}
	gitT(t, dir, "mv", "src/app.go", "src/moved.go")
	writeFile(t, filepath.Join(dir, "src", "moved.go"), "package app // moved and edited\n")
	_, ws := newSandbox(t)
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host, IncludeDirty: true, Workflow: "dirty-2"})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := ws.AddWorktree(ctx, "dirty-2", s.Base)
	if err != nil {
		t.Fatal(err)
	}
	if got := inSandboxWS(t, ws, `cd "$1" && git ls-files && cat src/moved.go`, wt); got != "src/moved.go\npackage app // moved and edited" {
		t.Errorf("the checkout of the dirty commit: %q; want src/moved.go alone, edited", got)
	}
}
