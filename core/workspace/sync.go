package workspace

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// LocalSource is a host checkout to sync into the sandbox.
type LocalSource struct {
	Repo *HostRepo
	// Branch is the base branch; empty means the checked-out branch.
	Branch string
	// IncludeDirty carries uncommitted changes of the checkout as one
	// commit on top of the base instead of refusing them. Only meaningful
	// when the base is the checked-out branch (other bases are committed
	// history, so the checkout's state does not apply to them).
	IncludeDirty bool
	// Workflow names the sandbox ref of the dirty commit; required with
	// IncludeDirty.
	Workflow string
}

// Synced is what a sync did.
type Synced struct {
	Base Base
	// BundleBytes is how much went over Exec stdin (0 when the sandbox
	// already had everything).
	BundleBytes int64
	// Commits is how many commits the bundle carried.
	Commits  int
	Duration time.Duration
}

// SyncLocal brings src's base branch (and the dirty commit) into the
// sandbox's bare repo as a git bundle over Exec stdin, creating the repo
// when needed. The bundle holds only the refs needed and only what the
// sandbox lacks: the sandbox's ref tips that the host also has are
// excluded (^commit), so they become the bundle's prerequisites. In the
// bare repo the base lands on refs/heads/<branch>, the dirty commit on
// refs/amelia/dirty/<workflow>.
func (w *Workspace) SyncLocal(ctx context.Context, src LocalSource) (Synced, error) {
	start := time.Now()
	h := src.Repo
	current, err := h.DefaultBranch(ctx)
	branch := src.Branch
	if branch == "" {
		if err != nil {
			return Synced{}, err
		}
		branch = current
	}
	commit, err := h.ResolveBranch(ctx, branch)
	if err != nil {
		return Synced{}, fmt.Errorf("sync %s into sandbox: %w", h.Dir, err)
	}
	base := Base{Branch: branch, Commit: commit, Start: commit}
	refs := []refTip{{"refs/heads/" + branch, commit}}

	gitDir := h.CommonDir
	var dirtyEnv []string
	if branch == current {
		dirty, err := h.Dirty(ctx)
		if err != nil {
			return Synced{}, err
		}
		if len(dirty) > 0 && !src.IncludeDirty {
			return Synced{}, dirtyError(h.Dir, dirty)
		}
		if len(dirty) > 0 {
			if err := ValidateWorkflowID(src.Workflow); err != nil {
				return Synced{}, fmt.Errorf("include uncommitted changes: %w", err)
			}
			tmp, err := h.scratchRepo(ctx)
			if err != nil {
				return Synced{}, err
			}
			defer os.RemoveAll(tmp)
			c, err := h.dirtyCommit(ctx, filepath.Join(tmp, "objects"), commit, dirty, "amelia: uncommitted changes for "+src.Workflow)
			if err != nil {
				return Synced{}, err
			}
			base.Start = c
			refs = append(refs, refTip{dirtyRef(src.Workflow), c})
			// The bundle is made in the scratch repo, which sees the
			// user's objects through its alternate plus the new ones; the
			// refs to bundle get their names there (it is ours to write).
			gitDir, dirtyEnv = tmp, []string{"GIT_DIR=" + tmp}
			for _, r := range refs {
				if _, err := h.git(ctx, dirtyEnv, "update-ref", r.name, r.oid); err != nil {
					return Synced{}, fmt.Errorf("include uncommitted changes: %w", err)
				}
			}
			w.log.Info("carrying uncommitted changes", "paths", len(dirty), "commit", c)
		}
	}

	tips, err := w.sandboxTips(ctx)
	if err != nil {
		return Synced{}, fmt.Errorf("sync %s into sandbox: %w", h.Dir, err)
	}
	have, err := h.commitsAmong(ctx, tips)
	if err != nil {
		return Synced{}, fmt.Errorf("sync %s into sandbox: %w", h.Dir, err)
	}
	var send []string
	for _, r := range refs {
		if !have[r.oid] {
			send = append(send, r.name)
		}
	}
	res := Synced{Base: base}
	if len(send) == 0 {
		err = w.receiveBundle(ctx, nil, refs)
	} else {
		revs := append([]string(nil), send...)
		for oid := range have {
			revs = append(revs, "^"+oid)
		}
		res.Commits, err = h.countCommits(ctx, dirtyEnv, revs)
		if err != nil {
			return Synced{}, fmt.Errorf("sync %s into sandbox: %w", h.Dir, err)
		}
		res.BundleBytes, err = w.streamBundle(ctx, h, gitDir, revs, refs)
	}
	if err != nil {
		return Synced{}, fmt.Errorf("sync %s into sandbox: %w", h.Dir, err)
	}
	res.Duration = time.Since(start)
	w.log.Info("synced local repo", "repo", h.Dir, "branch", branch, "commit", commit,
		"bundle_bytes", res.BundleBytes, "commits", res.Commits, "duration", res.Duration)
	return res, nil
}

type refTip struct{ name, oid string }

// dirtyError lists a few of the uncommitted paths and how to proceed.
func dirtyError(dir string, paths []string) error {
	const show = 5
	list := strings.Join(paths[:min(show, len(paths))], ", ")
	if len(paths) > show {
		list += fmt.Sprintf(" and %d more", len(paths)-show)
	}
	return fmt.Errorf("%s has %w (%s): commit or stash them, or pass --include-dirty to carry them as a commit", dir, ErrDirty, list)
}

// sandboxTips lists the commit ids the sandbox's bare repo has refs to,
// under the lock: another run may be creating the repo.
func (w *Workspace) sandboxTips(ctx context.Context) ([]string, error) {
	var out strings.Builder
	if err := w.step(ctx, "", "list the sandbox repo's refs", workstep.Refs{Root: w.root, Repo: w.RepoDir()}, nil, &out); err != nil {
		return nil, err
	}
	return strings.Fields(out.String()), nil
}

// commitsAmong returns which of oids are commits the host repo has: those
// can be excluded from a bundle.
func (h *HostRepo) commitsAmong(ctx context.Context, oids []string) (map[string]bool, error) {
	have := map[string]bool{}
	if len(oids) == 0 {
		return have, nil
	}
	var out strings.Builder
	in := strings.NewReader(strings.Join(oids, "\n") + "\n")
	if err := h.gitIO(ctx, nil, in, &out, "cat-file", "--batch-check=%(objectname) %(objecttype)"); err != nil {
		return nil, fmt.Errorf("look up the sandbox's commits on the host: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	for sc.Scan() {
		if oid, typ, _ := strings.Cut(sc.Text(), " "); typ == "commit" {
			have[oid] = true
		}
	}
	return have, nil
}

// countCommits counts the commits rev-list revs selects.
func (h *HostRepo) countCommits(ctx context.Context, env, revs []string) (int, error) {
	out, err := h.git(ctx, env, append([]string{"rev-list", "--count"}, revs...)...)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// scratchRepo makes a temporary bare repo whose object store borrows the
// host repo's (objects/info/alternates), so commits can be written and
// bundled without adding a ref or an object to the user's repository.
func (h *HostRepo) scratchRepo(ctx context.Context) (string, error) {
	tmp, err := os.MkdirTemp("", "amelia-dirty-")
	if err != nil {
		return "", fmt.Errorf("scratch repo for uncommitted changes: %w", err)
	}
	if _, err := h.git(ctx, nil, "init", "--quiet", "--bare", tmp); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("scratch repo for uncommitted changes: %w", err)
	}
	alt := filepath.Join(h.CommonDir, "objects") + "\n"
	if err := os.WriteFile(filepath.Join(tmp, "objects", "info", "alternates"), []byte(alt), 0o644); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("scratch repo for uncommitted changes: %w", err)
	}
	return tmp, nil
}

// streamBundle pipes `git bundle create - REVS` from gitDir on the host
// into the sandbox's receiveBundle, counting the bytes.
func (w *Workspace) streamBundle(ctx context.Context, h *HostRepo, gitDir string, revs []string, refs []refTip) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := h.gitIO(ctx, []string{"GIT_DIR=" + gitDir}, nil, pw, append([]string{"bundle", "create", "-"}, revs...)...)
		pw.CloseWithError(err)
		done <- err
	}()
	cr := &countingReader{r: pr}
	err := w.receiveBundle(ctx, cr, refs)
	pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if the sandbox stopped reading
	if err != nil {
		cancel()
		<-done
		return 0, err
	}
	if err := <-done; err != nil {
		return 0, fmt.Errorf("bundle on the host: %w", err)
	}
	return cr.n.Load(), nil
}

// receiveBundle runs in the sandbox under the lock: it creates the bare
// repo if needed, stores a bundle read from stdin (nil: none) and points
// refs at their commits. `git bundle unbundle` checks the prerequisites
// and stores the pack without touching refs; update-ref then sets exactly
// the refs we name.
func (w *Workspace) receiveBundle(ctx context.Context, bundle io.Reader, refs []refTip) error {
	r := workstep.Receive{Root: w.root, Repo: w.RepoDir(), Bundle: bundle != nil}
	for _, t := range refs {
		r.Refs = append(r.Refs, workstep.RefTip{Name: t.name, Oid: t.oid})
	}
	return w.step(ctx, "", "receive bundle into the sandbox repo", r, bundle, nil)
}

// countingReader counts what was read through it. The count is atomic: a
// provider may still be reading an exec's stdin, at its end, as its Exec
// returns.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}
