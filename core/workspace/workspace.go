// Package workspace moves a repository into a sandbox, gives every workflow
// its own checkout there, and brings the result back as a git branch.
//
// Layout inside the sandbox, under a root the caller gives (the sandbox's
// workdir, sdk.Sandbox.Workdir):
//
//	ROOT/repo                 bare repository shared by every workflow
//	ROOT/worktrees/<id>       one checkout per workflow (0700): a repository of
//	                          its own on branch amelia/<id>, borrowing the
//	                          objects of ROOT/repo, which it never writes
//	ROOT/worktrees/.new-<hex> a checkout being made by its workflow's uid, or
//	                          what another uid had put in a checkout's way
//	ROOT/.amelia/runs/<run>   the run directory of a detached agent (0700)
//	ROOT/.amelia/users/<id>   the uid of workflow id, with run users (users.go)
//	ROOT/.amelia-repo.lock    the lock that serialises writes to ROOT/repo
//	ROOT/.amelia-run.lock     the lock that makes a run the only one in the
//	                          sandbox where runs are not separated: Hold's,
//	                          then the detached agent's supervisor's (LockFile);
//	                          ROOT/.amelia-run.owner says which run holds it
//
// worktrees/ and .amelia/runs/ are mode 1733. Where the provider separates
// uids (sdk.Capabilities.RunUsers), each workflow's checkout, run directory
// and steps belong to a uid of its own (see users.go), and no uid can
// take, block or redirect another workflow's path: a checkout is made
// under a name only the host knows and moved to worktrees/<id> by the
// sandbox's user, who moves aside whatever another uid put there; only a
// directory of the workflow's own uid counts as its checkout (Workflows,
// CommitAll, HasWork, FetchResult); and what a uid leaves in those
// directories goes when its uid is released. Elsewhere all is the
// sandbox's user's, and runs sharing the sandbox are not separated.
//
// Everything inside the sandbox happens through one Exec per step, as argv
// or as a fixed `sh -c SCRIPT sh ARGS...` script whose data arrive only as
// positional parameters; only git, sh and coreutils are assumed there. On
// the host, the real git CLI runs with hooks disabled.
//
// Two ways in: SyncLocal streams a git bundle of a host checkout over Exec
// stdin (incremental: commits the sandbox already has are prerequisites, not
// payload); SyncURL clones or fetches inside the sandbox with amelia-worker
// as git's credential helper. Two ways out: FetchResult streams the branch
// back as a bundle over Exec stdout, has host git index and inspect it in
// a quarantine (it is untrusted) and only then moves its objects into the
// host repo and creates amelia/<id>;
// Push pushes the branch from the sandbox.
package workspace

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Errors callers can tell apart with errors.Is.
var (
	// ErrInvalidID: a workflow id that could be a path or ref trick.
	ErrInvalidID = errors.New("invalid workflow id")
	// ErrBranchExists: amelia/<id> already exists (host or sandbox).
	ErrBranchExists = errors.New("branch already exists")
	// ErrDirty: the host checkout has uncommitted or untracked changes.
	ErrDirty = errors.New("uncommitted changes")
	// ErrNoChanges: the workflow's branch has no commit beyond its base.
	ErrNoChanges = errors.New("no changes")
	// ErrRefused: the result (or a push) broke a rule; the message says which.
	ErrRefused = errors.New("result refused")
)

// BranchPrefix is the namespace of workflow branches, on the host and in
// the sandbox.
const BranchPrefix = "amelia/"

// idPattern is a workflow id's characters; ValidateWorkflowID checks its
// length apart, since a bounded repetition ({0,62}) compiles to as many
// copies of the class, built at every start of amelia.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ValidateWorkflowID accepts ids that are safe both as one path component
// (ROOT/worktrees/<id>) and inside a ref name (refs/heads/amelia/<id>):
// 1–63 of [A-Za-z0-9._-], starting with a letter or digit, no "..", not
// ending in ".lock".
func ValidateWorkflowID(id string) error {
	const allowed = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
	switch {
	case id == "":
		return fmt.Errorf("%w: empty (allowed: %s)", ErrInvalidID, allowed)
	case len(id) > 63:
		return fmt.Errorf("%w %.20q...: %d characters (allowed: %s)", ErrInvalidID, id, len(id), allowed)
	case !idPattern.MatchString(id):
		return fmt.Errorf("%w %q: bad character or first character (allowed: %s)", ErrInvalidID, id, allowed)
	case strings.Contains(id, ".."):
		return fmt.Errorf("%w %q: contains \"..\" (allowed: %s, no \"..\")", ErrInvalidID, id, allowed)
	case strings.HasSuffix(id, ".lock"):
		return fmt.Errorf("%w %q: ends in \".lock\", which git reserves", ErrInvalidID, id)
	}
	return nil
}

// NewWorkflowID makes a short readable id from the first words of prompt
// plus 4 random hex digits ("fix-login-3f9a"); it always validates. The
// random part keeps two runs of the same prompt apart.
func NewWorkflowID(prompt string) string {
	const maxWords, maxLen = 3, 30
	var words []string
	for _, f := range strings.FieldsFunc(strings.ToLower(prompt), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	}) {
		if len(words) == maxWords || len(strings.Join(append(words, f), "-")) > maxLen {
			break
		}
		words = append(words, f)
	}
	stem := strings.Join(words, "-")
	if stem == "" {
		stem = "run"
	}
	return stem + "-" + randomHex(2)
}

// Branch is the workflow's branch name, the same on the host and in the
// sandbox: amelia/<id>.
func Branch(id string) string { return BranchPrefix + id }

// Base is what a workflow starts from.
type Base struct {
	// Branch is the base branch's short name ("main").
	Branch string
	// Commit is that branch's commit: results are bundled and checked
	// against it, and the host has it.
	Commit string
	// Start is the commit the worktree starts from: Commit, or the commit
	// that carries the host's uncommitted changes on top of it.
	Start string
}
