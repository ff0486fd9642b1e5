package workspace

import (
	"bufio"
	"context"
	"encoding/binary"
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
	// Bytes is how much went over Exec stdin: the pack and its index (0
	// when the sandbox already had everything).
	Bytes int64
	// Commits is how many commits the pack carried.
	Commits  int
	Duration time.Duration
}

// SyncLocal brings src's base branch (and the dirty commit) into the
// sandbox's bare repo as a git pack with its index over Exec stdin (see
// sendPack), creating the repo when needed. The pack holds only what the
// sandbox lacks: the objects of the sandbox's ref tips that the host also
// has are excluded (^commit); the sandbox keeps every object it was ever
// given (its repo is never gc'd), so it has them all. In the bare repo
// the base lands on refs/heads/<branch>, the dirty commit on
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
			// The pack is made in the scratch repo, which sees the
			// user's objects through its alternate plus the new ones; the
			// refs to pack get their names there (it is ours to write).
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
		err = w.receive(ctx, nil, nil, refs)
	} else {
		revs := append([]string(nil), send...)
		for oid := range have {
			revs = append(revs, "^"+oid)
		}
		res.Commits, err = h.countCommits(ctx, dirtyEnv, revs)
		if err != nil {
			return Synced{}, fmt.Errorf("sync %s into sandbox: %w", h.Dir, err)
		}
		res.Bytes, err = w.sendPack(ctx, h, gitDir, revs, refs)
	}
	if err != nil {
		return Synced{}, fmt.Errorf("sync %s into sandbox: %w", h.Dir, err)
	}
	res.Duration = time.Since(start)
	w.log.Info("synced local repo", "repo", h.Dir, "branch", branch, "commit", commit,
		"bytes", res.Bytes, "commits", res.Commits, "duration", res.Duration)
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
// can be excluded from a pack.
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
// packed without adding a ref or an object to the user's repository.
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

// sendPack has host git write the objects revs select, from gitDir, as a
// pack with its index into a directory of its own, and streams both into
// the sandbox's receive step (workstep.Pack), returning the bytes sent.
// pack-objects names every object it writes, so its index comes at no
// cost, where the sandbox would have to inflate and hash every object
// again to make one (git index-pack, as `git bundle unbundle` runs it);
// the pack is not thin (no delta on an object left out), so it needs no
// fixing either. The options override the user's pack settings that would
// make it several packs or another kind of index. The pack, about the
// repository's size on a first sync, is written in the repository's git
// directory, on the disk that holds its objects already, rather than in
// the temporary directory, which may be memory (tmpfs); where the git
// directory cannot be written, in the temporary directory.
func (w *Workspace) sendPack(ctx context.Context, h *HostRepo, gitDir string, revs []string, refs []refTip) (int64, error) {
	tmp, err := os.MkdirTemp(h.CommonDir, "amelia-pack-")
	if err != nil {
		tmp, err = os.MkdirTemp("", "amelia-pack-")
	}
	if err != nil {
		return 0, fmt.Errorf("pack on the host: %w", err)
	}
	defer os.RemoveAll(tmp)
	var out strings.Builder
	in := strings.NewReader(strings.Join(revs, "\n") + "\n")
	if err := h.gitIO(ctx, []string{"GIT_DIR=" + gitDir}, in, &out, "pack-objects", "--revs", "--delta-base-offset",
		"--index-version=2", "--max-pack-size=0", "-q", filepath.Join(tmp, "pack")); err != nil {
		return 0, fmt.Errorf("pack on the host: %w", err)
	}
	name := strings.TrimSpace(out.String())
	if len(name) != 40 || strings.Trim(name, "0123456789abcdef") != "" {
		return 0, fmt.Errorf("pack on the host: git pack-objects named %q, not one SHA-1 pack (the sandbox's repository is SHA-1)", name)
	}
	idx, err := os.Open(filepath.Join(tmp, "pack-"+name+".idx"))
	if err != nil {
		return 0, fmt.Errorf("pack on the host: %w", err)
	}
	defer idx.Close()
	pack, err := os.Open(filepath.Join(tmp, "pack-"+name+".pack"))
	if err != nil {
		return 0, fmt.Errorf("pack on the host: %w", err)
	}
	defer pack.Close()
	p := workstep.Pack{Name: name}
	for _, f := range []struct {
		f    *os.File
		size *int64
	}{{idx, &p.IdxSize}, {pack, &p.PackSize}} {
		fi, err := f.f.Stat()
		if err != nil {
			return 0, fmt.Errorf("pack on the host: %w", err)
		}
		*f.size = fi.Size()
	}
	var head [12]byte
	if _, err := pack.ReadAt(head[:], 0); err != nil {
		return 0, fmt.Errorf("pack on the host: %w", err)
	}
	if binary.BigEndian.Uint32(head[8:]) == 0 {
		// Nothing the sandbox lacks: the refs alone.
		return 0, w.receive(ctx, nil, nil, refs)
	}
	cr := &countingReader{r: io.MultiReader(idx, pack)}
	if err := w.receive(ctx, &p, cr, refs); err != nil {
		return 0, err
	}
	return cr.n.Load(), nil
}

// receive runs in the sandbox under the lock: it creates the bare repo
// if needed, stores the pack p read from stdin (nil: none) and points
// refs at their commits; update-ref sets exactly the refs we name.
func (w *Workspace) receive(ctx context.Context, p *workstep.Pack, in io.Reader, refs []refTip) error {
	r := workstep.Receive{Root: w.root, Repo: w.RepoDir(), Pack: p}
	for _, t := range refs {
		r.Refs = append(r.Refs, workstep.RefTip{Name: t.name, Oid: t.oid})
	}
	return w.step(ctx, "", "receive the pack into the sandbox repo", r, in, nil)
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
