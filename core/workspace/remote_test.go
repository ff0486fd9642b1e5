package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
)

// newRemote makes a bare repo on the host (the local sandbox sees the
// host's filesystem) with main as its default branch and one other branch;
// file:// makes git treat it as a URL.
func newRemote(t *testing.T) (url, bare string) {
	t.Helper()
	_, dir := newHostRepo(t)
	gitT(t, dir, "branch", "dev")
	bare = filepath.Join(t.TempDir(), "remote.git")
	gitT(t, dir, "clone", "-q", "--bare", dir, bare)
	return "file://" + bare, bare
}

// TestSyncURLAndPush: clone, then fetch, inside the sandbox; push the
// workflow branch back; never forced, never the base branch.
func TestSyncURLAndPush(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, bare := newRemote(t)
	sb, ws := newSandbox(t)
	base, err := ws.SyncURL(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	if base.Branch != "main" || base.Commit != gitT(t, bare, "rev-parse", "main") {
		t.Errorf("base = %+v, want the remote's main", base)
	}
	// A new commit on the remote arrives with the next sync (a fetch).
	work := filepath.Join(t.TempDir(), "work")
	gitT(t, bare, "clone", "-q", bare, work)
	writeFile(t, filepath.Join(work, "upstream.txt"), "upstream\n")
	gitT(t, work, "add", "-A")
	gitT(t, work, "commit", "-qm", "upstream")
	gitT(t, work, "push", "-q", "origin", "main")
	base, err = ws.SyncURL(ctx, url, "main")
	if err != nil || base.Commit != gitT(t, bare, "rev-parse", "main") {
		t.Fatalf("second sync = %+v, %v; want the remote's new main", base, err)
	}
	if dev, err := ws.SyncURL(ctx, url, "dev"); err != nil || dev.Branch != "dev" {
		t.Errorf("sync of dev = %+v, %v", dev, err)
	}
	if _, err := ws.SyncURL(ctx, url, "nope"); err == nil || !strings.Contains(err.Error(), "refs/heads/nope") {
		t.Errorf("sync of a missing branch = %v", err)
	}
	for _, bad := range []string{"--upload-pack=touch /tmp/x", "a\nb"} {
		if _, err := ws.SyncURL(ctx, bad, "main"); err == nil {
			t.Errorf("SyncURL(%q) succeeded", bad)
		}
	}

	wt, err := ws.AddWorktree(ctx, "push-1", base)
	if err != nil {
		t.Fatal(err)
	}
	inSandbox(t, sb, `cd "$1" && cat upstream.txt && echo pushed >pushed.txt`, wt)
	if _, err := ws.CommitAll(ctx, "push-1", "push it"); err != nil {
		t.Fatal(err)
	}
	if err := ws.Push(ctx, "push-1", url, base); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, bare, "show", "amelia/push-1:pushed.txt"); got != "pushed" {
		t.Errorf("remote amelia/push-1:pushed.txt = %q", got)
	}
	mainBefore := gitT(t, bare, "rev-parse", "main")
	// Rewritten history is not force-pushed.
	inSandbox(t, sb, agentGit+`git commit -q --amend -m rewritten`, wt)
	if err := ws.Push(ctx, "push-1", url, base); err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Errorf("non-fast-forward push = %v, want a rejection", err)
	}
	if err := ws.Push(ctx, "push-1", url, Base{Branch: "amelia/push-1"}); !errors.Is(err, ErrRefused) {
		t.Errorf("push to the base branch = %v, want ErrRefused", err)
	}
	if gitT(t, bare, "rev-parse", "main") != mainBefore {
		t.Error("the remote's main moved")
	}
}

// TestCredentialHelper: the -c options make the worker git's only helper,
// quoted so a path with spaces and shell characters survives, and it gets
// the environment given.
func TestCredentialHelper(t *testing.T) {
	t.Parallel()
	sb := sandboxtest.New(t, "ws")
	dir := filepath.Join(t.TempDir(), "bin dir $(touch pwned)")
	worker := filepath.Join(dir, "amelia-worker")
	writeFile(t, worker, "#!/bin/sh\necho \"$@\" >\"$(dirname \"$0\")/args\"\ncat >/dev/null\nprintf 'username=u\\npassword=%s\\n' \"$AMELIA_PROXY_TOKEN\"\n")
	if err := os.Chmod(worker, 0o755); err != nil {
		t.Fatal(err)
	}
	// A helper configured in the sandbox must not be asked.
	inSandbox(t, sb, `git config --global credential.helper '!echo password=from-sandbox-config; :'`)
	ws, err := New(sb, sb.Workdir, Options{Worker: worker, GitEnv: map[string]string{"AMELIA_PROXY_TOKEN": "tok-123"}})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	argv := append(append([]string{"git"}, ws.credentialArgs()...), "credential", "fill")
	in := strings.NewReader("protocol=https\nhost=example.com\n\n")
	if err := ws.exec(t.Context(), "credential fill", argv, ws.gitEnv, in, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "password=tok-123") {
		t.Errorf("git credential fill gave:\n%s", out.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "args")); err != nil || string(b) != "git-credential get\n" {
		t.Errorf("worker called with %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "pwned")); err == nil {
		t.Error("the worker path was interpreted by the shell")
	}
	for _, bad := range []string{"relative/worker", "/a'b", "/a\nb"} {
		if _, err := New(sb, sb.Workdir, Options{Worker: bad}); err == nil {
			t.Errorf("New with worker %q accepted", bad)
		}
	}
}
