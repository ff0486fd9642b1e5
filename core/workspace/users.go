package workspace

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Run users. Where the provider can run an exec as any uid, each with no
// privilege over another's (sdk.Capabilities.RunUsers: docker), every
// workflow gets a uid of its own, in [FirstRunUID, LastRunUID], which owns
// its checkout (0700) and runs every step there: the checkout, the agent's
// run directory with its HOME and TMPDIR, the agent itself, its commits,
// the result bundle and the push. The sandbox's user keeps the bare
// repository, which every uid may read and none may write, and the
// tunnel. ROOT/worktrees and ROOT/.amelia/runs are mode 1733: any uid
// makes an entry there, none lists them, and none removes or renames
// another's; only the sandbox's user, their owner, may.
//
// So no uid can take a path another workflow will need: a uid may make
// ROOT/worktrees/<id> of a workflow yet to run, but the workflow's uid
// makes its checkout under a name only the host knows, and the sandbox's
// user moves it to ROOT/worktrees/<id>, moving aside what is in the way
// (placeCheckout); run directories are named with a random part.
//
// A workflow's uid is allocated inside the sandbox, under the repository
// lock, as the record ROOT/.amelia/users/<id> (written by the sandbox's
// user, so no uid can forge one), skipping every uid any record holds and
// every id the image's /etc/passwd and /etc/group know. RemoveWorktree
// releases it once the uid has nothing left there: no process, no file in
// the shared temp directories, no entry in ROOT/worktrees or
// ROOT/.amelia/runs, whatever its name, so what a run put in another's way
// goes with its uid.
const (
	FirstRunUID = 60100
	LastRunUID  = 64999
)

// usersDir holds the uid records under the root.
const usersDir = ".amelia/users"

// userRecord is the uid record of workflow id.
func (w *Workspace) userRecord(id string) string { return path.Join(w.root, usersDir, id) }

// execUser is the ExecRequest.User of uid: the uid, with the group of the
// same number ("": the sandbox's user).
func execUser(uid string) string {
	if uid == "" {
		return ""
	}
	return uid + ":" + uid
}

// validUID checks a uid read from the sandbox against the range runs get.
func validUID(s string, first, last int) (string, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < first || n > last || strconv.Itoa(n) != s {
		return "", fmt.Errorf("%q is not a uid of a run (%d-%d)", s, first, last)
	}
	return s, nil
}

// idFiles are the files whose third field holds ids the image gives
// (users and groups): a run's uid and gid are none of them.
const idFiles = "/etc/passwd /etc/group"

// parkedCheckout is a parked checkout that allocateUser gave a workflow
// with its uid: dir (in .amelia/parked/), made at start, with
// the stamp that proves what of it is unchanged (checkout stamp's output).
type parkedCheckout struct {
	dir, start string
	stamp      []byte
}

// allocateUser gives workflow id a uid and records it, under the lock; it
// also makes the shared directories, 1733. Where the workspace parks
// checkouts (see pool.go), a uid whose parked checkout was made of the
// repository of start (the same first root commit) and has no trash left
// comes first, the newest such checkout, returned for the uid to reset. Else the uid is the lowest that no
// record, parked checkout or trash holds. It refuses (exit 3,
// ErrBranchExists) when the workflow has a uid already: its checkout is
// kept.
func (w *Workspace) allocateUser(ctx context.Context, id, start string) (string, *parkedCheckout, error) {
	var out bytes.Buffer
	err := w.step(ctx, "", "give the workflow a uid", workstep.Allocate{Root: w.root, ID: id, First: w.uids[0], Last: w.uids[1],
		IDFiles: strings.Fields(w.idFiles), Start: start, Parking: w.parking()}, nil, &out)
	if msg, ok := refused(err); ok {
		return "", nil, fmt.Errorf("add the checkout of %s: %w: %s", id, ErrBranchExists, msg)
	}
	if err != nil {
		return "", nil, fmt.Errorf("give %s a uid: %w", id, err)
	}
	rest := out.Bytes()
	var sweeps []string
	for bytes.HasPrefix(rest, []byte("sweep ")) {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\n"))
		sweeps = append(sweeps, string(line))
	}
	w.sweep(ctx, sweeps)
	first, rest, _ := bytes.Cut(rest, []byte("\n"))
	uid, err := validUID(strings.TrimSpace(string(first)), w.uids[0], w.uids[1])
	if err != nil {
		return "", nil, fmt.Errorf("give %s a uid: %w", id, err)
	}
	w.mu.Lock()
	w.users[id] = uid
	w.mu.Unlock()
	var reuse *parkedCheckout
	if mark, stamp, _ := bytes.Cut(rest, []byte("\n")); bytes.HasPrefix(mark, []byte("reuse .park-")) {
		name := strings.TrimPrefix(string(mark), "reuse ")
		startLine, st, _ := bytes.Cut(stamp, []byte("\n"))
		oldStart, ok := strings.CutPrefix(string(startLine), "start ")
		if ok && validCommit(oldStart) && !strings.ContainsAny(name, "/ ") {
			reuse = &parkedCheckout{dir: path.Join(w.root, ".amelia", "parked", name), start: oldStart, stamp: st}
		}
	}
	return uid, reuse, nil
}

// validCommit checks a commit id read from the sandbox.
func validCommit(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// newCheckoutPrefix starts the name under which a workflow's uid makes its
// checkout in ROOT/worktrees, followed by 32 random hex digits the host
// picks: no other uid can know it (the directory is 1733, no uid lists
// it), so none can have put anything there first. It is no workflow id.
const newCheckoutPrefix = ".new-"

// placeCheckout moves the checkout that the workflow's uid, running as
// owner, made at ROOT/worktrees/<from> to ROOT/worktrees/<id>: the
// sandbox's user, who owns worktrees/ and so may move what any uid made
// in it, runs `amelia-worker claim` under the lock, which renames it there
// if nothing is, or else atomically exchanges it with whatever another
// uid put at that path (a directory, a file, a link: never followed),
// which so ends at <from>, untouched until its uid is released. It
// refuses (exit 3) to move a directory of the sandbox's user's: a
// checkout amelia made before workflows had uids. A kept checkout of id's
// own never gets this far: its uid record stops allocateUser.
//
// Given the checkout's stamp (made at start), the sandbox's user keeps it
// as .amelia/stamps/<id>, for Retire to park the checkout with.
func (w *Workspace) placeCheckout(ctx context.Context, id, from, owner, start string, stamp []byte) error {
	if _, err := validUID(owner, 0, math.MaxInt32); err != nil {
		return fmt.Errorf("make the checkout: its script did not begin with the uid it ran as: %w", err)
	}
	var out strings.Builder
	var stdin io.Reader
	if stamp != nil {
		if !bytes.HasPrefix(stamp, []byte("stamp ")) {
			return fmt.Errorf("make the checkout: its stamp begins with %.40q", stamp)
		}
		stdin = io.MultiReader(strings.NewReader("start "+start+"\n"), bytes.NewReader(stamp))
	}
	ownerUID, _ := strconv.Atoi(owner)
	err := w.step(ctx, "", "move the checkout into place", workstep.Place{Root: w.root, Owner: ownerUID, From: from, ID: id, Stamp: stamp != nil}, stdin, &out)
	if _, ok := refused(err); ok {
		return &exitError{what: "move the checkout into place", code: exitRefused,
			stderr: w.WorktreeDir(id) + " is a checkout of the sandbox's user, as amelia made them before workflows had uids"}
	}
	if err != nil {
		return err
	}
	if aside, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "aside "); ok {
		w.log.Warn("another uid had put something at the workflow's checkout; it was moved aside, and goes when that uid is released",
			"workflow", id, "dir", w.WorktreeDir(id), "uid", aside, "now", path.Join(w.root, "worktrees", from))
	}
	return nil
}

// exitUserLeft is the exit of RemoveWorktree's release when the uid still
// has entries in worktrees/ or .amelia/runs/, which it lists.
const exitUserLeft = 5

// removePasses bounds how often RemoveWorktree has the uid remove what it
// has left before it gives up and keeps the uid.
const removePasses = 3

// removeLeft has uid remove the entries listed (NUL-terminated paths in
// worktrees/ or .amelia/runs/, as the sandbox's user found them), each
// only if it is still the uid's: the uid may not list those directories,
// only reach an entry by its name. It fails once pass reaches
// removePasses.
func (w *Workspace) removeLeft(ctx context.Context, uid string, listing []byte, pass int) error {
	paths, err := w.leftPaths(uid, listing, pass, "remove")
	if err != nil {
		return err
	}
	const body = `uid=$1
shift
for p; do
	[ -n "$(find "$p" -maxdepth 0 -user "$uid" 2>/dev/null)" ] || continue
	if [ ! -L "$p" ]; then chmod -R u+rwx -- "$p" 2>/dev/null || true; fi
	rm -rf -- "$p" 2>/dev/null || true
done
`
	for chunk := range slices.Chunk(paths, 100) {
		if err := w.scriptAs(ctx, uid, "remove what the uid left", nil, nil, nil, body, append([]string{uid}, chunk...)...); err != nil {
			return fmt.Errorf("release uid %s: %w", uid, err)
		}
	}
	return nil
}

// leftPaths are the entries a listing of what uid left names
// (NUL-terminated paths in worktrees/, .amelia/runs/ or .amelia/parked/,
// as the sandbox's user found them), checked to be entries of those; it
// fails once pass reaches removePasses, saying the uid could not verb
// them.
func (w *Workspace) leftPaths(uid string, listing []byte, pass int, verb string) ([]string, error) {
	var paths []string
	for p := range strings.SplitSeq(strings.TrimSuffix(string(listing), "\x00"), "\x00") {
		dir, name := path.Split(path.Clean(p))
		dir = path.Clean(dir)
		if (dir != path.Join(w.root, "worktrees") && dir != path.Join(w.root, ".amelia", "runs") && dir != path.Join(w.root, ".amelia", "parked")) || name == "" || name == "." || name == ".." {
			return nil, fmt.Errorf("release uid %s: the sandbox listed %q as one of its entries, which is no entry of worktrees/, .amelia/runs/ or .amelia/parked/", uid, p)
		}
		paths = append(paths, path.Join(dir, name))
	}
	if pass >= removePasses {
		return nil, fmt.Errorf("release uid %s: it still has %d entries in the sandbox that it could not %s, such as %q; the uid stays taken until they are gone: remove them as that uid (amelia sandbox exec --user %s -- rm -rf PATH), or remove the sandbox",
			uid, len(paths), verb, paths[0], uid)
	}
	return paths, nil
}

// randomHex is n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

func (w *Workspace) forgetUser(id string) {
	w.mu.Lock()
	delete(w.users, id)
	w.mu.Unlock()
}

// RunUser is the uid of workflow id, which its checkout and run directory
// belong to and every step in them runs as: "" without run users, and
// for a workflow that has none (it has no checkout, or one amelia made
// before workflows had uids). It reads the sandbox's record once.
func (w *Workspace) RunUser(ctx context.Context, id string) (string, error) {
	if !w.runUsers {
		return "", nil
	}
	if err := ValidateWorkflowID(id); err != nil {
		return "", err
	}
	w.mu.Lock()
	uid, ok := w.users[id]
	w.mu.Unlock()
	if ok {
		return uid, nil
	}
	var out strings.Builder
	if err := w.script(ctx, "read the workflow's uid", nil, nil, &out, `[ ! -f "$1" ] || cat "$1"`, w.userRecord(id)); err != nil {
		return "", fmt.Errorf("find the uid of %s: %w", id, err)
	}
	got := strings.TrimSpace(out.String())
	if got == "" {
		return "", nil
	}
	uid, err := validUID(got, w.uids[0], w.uids[1])
	if err != nil {
		return "", fmt.Errorf("find the uid of %s: %s: %w", id, w.userRecord(id), err)
	}
	w.mu.Lock()
	w.users[id] = uid
	w.mu.Unlock()
	return uid, nil
}

// RunAs is ex running every request that names no user as uid, as
// RunUser returns it ("": ex itself): the agent's driver of a workflow
// with a uid runs through it.
func RunAs(ex sandboxexec.Execer, uid string) sandboxexec.Execer {
	if uid == "" {
		return ex
	}
	if s, ok := ex.(stepper); ok {
		return runAsStepper{runAs{ex, execUser(uid)}, s}
	}
	return runAs{ex, execUser(uid)}
}

// runAsStepper is runAs of an Execer that serves the worker's typed
// requests itself (stepper), which it keeps doing, as the uid.
type runAsStepper struct {
	runAs
	s stepper
}

func (r runAsStepper) Step(ctx context.Context, user string, req workstep.Request, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if user == "" {
		user = r.user
	}
	return r.s.Step(ctx, user, req, eio)
}

type runAs struct {
	sandboxexec.Execer
	user string
}

func (r runAs) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.User == "" {
		req.User = r.user
	}
	return r.Execer.Exec(ctx, req, eio)
}

// RunUsers lists the uid of every workflow that has one in the workspace
// at the sandbox's workdir (where amelia run keeps it), by workflow id, in
// one exec: for the tools that look at a sandbox's runs (sandbox ls).
func RunUsers(ctx context.Context, ex sandboxexec.Execer) (map[string]string, error) {
	var out, stderr strings.Builder
	st, err := ex.Exec(ctx, sdk.ExecRequest{
		Argv:    []string{"sh", "-c", `cd ` + usersDir + ` 2>/dev/null || exit 0; for f in *; do [ ! -f "$f" ] || printf '%s %s\n' "$f" "$(cat "$f")"; done`},
		Timeout: workflowsTimeout,
	}, sdk.ExecIO{Stdout: &out, Stderr: &stderr})
	if err != nil {
		return nil, fmt.Errorf("list the workflows' uids: %w", err)
	}
	if st.Code != 0 {
		return nil, fmt.Errorf("list the workflows' uids: %s: %s", execreport.Status(st), strings.TrimSpace(stderr.String()))
	}
	users := map[string]string{}
	for line := range strings.Lines(out.String()) {
		id, uid, _ := strings.Cut(strings.TrimSpace(line), " ")
		if ValidateWorkflowID(id) != nil {
			continue
		}
		// Records are the sandbox user's to write: any uid but root's.
		if uid, err := validUID(uid, 1, math.MaxInt32); err == nil {
			users[id] = uid
		}
	}
	return users, nil
}
