package workspace

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
)

// workerBin is a real amelia-worker, the lock of the sandboxes that lack
// flock(1), built once by TestMain into workerDir under the name the
// docker provider puts into its image.
var workerBin, workerDir string

func TestMain(m *testing.M) {
	if sandboxtest.ServePlugin() {
		return
	}
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerDir = dir
		workerBin, err = testbin.BuildSandboxWorker(dir)
		return err
	}))
}

// gitT runs host git in dir for the test's own setup, with hooks off (so a
// hook marker can only come from the code under test) and a fixed identity.
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "core.hooksPath=/dev/null"}, args...)...)
	cmd.Env = append(hostEnv(), identityEnv()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hookNames are the hooks any of our host git commands could trigger.
var hookNames = []string{
	"reference-transaction", "post-checkout", "post-merge", "pre-commit",
	"commit-msg", "post-commit", "pre-auto-gc", "post-rewrite", "pre-push",
	"post-index-change", "fsmonitor-watchman", "push-to-checkout",
}

// newHostRepo makes a checkout on branch main with two commits, then
// installs hooks that record that they ran in <dir>.hooks-ran.
func newHostRepo(t testing.TB) (*HostRepo, string) {
	t.Helper()
	dir := t.TempDir()
	gitT(t, dir, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(dir, "README.md"), "# demo\n")
	writeFile(t, filepath.Join(dir, "src", "app.go"), "package app\n")
	gitT(t, dir, "add", "-A")
	gitT(t, dir, "commit", "-q", "-m", "first")
	writeFile(t, filepath.Join(dir, "src", "app.go"), "package app\n\nfunc A() {}\n")
	gitT(t, dir, "commit", "-q", "-am", "second")
	marker := dir + ".hooks-ran"
	for _, h := range hookNames {
		writeFile(t, filepath.Join(dir, ".git", "hooks", h), "#!/bin/sh\necho \"$0\" >>'"+marker+"'\n")
		if err := os.Chmod(filepath.Join(dir, ".git", "hooks", h), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(marker); err == nil {
			t.Errorf("hooks ran in the host repo:\n%s", b)
		}
	})
	h, err := OpenHostRepo(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return h, dir
}

// refs lists every ref of a host repo with its commit.
func refs(t testing.TB, dir string) []string {
	t.Helper()
	out := gitT(t, dir, "for-each-ref", "--format=%(refname) %(objectname)")
	l := strings.Split(out, "\n")
	sort.Strings(l)
	return l
}

// newSandbox starts a local sandbox behind the plugin with a workspace in
// its workdir.
func newSandbox(t testing.TB) (*sandboxtest.Sandbox, *Workspace) {
	t.Helper()
	sb := sandboxtest.New(t, "ws")
	ws, err := New(sb, sb.Workdir, Options{Worker: workerBin})
	if err != nil {
		t.Fatal(err)
	}
	return sb, ws
}

// synced is a host repository synced into a new local sandbox.
type synced struct {
	host *HostRepo
	dir  string // the host repository's
	sb   *sandboxtest.Sandbox
	ws   *Workspace
	Synced
}

func newSynced(t testing.TB) synced {
	t.Helper()
	host, dir := newHostRepo(t)
	sb, ws := newSandbox(t)
	s, err := ws.SyncLocal(t.Context(), LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	return synced{host, dir, sb, ws, s}
}

// inSandbox runs a shell script in the sandbox with args as $1...; it fails
// the test on a non-zero exit.
func inSandbox(t testing.TB, sb *sandboxtest.Sandbox, script string, args ...string) string {
	t.Helper()
	r := sb.Run(t, nil, nil, append([]string{"sh", "-c", script, "sh"}, args...)...)
	if r.Status.Code != 0 {
		t.Fatalf("in sandbox %q: %s", script, r)
	}
	return strings.TrimSpace(r.Stdout)
}

// inSandboxWS is inSandbox through a Workspace's Execer.
func inSandboxWS(t testing.TB, ws *Workspace, script string, args ...string) string {
	t.Helper()
	var out strings.Builder
	if err := ws.exec(t.Context(), "test script", append([]string{"sh", "-c", script, "sh"}, args...), nil, nil, &out); err != nil {
		t.Fatalf("in sandbox %q: %v", script, err)
	}
	return strings.TrimSpace(out.String())
}

// agentGit is how the tests play the agent: git in the worktree with an
// identity, as the agent could run it.
const agentGit = `export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@x GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@x
cd "$1"; shift
`
