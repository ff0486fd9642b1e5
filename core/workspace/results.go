package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// DefaultMaxResultBytes bounds a result bundle unless the caller sets
// ResultOptions.MaxBytes.
const DefaultMaxResultBytes = 200 << 20

// ResultOptions tune FetchResult.
type ResultOptions struct {
	// MaxBytes is the largest bundle accepted; zero means
	// DefaultMaxResultBytes. Reading stops (and the exec is cancelled) as
	// soon as it is exceeded.
	MaxBytes int64
}

// Result is a workflow branch that reached the host repo.
type Result struct {
	Branch      string
	Commit      string
	Commits     int
	BundleBytes int64
	Duration    time.Duration
}

// FetchResult brings amelia/<id> back from the workflow's checkout in the
// sandbox into host as refs/heads/amelia/<id>. The sandbox streams `git
// bundle create - refs/heads/amelia/<id> ^<base.Commit>` over Exec stdout into memory (at
// most MaxBytes); the bundle is untrusted, so host git indexes and checks
// it in a quarantine before anything reaches the host repo (see
// inspectBundle). Then its pack moves into the host repo's objects and
// `git update-ref` creates the branch only if it does not exist: no other
// ref is touched, the checked-out branch least of all, and no hook runs.
// ErrNoChanges when the branch is still at base.Commit; ErrBranchExists when
// the host already has the branch; ErrRefused when the inspection fails.
func (w *Workspace) FetchResult(ctx context.Context, host *HostRepo, id string, base Base, opts ResultOptions) (Result, error) {
	start := time.Now()
	if err := ValidateWorkflowID(id); err != nil {
		return Result{}, err
	}
	br := Branch(id)
	if exists, err := host.BranchExists(ctx, br); err != nil {
		return Result{}, err
	} else if exists {
		return Result{}, fmt.Errorf("fetch %s into %s: %w (delete it or pick another --workflow)", br, host.Dir, ErrBranchExists)
	}
	max := opts.max()
	data, err := w.resultBundle(ctx, id, base, max)
	if err != nil {
		return Result{}, err
	}
	res, err := host.StoreBundle(ctx, data, id, base, opts)
	if err != nil {
		return Result{}, err
	}
	res.Duration = time.Since(start)
	w.log.Info("result fetched", "branch", res.Branch, "commit", res.Commit, "commits", res.Commits, "bundle_bytes", res.BundleBytes, "duration", res.Duration)
	return res, nil
}

func (o ResultOptions) max() int64 {
	if o.MaxBytes <= 0 {
		return DefaultMaxResultBytes
	}
	return o.MaxBytes
}

// ExportResult is the bundle of amelia/<id> relative to base.Commit, as
// FetchResult reads it from the workflow's checkout (at most
// opts.MaxBytes), for keeping on the host until StoreBundle brings it in:
// amelia gc's export of kept work. It checks the bundle's header (one
// ref, amelia/<id>); the full inspection is StoreBundle's. ErrNoChanges
// when the branch is still at base.Commit.
func (w *Workspace) ExportResult(ctx context.Context, id string, base Base, opts ResultOptions) ([]byte, error) {
	if err := ValidateWorkflowID(id); err != nil {
		return nil, err
	}
	data, err := w.resultBundle(ctx, id, base, opts.max())
	if err != nil {
		return nil, err
	}
	if err := CheckBundleHeader(data, id); err != nil {
		return nil, fmt.Errorf("export %s: %w", Branch(id), err)
	}
	return data, nil
}

// CheckBundleHeader says whether data looks like the bundle of
// amelia/<id>: a git bundle whose one ref is refs/heads/amelia/<id>.
func CheckBundleHeader(data []byte, id string) error {
	hdr, err := parseBundle(data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	want := "refs/heads/" + Branch(id)
	if len(hdr.refs) != 1 || hdr.refs[0].name != want {
		return fmt.Errorf("%w: the bundle must hold exactly the ref %s", ErrRefused, want)
	}
	return nil
}

// StoreBundle brings amelia/<id> into host from data, a bundle of it
// relative to base.Commit (FetchResult's, or one ExportResult kept): the
// bundle is untrusted and inspected in a quarantine first (see
// inspectBundle), then its pack moves into the host repo's objects and
// the branch is created, only if it does not exist. ErrBranchExists when
// the host has the branch; ErrRefused when the inspection fails.
func (h *HostRepo) StoreBundle(ctx context.Context, data []byte, id string, base Base, opts ResultOptions) (Result, error) {
	start := time.Now()
	if err := ValidateWorkflowID(id); err != nil {
		return Result{}, err
	}
	br := Branch(id)
	if exists, err := h.BranchExists(ctx, br); err != nil {
		return Result{}, err
	} else if exists {
		return Result{}, fmt.Errorf("fetch %s into %s: %w (delete it or pick another --workflow)", br, h.Dir, ErrBranchExists)
	}
	ins, err := inspectBundle(ctx, h, data, id, base.Commit, opts.max())
	if err != nil {
		return Result{}, fmt.Errorf("fetch %s: %w", br, err)
	}
	defer ins.discard()
	if err := h.storeResult(ctx, ins, br); err != nil {
		return Result{}, fmt.Errorf("fetch %s into %s: %w", br, h.Dir, err)
	}
	return Result{Branch: br, Commit: ins.tip, Commits: ins.commits, BundleBytes: int64(len(data)), Duration: time.Since(start)}, nil
}

// resultBundle streams the workflow branch out of its checkout in the
// sandbox (as the workflow's uid) as a bundle relative to base, reading at
// most max bytes.
func (w *Workspace) resultBundle(ctx context.Context, id string, base Base, max int64) ([]byte, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lw := &limitWriter{max: max, onOver: cancel}
	err := w.stepFor(ctx, id, "git bundle create", workstep.Bundle{Dir: w.WorktreeDir(id), Branch: Branch(id), Base: base.Commit}, nil, lw)
	if lw.over {
		return nil, fmt.Errorf("bring %s back: %w: the bundle exceeds %d bytes", Branch(id), ErrRefused, max)
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.code == 4 {
		return nil, fmt.Errorf("bring %s back: %w beyond %.12s", Branch(id), ErrNoChanges, base.Commit)
	}
	if err != nil {
		return nil, fmt.Errorf("bring %s back: %w", Branch(id), err)
	}
	return lw.buf.Bytes(), nil
}

// storeResult moves the inspected pack (with its index, checked by
// index-pack --strict already) from the quarantine into the host repo's
// objects, as receive-pack does after its checks, and creates
// refs/heads/<br> at the tip, refusing if it exists by then. The index
// moves last: git sees a pack by its index.
func (h *HostRepo) storeResult(ctx context.Context, ins inspection, br string) error {
	src := filepath.Join(ins.q.dir, "pack")
	dst := filepath.Join(h.CommonDir, "objects", "pack")
	for _, ext := range []string{".pack", ".rev", ".idx"} {
		name := ins.q.pack + ext
		if err := moveFile(filepath.Join(src, name), filepath.Join(dst, name)); err != nil {
			if ext == ".rev" && errors.Is(err, fs.ErrNotExist) {
				continue // git writes one where pack.writeReverseIndex says
			}
			return fmt.Errorf("store the result's objects: %w", err)
		}
	}
	ref := "refs/heads/" + br
	// The empty old value: create only, fail if the ref appeared meanwhile.
	if _, err := h.git(ctx, nil, "update-ref", "-m", "amelia: result of workflow", ref, ins.tip, ""); err != nil {
		if strings.Contains(err.Error(), "exists") {
			return fmt.Errorf("%w: %v", ErrBranchExists, err)
		}
		return err
	}
	return nil
}

// moveFile renames src to dst, unless dst exists already: a pack's name
// is the hash of its content.
func moveFile(src, dst string) error {
	if _, err := os.Lstat(src); err != nil {
		return err
	}
	if _, err := os.Lstat(dst); err == nil {
		return nil
	}
	return os.Rename(src, dst)
}

// limitWriter buffers up to max bytes; past that it drops the rest, marks
// itself over and calls onOver (which cancels the exec).
type limitWriter struct {
	buf    bytes.Buffer
	max    int64
	over   bool
	onOver func()
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.over {
		return len(p), nil
	}
	if int64(l.buf.Len())+int64(len(p)) > l.max {
		l.over = true
		l.onOver()
		return len(p), nil
	}
	return l.buf.Write(p)
}
