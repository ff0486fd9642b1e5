package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/amelia-sandbox/amelia/core/execreport"
)

// hostGitConfig goes before every host git subcommand: no hook may run
// (reference-transaction runs even on fetch and update-ref), no fsmonitor
// daemon is started, and nothing detaches into the background.
var hostGitConfig = []string{
	"-c", "core.hooksPath=/dev/null",
	"-c", "core.fsmonitor=false",
	"-c", "gc.autoDetach=false",
	"-c", "protocol.ext.allow=never",
}

// repoLocationVars are inherited variables that would point host git at
// another repository, index or object store than the one we opened.
var repoLocationVars = []string{
	"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
	"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
	"GIT_PREFIX", "GIT_QUARANTINE_PATH",
}

// HostRepo is a git checkout on the host, driven through the git CLI.
type HostRepo struct {
	// Dir is the top level of the working tree.
	Dir string
	// CommonDir is the absolute git directory shared by all its worktrees
	// (where objects and branches live).
	CommonDir string
	log       *slog.Logger
}

// OpenHostRepo finds the checkout containing dir. It needs git 2.31 or
// later on the host (rev-parse --path-format).
func OpenHostRepo(ctx context.Context, dir string, log *slog.Logger) (*HostRepo, error) {
	h := &HostRepo{Dir: dir, log: orDiscard(log)}
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: no such directory (--repo names a git checkout's directory, or a URL)", dir)
	case err != nil:
		return nil, fmt.Errorf("open %s: %w", dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%s is a file, not a directory (--repo names a git checkout's directory, or a URL)", dir)
	}
	out, err := h.git(ctx, nil, "rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir")
	if err != nil {
		return nil, fmt.Errorf("open %s: not inside a git checkout (git init, or pass --repo): %w", dir, err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("open %s: unexpected git rev-parse output %q", dir, out)
	}
	h.Dir, h.CommonDir = lines[0], lines[1]
	return h, nil
}

// DefaultBranch is the checked-out branch, the base when none is given.
func (h *HostRepo) DefaultBranch(ctx context.Context) (string, error) {
	out, err := h.git(ctx, nil, "symbolic-ref", "--quiet", "--short", "HEAD")
	if err != nil {
		return "", fmt.Errorf("find the checked-out branch of %s: HEAD is detached, pass --base BRANCH", h.Dir)
	}
	return strings.TrimSpace(out), nil
}

// BranchExists reports whether refs/heads/<branch> exists.
func (h *HostRepo) BranchExists(ctx context.Context, branch string) (bool, error) {
	_, err := h.git(ctx, nil, "show-ref", "--verify", "--quiet", "refs/heads/"+branch)
	var ee *exitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.code == 1:
		return false, nil
	}
	return false, fmt.Errorf("look up branch %s in %s: %w", branch, h.Dir, err)
}

// CheckNewBranch asks git whether refs/heads/<branch> could be created at
// commit now, in a transaction it prepares and aborts: it fails when the
// branch exists (ErrBranchExists) or when another ref stands in its way —
// a branch "amelia" blocks "amelia/x", and "amelia/x/y" blocks it too.
// Nothing is written.
func (h *HostRepo) CheckNewBranch(ctx context.Context, branch, commit string) error {
	if exists, err := h.BranchExists(ctx, branch); err != nil {
		return err
	} else if exists {
		return fmt.Errorf("branch %s in %s: %w", branch, h.Dir, ErrBranchExists)
	}
	tx := fmt.Sprintf("start\ncreate refs/heads/%s %s\nprepare\nabort\n", branch, commit)
	if err := h.gitIO(ctx, nil, strings.NewReader(tx), io.Discard, "update-ref", "--stdin"); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			_, why, _ := strings.Cut(ee.stderr, "cannot lock ref ")
			if why == "" {
				why = ee.stderr
			}
			return fmt.Errorf("branch %s cannot be created in %s: %s", branch, h.Dir, strings.TrimSpace(why))
		}
		return fmt.Errorf("check branch %s in %s: %w", branch, h.Dir, err)
	}
	return nil
}

// HasCommits reports whether the repository has any commit at all: a new
// one (git init, nothing committed) has none.
func (h *HostRepo) HasCommits(ctx context.Context) (bool, error) {
	out, err := h.git(ctx, nil, "rev-list", "--all", "--max-count=1")
	if err != nil {
		return false, fmt.Errorf("look for commits in %s: %w", h.Dir, err)
	}
	return strings.TrimSpace(out) != "", nil
}

// ResolveBranch returns the commit refs/heads/<branch> points at.
func (h *HostRepo) ResolveBranch(ctx context.Context, branch string) (string, error) {
	if err := checkBranchName(branch); err != nil {
		return "", err
	}
	out, err := h.git(ctx, nil, "rev-parse", "--verify", "--quiet", "--end-of-options", "refs/heads/"+branch+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("branch %q does not exist in %s", branch, h.Dir)
	}
	return strings.TrimSpace(out), nil
}

// Dirty lists the checkout's uncommitted and untracked paths (ignored files
// excluded): every path where the working tree may differ from HEAD, a
// rename as its two paths. It takes no optional locks, so it never
// rewrites the index.
func (h *HostRepo) Dirty(ctx context.Context) ([]string, error) {
	out, err := h.git(ctx, nil, "status", "--porcelain=v1", "-z", "--no-renames", "--untracked-files=all", "--ignore-submodules=none")
	if err != nil {
		return nil, fmt.Errorf("check %s for uncommitted changes: %w", h.Dir, err)
	}
	var paths []string
	recs := strings.Split(out, "\x00")
	for i := 0; i < len(recs); i++ {
		r := recs[i]
		if len(r) < 4 {
			continue
		}
		paths = append(paths, r[3:])
		if r[0] == 'R' || r[0] == 'C' { // the rename's source follows
			i++
			if i < len(recs) && recs[i] != "" {
				paths = append(paths, recs[i])
			}
		}
	}
	return paths, nil
}

// DiffStat is `git diff --stat` from one commit or branch to another.
func (h *HostRepo) DiffStat(ctx context.Context, from, to string) (string, error) {
	out, err := h.git(ctx, nil, "diff", "--stat", "--no-ext-diff", "--no-textconv", "--end-of-options", from, to, "--")
	if err != nil {
		return "", fmt.Errorf("diff --stat %s..%s in %s: %w", from, to, h.Dir, err)
	}
	return out, nil
}

// dirtyCommit records the checkout as it is (tracked changes, staged or
// not, and untracked files that are not ignored) as one commit on top of
// parent, and returns the commit id. dirty are the paths where the
// working tree differs from parent (Dirty, when parent is HEAD): only
// those are read and hashed, so the cost follows the change, not the
// tree (a fresh index holds no stat data, and `add -A` of the whole tree
// would hash every file). It leaves the user's index, worktree, branches
// and object store alone: the tree is built in a temporary index
// (GIT_INDEX_FILE) and its objects go to objDir, a temporary object
// directory that borrows the repository's objects as an alternate.
func (h *HostRepo) dirtyCommit(ctx context.Context, objDir, parent string, dirty []string, message string) (string, error) {
	idx := filepath.Join(filepath.Dir(objDir), "index")
	env := []string{"GIT_INDEX_FILE=" + idx, "GIT_OBJECT_DIRECTORY=" + objDir}
	if _, err := h.git(ctx, env, "read-tree", parent); err != nil {
		return "", fmt.Errorf("snapshot uncommitted changes of %s: %w", h.Dir, err)
	}
	// The paths as git printed them, each literally (no glob), from the
	// top of the working tree.
	list := strings.NewReader(strings.Join(dirty, "\x00") + "\x00")
	if err := h.gitIO(ctx, append(env, "GIT_LITERAL_PATHSPECS=1"), list, io.Discard,
		"add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"); err != nil {
		return "", fmt.Errorf("snapshot uncommitted changes of %s: %w", h.Dir, err)
	}
	tree, err := h.git(ctx, env, "write-tree")
	if err != nil {
		return "", fmt.Errorf("snapshot uncommitted changes of %s: %w", h.Dir, err)
	}
	env = append(env, identityEnv()...)
	c, err := h.git(ctx, env, "commit-tree", strings.TrimSpace(tree), "-p", parent, "-m", message)
	if err != nil {
		return "", fmt.Errorf("commit uncommitted changes of %s: %w", h.Dir, err)
	}
	return strings.TrimSpace(c), nil
}

// git runs host git in h.Dir with hooks off and no prompts; extraEnv is
// appended to the environment. It returns stdout.
func (h *HostRepo) git(ctx context.Context, extraEnv []string, args ...string) (string, error) {
	var out bytes.Buffer
	err := h.gitIO(ctx, extraEnv, nil, &out, args...)
	return out.String(), err
}

// gitIO is git with the given stdin and stdout.
func (h *HostRepo) gitIO(ctx context.Context, extraEnv []string, stdin io.Reader, stdout io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", append(append([]string{"-C", h.Dir}, hostGitConfig...), args...)...)
	cmd.Env = append(hostEnv(), extraEnv...)
	cmd.Stdin, cmd.Stdout = stdin, stdout
	var stderr execreport.Stderr
	cmd.Stderr = &stderr
	h.log.Debug("host git", "dir", h.Dir, "args", args)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.Exited() {
			return &exitError{what: "git " + args[0], code: ee.ExitCode(), stderr: stderr.Tail()}
		}
		return fmt.Errorf("git %s: %w", args[0], err)
	}
	return nil
}

// hostEnv is this process's environment without variables that would
// redirect git, plus no terminal prompts and no optional locks (git status
// would otherwise refresh the user's index).
func hostEnv() []string {
	env := make([]string, 0, len(os.Environ())+3)
next:
	for _, kv := range os.Environ() {
		for _, v := range repoLocationVars {
			if strings.HasPrefix(kv, v+"=") {
				continue next
			}
		}
		env = append(env, kv)
	}
	return append(env, "GIT_TERMINAL_PROMPT=0", "GIT_OPTIONAL_LOCKS=0", "LC_ALL=C")
}

// identityEnv sets author and committer, so commits work where git has no
// identity configured (the sandbox, CI).
func identityEnv() []string {
	return []string{
		"GIT_AUTHOR_NAME=" + authorName, "GIT_AUTHOR_EMAIL=" + authorEmail,
		"GIT_COMMITTER_NAME=" + authorName, "GIT_COMMITTER_EMAIL=" + authorEmail,
	}
}

const (
	authorName  = "Amelia"
	authorEmail = "amelia@localhost"
)

// checkBranchName refuses branch names that could be read as options or
// that step outside refs/heads; git check-ref-format does the rest where
// the name is used.
func checkBranchName(b string) error {
	if b == "" || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "refs/") ||
		strings.ContainsAny(b, " \t\n\x00~^:?*[\\") || strings.Contains(b, "..") {
		return fmt.Errorf("invalid branch name %q", b)
	}
	return nil
}

// exitError is a command that ran and exited non-zero.
type exitError struct {
	what   string
	code   int
	stderr string // the end of its stderr, one printable line
}

func (e *exitError) Error() string {
	msg := strings.TrimSpace(e.stderr)
	if msg == "" {
		return fmt.Sprintf("%s: exit %d", e.what, e.code)
	}
	return fmt.Sprintf("%s: exit %d: %s", e.what, e.code, msg)
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// ReadFile returns the file at path (from the repository's top,
// "/"-separated) in commit, and whether commit has a file there.
func (h *HostRepo) ReadFile(ctx context.Context, commit, path string) ([]byte, bool, error) {
	obj := commit + ":" + path
	if typ, err := h.git(ctx, nil, "cat-file", "-t", obj); err != nil || strings.TrimSpace(typ) != "blob" {
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			return nil, false, nil // no such path, or not a file
		}
		return nil, false, err
	}
	var out bytes.Buffer
	if err := h.gitIO(ctx, nil, nil, &out, "cat-file", "blob", obj); err != nil {
		return nil, false, fmt.Errorf("read %s at %s: %w", path, commit, err)
	}
	return out.Bytes(), true, nil
}

// Archive writes the directory dir (from the repository's top; "." for
// all of it) of commit to w as a tar, its paths relative to dir.
func (h *HostRepo) Archive(ctx context.Context, commit, dir string, w io.Writer) error {
	tree := commit
	if dir != "." && dir != "" {
		tree += ":" + dir
	}
	if err := h.gitIO(ctx, nil, nil, w, "archive", "--format=tar", tree); err != nil {
		return fmt.Errorf("archive %s at %s: %w", dir, commit, err)
	}
	return nil
}
