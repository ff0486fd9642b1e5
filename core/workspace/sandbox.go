package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/execsession"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Workspace is the workspace of one sandbox: the bare repository and the
// workflows' checkouts under Root. It holds no state of its own beyond its
// settings and what it read of the sandbox's (the workflows' uids), so
// several Workspaces (several amelia processes) may share one sandbox:
// what must be serialised is serialised by the lock inside the sandbox.
type Workspace struct {
	ex       sandboxexec.Execer
	root     string
	worker   string
	gitEnv   map[string]string
	gitURL   func(string) string
	runUsers bool
	exclude  string // the checkouts' .git/info/exclude (Options.Ignore)
	log      *slog.Logger
	// lockWith is "flock" (flock(1) when the sandbox has it, else the
	// worker) or "worker"; tests force the fallback with it.
	lockWith string
	// idFiles lists the files of ids no run may get (idFiles), and uids
	// the range runs get theirs from; tests give their own.
	idFiles string
	uids    [2]int

	mu    sync.Mutex
	users map[string]string // workflow id → its uid, as allocated or read

	// parked bounds the checkouts parked for reuse (Options.ParkedCheckouts).
	parked int
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
	// GitURL is the URL git in the sandbox uses for a repository's URL
	// (SyncURL, Push): the proxy's git route, which adds the credential
	// outside the sandbox. Nil: the URL itself.
	GitURL func(url string) string
	// RunUsers gives every workflow a uid of its own, which owns its
	// checkout and runs every step in it (the provider declares
	// sdk.Capabilities.RunUsers); see users.go.
	RunUsers bool
	// Ignore are git ignore patterns for every checkout the workspace
	// makes (its .git/info/exclude): untracked files they match stay out
	// of the agent's commits and CommitAll's; tracked ones are not
	// affected. BuildOutputs is the usual list; nil ignores nothing.
	Ignore []string
	// ParkedCheckouts bounds how many checkouts the sandbox keeps parked
	// for later workflows to reuse (see Retire), with run users; 0 parks
	// none (a profile's sandbox.parked_checkouts, by default 4).
	ParkedCheckouts int
	Logger          *slog.Logger
}

// New returns the workspace under root, an absolute path inside the
// sandbox (its workdir).
func New(ex sandboxexec.Execer, root string, opts Options) (*Workspace, error) {
	if !path.IsAbs(root) || strings.ContainsAny(root, "\n\x00") {
		return nil, fmt.Errorf("workspace root %q: must be an absolute path inside the sandbox", root)
	}
	// git runs a credential helper through the shell (see credentialArgs),
	// so the path must not break out of its quotes.
	if opts.Worker != "" && (!path.IsAbs(opts.Worker) || strings.ContainsAny(opts.Worker, "'\n\r\x00")) {
		return nil, fmt.Errorf("worker path %q: must be absolute, with no quote, newline or NUL", opts.Worker)
	}
	if opts.ParkedCheckouts < 0 {
		return nil, fmt.Errorf("parked checkouts %d: must be 0 or more", opts.ParkedCheckouts)
	}
	for _, p := range opts.Ignore {
		if strings.TrimSpace(p) == "" || strings.ContainsAny(p, "\n\r\x00") {
			return nil, fmt.Errorf("ignore pattern %q: must be one line, not blank", p)
		}
	}
	return &Workspace{
		ex: ex, root: path.Clean(root), worker: opts.Worker, gitEnv: opts.GitEnv, gitURL: opts.GitURL, runUsers: opts.RunUsers, exclude: excludeFile(opts.Ignore),
		log: orDiscard(opts.Logger), lockWith: "flock", idFiles: idFiles, uids: [2]int{FirstRunUID, LastRunUID}, users: map[string]string{},
		parked: opts.ParkedCheckouts,
	}, nil
}

// RepoDir is the bare repository inside the sandbox.
func (w *Workspace) RepoDir() string { return path.Join(w.root, "repo") }

// WorktreeDir is the checkout of workflow id inside the sandbox.
func (w *Workspace) WorktreeDir(id string) string { return path.Join(w.root, "worktrees", id) }

// RunDir is the directory of run runID's detached agent: its prompt,
// message log and exit (see driver.StartAgentic).
func (w *Workspace) RunDir(runID string) string { return path.Join(w.root, ".amelia", "runs", runID) }

// LockFile is the file whose flock makes a run the only one in the
// workspace (see Hold).
func (w *Workspace) LockFile() string { return path.Join(w.root, ".amelia-run.lock") }

// RemoveRunDir removes a run directory RunDir made for a run of workflow
// id, as the workflow's uid: call it before RemoveWorktree, which releases
// that uid.
func (w *Workspace) RemoveRunDir(ctx context.Context, id, dir string) error {
	if err := ValidateWorkflowID(id); err != nil {
		return err
	}
	if path.Dir(dir) != path.Join(w.root, ".amelia", "runs") {
		return fmt.Errorf("remove run directory %q: not one of this workspace's", dir)
	}
	return w.scriptFor(ctx, id, "remove the run directory", nil, nil, nil, `rm -rf -- "$1"`, dir)
}

// dirtyRef holds the commit that carries a workflow's uncommitted host
// changes in the sandbox's bare repo; RemoveWorktree deletes it.
func dirtyRef(id string) string { return "refs/amelia/dirty/" + id }

// prelude starts every sandbox script. Positional parameters: the root,
// the worker and the lock mode, then the script's own (shifted into $1...).
// It gives the script `g` (git with hooks off and no automatic gc: the
// checkouts borrow the bare repo's objects, so it must never be pruned,
// and a detached gc would outlive the script holding the lock; so no
// sandbox repo is gc'd by us, which suits a sandbox's lifetime), `mktmp`
// (sets $tmpd to a private temp directory under the root, removed on
// exit; for the sandbox's user, who owns the root), `mine` (is $1 a
// directory of whoever runs the script, not a link: the checkout of the
// uid that runs it, which no other uid can put there or replace) and
// `lock`.
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
g() { git -c core.hooksPath=/dev/null -c gc.auto=0 -c maintenance.auto=false -c protocol.ext.allow=never "$@"; }
mkdir -p "$root"
tmpd=
mktmp() { tmpd=$(mktemp -d "$root/.amelia-tmp.XXXXXX"); }
trap 'if [ -n "$tmpd" ]; then rm -rf "$tmpd"; fi' EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
mine() { [ ! -L "$1" ] && [ -d "$1" ] && [ -O "$1" ]; }
lock() {
	exec 9>>"$root/.amelia-repo.lock"
	# The sandbox's user's alone: a uid that could open it could flock it
	# and stall every run's workspace.
	chmod 600 "$root/.amelia-repo.lock"
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

// exitRefused is the exit code a script or a step uses for a refusal
// whose reason it wrote to stderr (branch exists, nothing to bundle...).
const exitRefused = workstep.ExitRefused

// exitUnmade is the exit code of a script or a step that failed before it
// made anything, so there is nothing of its own to clean up.
const exitUnmade = workstep.ExitUnmade

// cleanupTimeout bounds a cleanup that runs after its caller's context
// ended (a failure half-way, an interrupt).
const cleanupTimeout = time.Minute

// script runs prelude+body in the sandbox with args as $1...; stdin and
// stdout may be nil. A non-zero exit is an *exitError carrying stderr.
func (w *Workspace) script(ctx context.Context, what string, env map[string]string, stdin io.Reader, stdout io.Writer, body string, args ...string) error {
	return w.scriptAs(ctx, "", what, env, stdin, stdout, body, args...)
}

// scriptAs is script as uid ("": the sandbox's user).
func (w *Workspace) scriptAs(ctx context.Context, uid, what string, env map[string]string, stdin io.Reader, stdout io.Writer, body string, args ...string) error {
	argv := append([]string{"sh", "-c", prelude + body, "sh", w.root, w.worker, w.lockWith}, args...)
	return w.execAs(ctx, uid, what, argv, env, stdin, stdout)
}

// scriptFor is script as the uid of workflow id (RunUser): for the steps
// inside its checkout, which that uid owns.
func (w *Workspace) scriptFor(ctx context.Context, id, what string, env map[string]string, stdin io.Reader, stdout io.Writer, body string, args ...string) error {
	uid, err := w.RunUser(ctx, id)
	if err != nil {
		return err
	}
	return w.scriptAs(ctx, uid, what, env, stdin, stdout, body, args...)
}

// stepFor is step as the uid of workflow id (RunUser).
func (w *Workspace) stepFor(ctx context.Context, id, what string, r workstep.Request, stdin io.Reader, stdout io.Writer) error {
	uid, err := w.RunUser(ctx, id)
	if err != nil {
		return err
	}
	return w.step(ctx, uid, what, r, stdin, stdout)
}

// exec runs argv in the sandbox with the git environment plus env.
func (w *Workspace) exec(ctx context.Context, what string, argv []string, env map[string]string, stdin io.Reader, stdout io.Writer) error {
	return w.execAs(ctx, "", what, argv, env, stdin, stdout)
}

// execAs is exec as uid ("": the sandbox's user).
func (w *Workspace) execAs(ctx context.Context, uid, what string, argv []string, env map[string]string, stdin io.Reader, stdout io.Writer) error {
	full := map[string]string{"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
	for k, v := range env {
		full[k] = v
	}
	return w.ran(ctx, uid, what, stdout, func(eio sdk.ExecIO) (sdk.ExitStatus, error) {
		return w.ex.Exec(ctx, sdk.ExecRequest{Argv: argv, Env: full, User: execUser(uid)}, sdk.ExecIO{Stdin: stdin, Stdout: eio.Stdout, Stderr: eio.Stderr})
	})
}

// stepper runs the worker's typed requests (workstep) on the sessions it
// keeps: execsession.Sessions.
type stepper interface {
	Step(ctx context.Context, user string, r workstep.Request, eio sdk.ExecIO) (sdk.ExitStatus, error)
}

// step has amelia-worker serve r as uid ("": the sandbox's user), on a
// session where the Execer keeps them (stepper), else in an exec of its
// own. A non-zero exit is an *exitError carrying stderr, as for a script.
func (w *Workspace) step(ctx context.Context, uid, what string, r workstep.Request, stdin io.Reader, stdout io.Writer) error {
	if w.worker == "" {
		return fmt.Errorf("%s: the workspace was not given amelia-worker's path in the sandbox (Options.Worker)", what)
	}
	return w.ran(ctx, uid, what, stdout, func(eio sdk.ExecIO) (sdk.ExitStatus, error) {
		eio.Stdin = stdin
		if s, ok := w.ex.(stepper); ok {
			return s.Step(ctx, execUser(uid), r, eio)
		}
		return execsession.StepExec(ctx, w.ex, w.worker, execUser(uid), r, eio)
	})
}

// ran runs one sandbox command of the workspace's through run, logging
// it, and makes what it gave an error: what it is, and, for a non-zero
// exit, an *exitError carrying stderr.
func (w *Workspace) ran(ctx context.Context, uid, what string, stdout io.Writer, run func(sdk.ExecIO) (sdk.ExitStatus, error)) error {
	var stderr execreport.Stderr
	w.log.Debug("sandbox exec", "what", what, "uid", uid)
	start := time.Now()
	st, err := run(sdk.ExecIO{Stdout: stdout, Stderr: &stderr})
	w.log.Debug("sandbox exec ended", "what", what, "uid", uid, "duration", time.Since(start), "stderr", stderr.Tail())
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

// AddWorktree makes ROOT/worktrees/<id>, the workflow's checkout: a
// repository of its own, 0700, whose objects are the bare repo's (through
// objects/info/alternates), on a new branch amelia/<id> at base.Start. So
// what the agent commits stays in its checkout, out of the repository
// other workflows read. With run users, the workflow first gets its uid
// (see allocateUser), which makes the checkout under a name of the host's
// choosing that no other uid can guess, and the sandbox's user moves it to
// ROOT/worktrees/<id> (see placeCheckout), moving aside whatever another
// uid put there. It refuses (ErrBranchExists) when the workflow has a uid
// already (a kept checkout of its own), or a checkout of the sandbox's
// user is at that path (one amelia made before workflows had uids, or
// where runs have none).
func (w *Workspace) AddWorktree(ctx context.Context, id string, base Base) (string, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return "", err
	}
	if w.runUsers && w.worker == "" {
		return "", fmt.Errorf("add the checkout of %s: a run's checkout is moved into place by amelia-worker, and the workspace was not given its path (Options.Worker)", id)
	}
	dir := w.WorktreeDir(id)
	uid := ""
	var reuse *parkedCheckout
	if w.runUsers {
		var err error
		if uid, reuse, err = w.allocateUser(ctx, id, base.Start); err != nil {
			return "", err
		}
	}
	err := w.makeCheckout(ctx, id, uid, base, reuse)
	if err == nil {
		w.log.Info("checkout added", "workflow", id, "dir", dir, "start", base.Start, "uid", uid)
		return dir, nil
	}
	// What this call made goes, and the uid with it, which takes whatever
	// the uid made anywhere; a checkout that was there before (a kept one,
	// another run's) stays.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var ee *exitError
	made := !errors.As(err, &ee) || (ee.code != exitRefused && ee.code != exitUnmade)
	var cleanErr error
	if made || uid != "" {
		cleanErr = w.RemoveWorktree(cctx, id)
	}
	if msg, ok := refused(err); ok {
		return "", errors.Join(fmt.Errorf("add the checkout of %s: %w: %s", id, ErrBranchExists, msg), cleanErr)
	}
	return "", errors.Join(fmt.Errorf("add the checkout of %s at %.12s: %w", id, base.Start, err), cleanErr)
}

// makeCheckout makes the checkout of id as uid ("": the sandbox's user,
// at its path at once; else see AddWorktree), or, given a parked
// checkout of the uid's, resets that one to base (see reuseCheckout).
// Where the workspace parks checkouts, the checkout is made with umask
// 077 and stamped, and the stamp kept by the sandbox's user (see
// pool.go).
func (w *Workspace) makeCheckout(ctx context.Context, id, uid string, base Base, reuse *parkedCheckout) error {
	if reuse != nil {
		err := w.reuseCheckout(ctx, id, uid, base, reuse)
		if err == nil {
			return nil
		}
		w.log.Warn("could not reuse a parked checkout; making a new one", "workflow", id, "err", err)
	}
	// Run as the checkout's owner, who may write nothing else under the
	// root; without run users it also makes the shared directories. Its
	// first line is the uid it ran as, then the stamp, if asked for.
	r := workstep.Checkout{Dir: w.WorktreeDir(id), Branch: Branch(id), Start: base.Start, Objects: path.Join(w.RepoDir(), "objects"), Exclude: w.exclude, Shared: w.root}
	if uid != "" {
		r.Dir, r.Shared = path.Join(w.root, "worktrees", newCheckoutPrefix+randomHex(16)), ""
		r.Stamp = w.parking()
	}
	var out bytes.Buffer
	if err := w.step(ctx, uid, "make the checkout", r, nil, &out); err != nil {
		return err
	}
	if uid == "" {
		return nil
	}
	owner, st, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	if !r.Stamp {
		st = nil
	}
	return w.placeCheckout(ctx, id, path.Base(r.Dir), strings.TrimSpace(string(owner)), base.Start, st)
}

// reuseCheckout resets the parked checkout p, which allocateUser gave
// workflow id with its uid, to base, as that uid: it ends whatever of the
// uid still runs, keeps of the checkout only what is provably unchanged
// since its stamp (amelia-worker checkout reuse) in a new directory under
// a name of the host's, makes its .git anew, and has git write what base
// changes; then it stamps it as makeCheckout does and moves it into
// place. What fails leaves nothing of the parked checkout behind.
func (w *Workspace) reuseCheckout(ctx context.Context, id, uid string, base Base, p *parkedCheckout) error {
	wt := path.Join(w.root, "worktrees", newCheckoutPrefix+randomHex(16))
	r := workstep.Checkout{Dir: wt, Branch: Branch(id), Start: base.Start, Objects: path.Join(w.RepoDir(), "objects"), Exclude: w.exclude, Stamp: true,
		Reuse: &workstep.Reuse{From: p.dir, Repo: w.RepoDir(), Start: p.start}}
	var out bytes.Buffer
	if err := w.step(ctx, uid, "reset the parked checkout", r, bytes.NewReader(p.stamp), &out); err != nil {
		return err
	}
	owner, st, _ := bytes.Cut(out.Bytes(), []byte("\n"))
	if err := w.placeCheckout(ctx, id, path.Base(wt), strings.TrimSpace(string(owner)), base.Start, st); err != nil {
		return err
	}
	w.log.Info("parked checkout reused", "workflow", id, "uid", uid, "from", p.start, "to", base.Start)
	return nil
}

// RemoveWorktree removes the checkout of id and its dirty ref from the
// sandbox, and releases its uid. With a uid, the uid first ends every
// process it still has, then removes its checkout, its files in the
// sandbox's shared temp directories and every entry it has in
// ROOT/worktrees and ROOT/.amelia/runs, whatever its name (the sandbox's
// user lists them for it: see removeLeft), so a later workflow given the
// same uid inherits nothing, and nothing a run put in another's way
// outlives the run's uid. It is idempotent and finishes what a removal that failed
// half-way left behind: each step tolerates its target being gone, and
// the uid is released last, once nothing of it is left there. Nothing of
// another uid is followed or removed. A linked git worktree on a branch of
// the bare repo, as amelia made them before checkouts were repositories of
// their own, is removed with its branch.
func (w *Workspace) RemoveWorktree(ctx context.Context, id string) error {
	if err := ValidateWorkflowID(id); err != nil {
		return err
	}
	uid, err := w.RunUser(ctx, id)
	if err != nil {
		return fmt.Errorf("remove the checkout of %s: %w", id, err)
	}
	wt := w.WorktreeDir(id)
	if uid != "" {
		if err := w.endSession(ctx, uid); err != nil {
			return fmt.Errorf("remove the checkout of %s: %w", id, err)
		}
		// Only what the uid owns is touched: the step runs as the uid,
		// kills only the uid's processes (never kill -1), removes the
		// checkout only if it is the uid's, and the uid's files alone.
		uidN, _ := strconv.Atoi(uid) // RunUser's, valid
		if err := w.step(ctx, uid, "remove the checkout", workstep.EndUID{UID: uidN, Checkout: wt}, nil, nil); err != nil {
			return fmt.Errorf("remove the checkout of %s: %w", id, err)
		}
		wt = "" // the sandbox's user leaves the uid's entry alone
	}
	// The bare repo's branch amelia/<id> goes only with the linked
	// worktree that was on it (its .git a file): with no such worktree, it
	// is not this checkout's, and may hold commits nothing else does.
	// With a uid, the uid is released only when it has nothing left in
	// worktrees/ and .amelia/runs/: else the script lists what it has
	// (NUL-terminated paths) and exits exitUserLeft, for the uid to remove.
	const body = `repo=$1 wt=$2 br=$3 dref=$4 rec=$5 uid=$6
lock
if [ -n "$uid" ]; then
	set -- "$root/worktrees" "$root/.amelia/runs"
	if [ -d "$root/.amelia/parked" ]; then set -- "$@" "$root/.amelia/parked"; fi
	if [ -n "$(find "$@" -mindepth 1 -maxdepth 1 -user "$uid" -print -quit 2>/dev/null)" ]; then
		find "$@" -mindepth 1 -maxdepth 1 -user "$uid" -print0 2>/dev/null || true
		exit 5
	fi
fi
refs=$dref
if mine "$wt"; then
	if [ -f "$wt/.git" ]; then refs="$refs refs/heads/$br"; fi
	chmod -R u+rwx "$wt" 2>/dev/null || true
	rm -rf "$wt"
fi
if [ -d "$repo" ]; then
	g -C "$repo" worktree prune
	for r in $refs; do
		if g -C "$repo" show-ref --verify --quiet "$r"; then g -C "$repo" update-ref -d "$r"; fi
	done
fi
rm -f "$rec" "$root/.amelia/stamps/${rec##*/}"
`
	for pass := 1; ; pass++ {
		var out bytes.Buffer
		err := w.script(ctx, "remove the checkout", nil, nil, &out, body, w.RepoDir(), wt, Branch(id), dirtyRef(id), w.userRecord(id), uid)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUserLeft {
			if err != nil {
				return fmt.Errorf("remove the checkout of %s: %w", id, err)
			}
			break
		}
		if err := w.removeLeft(ctx, uid, out.Bytes(), pass); err != nil {
			return fmt.Errorf("remove the checkout of %s: %w", id, err)
		}
	}
	w.forgetUser(id)
	w.log.Info("checkout removed", "workflow", id)
	return nil
}

// sessionEnder is an Execer that runs a uid's commands on a session of
// the uid's (execsession.Sessions): End ends it, and the uid's later
// commands get an exec each.
type sessionEnder interface {
	End(ctx context.Context, user string) error
}

// endSession ends uid's command session, if the workspace's Execer keeps
// one: before the step that ends the uid's processes, so that the step is
// an exec of its own, never one on a session the uid's agent lived
// beside, and nothing of the uid outlives it.
func (w *Workspace) endSession(ctx context.Context, uid string) error {
	if e, ok := w.ex.(sessionEnder); ok {
		return e.End(ctx, execUser(uid))
	}
	return nil
}

// Commit is what CommitAll did.
type Commit struct {
	// Committed: there was something to commit.
	Committed bool
	// LeftOut lists untracked paths (a directory ending in "/") that the
	// checkout's ignore patterns (Options.Ignore) kept out of the branch
	// and the repository's own .gitignore files would not have: at most
	// maxLeftOut of them, as git quotes them.
	LeftOut []string
}

// maxLeftOut bounds Commit.LeftOut.
const maxLeftOut = 100

// CommitAll commits whatever the agent left uncommitted in the checkout of
// id, as "amelia: <id>" with the prompt's first line as the body, authored
// by Amelia <amelia@localhost> (the sandbox need not have a git identity),
// and says what the checkout's ignore patterns kept out. Commits the
// agent made itself stay as they are.
func (w *Workspace) CommitAll(ctx context.Context, id, prompt string) (Commit, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return Commit{}, err
	}
	msg := "amelia: " + id
	if first, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n"); first != "" {
		if len(first) > 200 {
			first = first[:200]
		}
		msg += "\n\n" + strings.TrimSpace(first)
	}
	// After the verdict, what our patterns leave out ("ours" lines), then
	// what the repository's own .gitignore files do ("theirs"), each in
	// full: a cut "theirs" would name what the repository ignores itself
	// as left out, so only the difference is bounded, below.
	var out strings.Builder
	if err := w.stepFor(ctx, id, "git commit", workstep.Commit{Dir: w.WorktreeDir(id), Message: msg, Env: identityEnv()}, nil, &out); err != nil {
		return Commit{}, fmt.Errorf("commit the changes of %s: %w", id, err)
	}
	verdict, rest, _ := strings.Cut(out.String(), "\n")
	c := Commit{Committed: strings.TrimSpace(verdict) == "committed"}
	var ours []string
	theirs := map[string]bool{}
	for _, line := range strings.Split(rest, "\n") {
		if p, ok := strings.CutPrefix(line, "ours "); ok {
			ours = append(ours, p)
		} else if p, ok := strings.CutPrefix(line, "theirs "); ok {
			theirs[p] = true
		}
	}
	for _, p := range ours {
		if !theirs[p] && len(c.LeftOut) < maxLeftOut {
			c.LeftOut = append(c.LeftOut, p)
		}
	}
	return c, nil
}

// Workflows lists, in name order, the workflows that have a checkout in
// the workspace at the sandbox's workdir (where amelia run keeps it): the
// runs in progress, and checkouts kept after a failure or with
// --keep-worktree. A checkout is the directory worktrees/<id>, not a link,
// of the uid the workflow's record names, or, for a workflow without one,
// of the sandbox's user (a checkout from before workflows had uids, or
// where runs have none): what another uid put at that path is none. It
// runs one exec, in which only an entry named like a workflow with a uid
// record costs a process: junk in worktrees/ slows it down little.
func Workflows(ctx context.Context, ex sandboxexec.Execer) ([]string, error) {
	const script = `cd worktrees 2>/dev/null || exit 0
for e in *; do
	case $e in [!A-Za-z0-9]* | *[!A-Za-z0-9._-]*) continue ;; esac
	if [ -L "$e" ] || [ ! -d "$e" ]; then continue; fi
	rec=../` + usersDir + `/$e
	if [ -f "$rec" ]; then
		uid=
		read -r uid <"$rec" || true
		[ -n "$uid" ] && [ -n "$(find "./$e" -maxdepth 0 -user "$uid" 2>/dev/null)" ] || continue
	elif [ ! -O "$e" ]; then
		continue
	fi
	printf '%s\n' "$e"
done
`
	var out, stderr strings.Builder
	st, err := ex.Exec(ctx, sdk.ExecRequest{Argv: []string{"sh", "-c", script}, Timeout: workflowsTimeout}, sdk.ExecIO{Stdout: &out, Stderr: &stderr})
	if err != nil {
		return nil, fmt.Errorf("list the workflows: %w", err)
	}
	if st.Code != 0 {
		return nil, fmt.Errorf("list the workflows: the listing ended with %s: %s", execreport.Status(st), strings.TrimSpace(stderr.String()))
	}
	var ids []string
	for _, id := range strings.Fields(out.String()) {
		if ValidateWorkflowID(id) == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// workflowsTimeout bounds Workflows' exec.
const workflowsTimeout = 10 * time.Second

// HasWork reports whether the workflow branch of id has moved from start
// (the commit its checkout was made at, Base.Start): work that removing
// the checkout would lose once CommitAll has run. A checkout or a branch
// that is not there holds none.
func (w *Workspace) HasWork(ctx context.Context, id, start string) (bool, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return false, err
	}
	var out strings.Builder
	if err := w.stepFor(ctx, id, "git rev-parse", workstep.HasWork{Dir: w.WorktreeDir(id), Branch: Branch(id), Base: start}, nil, &out); err != nil {
		return false, fmt.Errorf("look for the work of %s: %w", id, err)
	}
	return strings.TrimSpace(out.String()) == "work", nil
}
