package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Workspace is the workspace of one sandbox: the bare repository and the
// worktrees under Root. It holds no state of its own beyond its settings,
// so several Workspaces (several amelia processes) may share one sandbox:
// what must be serialised is serialised by the lock inside the sandbox.
type Workspace struct {
	ex     sdk.Execer
	root   string
	worker string
	gitEnv map[string]string
	log    *slog.Logger
	// lockWith is "flock" (flock(1) when the sandbox has it, else the
	// worker) or "worker"; tests force the fallback with it.
	lockWith string
}

// Options are a Workspace's settings beyond its sandbox and root.
type Options struct {
	// Worker is the absolute path of amelia-worker inside the sandbox. It
	// is git's credential helper for SyncURL and Push, and it takes the
	// workspace lock where the sandbox has no flock(1). Empty: git gets no
	// credential helper, and the sandbox must have flock(1).
	Worker string
	// GitEnv is what the credential helper needs (AMELIA_PROXY_URL,
	// AMELIA_PROXY_TOKEN); it is given to git only where it talks to a
	// remote.
	GitEnv map[string]string
	Logger *slog.Logger
}

// New returns the workspace under root, an absolute path inside the
// sandbox (its workdir).
func New(ex sdk.Execer, root string, opts Options) (*Workspace, error) {
	if !path.IsAbs(root) || strings.ContainsAny(root, "\n\x00") {
		return nil, fmt.Errorf("workspace root %q: must be an absolute path inside the sandbox", root)
	}
	// git runs a credential helper through the shell (see credentialArgs),
	// so the path must not break out of its quotes.
	if opts.Worker != "" && (!path.IsAbs(opts.Worker) || strings.ContainsAny(opts.Worker, "'\n\r\x00")) {
		return nil, fmt.Errorf("worker path %q: must be absolute, with no quote, newline or NUL", opts.Worker)
	}
	return &Workspace{ex: ex, root: path.Clean(root), worker: opts.Worker, gitEnv: opts.GitEnv, log: orDiscard(opts.Logger), lockWith: "flock"}, nil
}

// RepoDir is the bare repository inside the sandbox.
func (w *Workspace) RepoDir() string { return path.Join(w.root, "repo") }

// WorktreeDir is the worktree of workflow id inside the sandbox.
func (w *Workspace) WorktreeDir(id string) string { return path.Join(w.root, "worktrees", id) }

// RunDir is the directory of run runID's detached agent: its prompt,
// message log and exit (see driver.StartAgentic).
func (w *Workspace) RunDir(runID string) string { return path.Join(w.root, ".amelia", "runs", runID) }

// LockFile is the file whose flock makes a run the only one in the
// workspace (see Hold).
func (w *Workspace) LockFile() string { return path.Join(w.root, ".amelia-run.lock") }

// RemoveRunDir removes a run directory RunDir made.
func (w *Workspace) RemoveRunDir(ctx context.Context, dir string) error {
	if path.Dir(dir) != path.Join(w.root, ".amelia", "runs") {
		return fmt.Errorf("remove run directory %q: not one of this workspace's", dir)
	}
	return w.script(ctx, "remove the run directory", nil, nil, nil, `rm -rf -- "$1"`, dir)
}

// dirtyRef holds the commit that carries a workflow's uncommitted host
// changes in the sandbox's bare repo; RemoveWorktree deletes it.
func dirtyRef(id string) string { return "refs/amelia/dirty/" + id }

// prelude starts every sandbox script. Positional parameters: the root,
// the worker and the lock mode, then the script's own (shifted into $1...).
// It gives the script `g` (git with hooks off and no automatic gc: a gc
// started by an unlocked step such as CommitAll could race a locked one on
// packed-refs, and a detached one would outlive the script holding the lock;
// so the sandbox repo is never gc'd by us, which suits a sandbox's
// lifetime), $tmpd (a private temp directory, removed on exit) and `lock`.
//
// lock serialises writers of ROOT/repo across concurrent runs: an exclusive
// flock(2) on ROOT/.amelia-repo.lock held through fd 9, taken by flock(1)
// (util-linux or busybox) or, where the sandbox has none, by
// `amelia-worker flock 9`. The lock belongs to the script's open fd 9, so it
// is released when the script ends, however it ends — a run killed while
// holding it leaves nothing stale behind.
const prelude = `set -eu
root=$1 worker=$2 lockwith=$3
shift 3
g() { git -c core.hooksPath=/dev/null -c gc.auto=0 -c protocol.ext.allow=never "$@"; }
mkdir -p "$root"
tmpd=$(mktemp -d "$root/.amelia-tmp.XXXXXX")
trap 'rm -rf "$tmpd"' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
lock() {
	exec 9>>"$root/.amelia-repo.lock"
	if [ "$lockwith" = flock ] && command -v flock >/dev/null 2>&1; then
		flock -x 9
	elif [ -n "$worker" ]; then
		"$worker" flock 9
	else
		echo "cannot lock $root/repo: the sandbox has no flock(1) (install util-linux) and amelia did not give the worker's path" >&2
		exit 1
	fi
}
`

// exitRefused is the exit code a script uses for a refusal whose reason it
// wrote to stderr (branch exists, nothing to bundle...).
const exitRefused = 3

// script runs prelude+body in the sandbox with args as $1...; stdin and
// stdout may be nil. A non-zero exit is an *exitError carrying stderr.
func (w *Workspace) script(ctx context.Context, what string, env map[string]string, stdin io.Reader, stdout io.Writer, body string, args ...string) error {
	argv := append([]string{"sh", "-c", prelude + body, "sh", w.root, w.worker, w.lockWith}, args...)
	return w.exec(ctx, what, argv, env, stdin, stdout)
}

// exec runs argv in the sandbox with the git environment plus env.
func (w *Workspace) exec(ctx context.Context, what string, argv []string, env map[string]string, stdin io.Reader, stdout io.Writer) error {
	full := map[string]string{"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
	for k, v := range env {
		full[k] = v
	}
	var stderr execreport.Stderr
	w.log.Debug("sandbox exec", "what", what)
	st, err := w.ex.Exec(ctx, sdk.ExecRequest{Argv: argv, Env: full}, sdk.ExecIO{Stdin: stdin, Stdout: stdout, Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if ctx.Err() != nil && (st.Canceled || st.Code != 0) {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	if st.Code != 0 {
		return &exitError{what: what, code: st.Code, stderr: stderr.Tail()}
	}
	return nil
}

// refused reports whether err is a script's deliberate refusal.
func refused(err error) (string, bool) {
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitRefused {
		return strings.TrimSpace(ee.stderr), true
	}
	return "", false
}

// AddWorktree creates ROOT/worktrees/<id> on a new branch amelia/<id> at
// base.Start and returns its path. It refuses (ErrBranchExists) when the
// branch or the directory already exists in the sandbox.
func (w *Workspace) AddWorktree(ctx context.Context, id string, base Base) (string, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return "", err
	}
	dir := w.WorktreeDir(id)
	const body = `repo=$1 wt=$2 br=$3 start=$4
lock
if g -C "$repo" show-ref --verify --quiet "refs/heads/$br"; then
	echo "branch $br already exists in the sandbox" >&2; exit 3
fi
if [ -e "$wt" ]; then echo "$wt already exists in the sandbox" >&2; exit 3; fi
mkdir -p "${wt%/*}"
g -C "$repo" worktree add --quiet -b "$br" "$wt" "$start"
`
	err := w.script(ctx, "git worktree add", nil, nil, nil, body, w.RepoDir(), dir, Branch(id), base.Start)
	if msg, ok := refused(err); ok {
		return "", fmt.Errorf("add worktree for %s: %w: %s", id, ErrBranchExists, msg)
	}
	if err != nil {
		return "", fmt.Errorf("add worktree for %s at %.12s: %w", id, base.Start, err)
	}
	w.log.Info("worktree added", "workflow", id, "dir", dir, "start", base.Start)
	return dir, nil
}

// RemoveWorktree removes the worktree of id, its branch and its dirty ref
// from the sandbox. It is idempotent and finishes what a removal that
// failed half-way left behind: each step tolerates its target being gone.
func (w *Workspace) RemoveWorktree(ctx context.Context, id string) error {
	if err := ValidateWorkflowID(id); err != nil {
		return err
	}
	const body = `repo=$1 wt=$2 br=$3 dref=$4
lock
if [ -d "$repo" ]; then g -C "$repo" worktree remove --force --force "$wt" >/dev/null 2>&1 || true; fi
if [ -e "$wt" ]; then chmod -R u+rwx "$wt" 2>/dev/null || true; rm -rf "$wt"; fi
[ -d "$repo" ] || exit 0
g -C "$repo" worktree prune
for r in "refs/heads/$br" "$dref"; do
	if g -C "$repo" show-ref --verify --quiet "$r"; then g -C "$repo" update-ref -d "$r"; fi
done
`
	if err := w.script(ctx, "git worktree remove", nil, nil, nil, body, w.RepoDir(), w.WorktreeDir(id), Branch(id), dirtyRef(id)); err != nil {
		return fmt.Errorf("remove worktree of %s: %w", id, err)
	}
	w.log.Info("worktree removed", "workflow", id)
	return nil
}

// CommitAll commits whatever the agent left uncommitted in the worktree of
// id, as "amelia: <id>" with the prompt's first line as the body, authored
// by Amelia <amelia@localhost> (the sandbox need not have a git identity).
// It reports whether there was anything to commit. Commits the agent made
// itself stay as they are.
func (w *Workspace) CommitAll(ctx context.Context, id, prompt string) (bool, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return false, err
	}
	msg := "amelia: " + id
	if first, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n"); first != "" {
		if len(first) > 200 {
			first = first[:200]
		}
		msg += "\n\n" + strings.TrimSpace(first)
	}
	const body = `wt=$1 msg=$2
g -C "$wt" add -A
if g -C "$wt" diff --cached --quiet; then echo clean; exit 0; fi
g -C "$wt" -c commit.gpgsign=false commit --quiet --no-verify -m "$msg"
echo committed
`
	env := map[string]string{}
	for _, kv := range identityEnv() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	var out strings.Builder
	if err := w.script(ctx, "git commit", env, nil, &out, body, w.WorktreeDir(id), msg); err != nil {
		return false, fmt.Errorf("commit the changes of %s: %w", id, err)
	}
	return strings.TrimSpace(out.String()) == "committed", nil
}

// Workflows lists, in name order, the workflows that have a worktree in the
// workspace at the sandbox's workdir (where amelia run keeps it): the runs
// in progress, and worktrees kept with --keep-worktree. It runs one `ls`.
func Workflows(ctx context.Context, ex sdk.Execer) ([]string, error) {
	var out, stderr strings.Builder
	st, err := ex.Exec(ctx, sdk.ExecRequest{
		Argv:    []string{"sh", "-c", `[ ! -d worktrees ] || ls -1A worktrees`},
		Timeout: workflowsTimeout,
	}, sdk.ExecIO{Stdout: &out, Stderr: &stderr})
	if err != nil {
		return nil, fmt.Errorf("list the workflows: %w", err)
	}
	if st.Code != 0 {
		return nil, fmt.Errorf("list the workflows: ls ended with %s: %s", execreport.Status(st), strings.TrimSpace(stderr.String()))
	}
	var ids []string
	for _, id := range strings.Fields(out.String()) {
		if ValidateWorkflowID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// workflowsTimeout bounds Workflows' exec.
const workflowsTimeout = 10 * time.Second

// HasWork reports whether the workflow branch of id has moved from start
// (the commit its worktree was added at, Base.Start): work that removing
// the worktree would lose once CommitAll has run. A branch that is not
// there holds none.
func (w *Workspace) HasWork(ctx context.Context, id, start string) (bool, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return false, err
	}
	const body = `repo=$1 br=$2 base=$3
tip=$(g -C "$repo" rev-parse --verify --quiet "refs/heads/$br^{commit}") || { echo none; exit 0; }
if [ "$tip" = "$base" ]; then echo none; else echo work; fi
`
	var out strings.Builder
	if err := w.script(ctx, "git rev-parse", nil, nil, &out, body, w.RepoDir(), Branch(id), start); err != nil {
		return false, fmt.Errorf("look for the work of %s: %w", id, err)
	}
	return strings.TrimSpace(out.String()) == "work", nil
}
