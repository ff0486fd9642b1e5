package workspace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/go-git/go-git/v5/utils/merkletrie"
)

// bundleHeader is a git bundle's text header (gitformat-bundle(5)).
type bundleHeader struct {
	prereqs []string
	refs    []refTip
	pack    []byte
}

// parseBundle splits a v2 or v3 bundle into its header and packfile. v3
// capabilities other than object-format=sha1 are refused (a filtered,
// partial bundle or sha256 is nothing amelia makes).
func parseBundle(data []byte) (bundleHeader, error) {
	var h bundleHeader
	r := bufio.NewReader(bytes.NewReader(data))
	line := func() (string, error) {
		s, err := r.ReadString('\n')
		if err != nil {
			return "", errors.New("truncated bundle header")
		}
		return strings.TrimSuffix(s, "\n"), nil
	}
	sig, err := line()
	if err != nil {
		return h, err
	}
	v3 := sig == "# v3 git bundle"
	if !v3 && sig != "# v2 git bundle" {
		return h, fmt.Errorf("not a git bundle (first line %.40q)", sig)
	}
	consumed := len(sig) + 1
	for {
		l, err := line()
		if err != nil {
			return h, err
		}
		consumed += len(l) + 1
		switch {
		case l == "":
			h.pack = data[consumed:]
			return h, nil
		case v3 && strings.HasPrefix(l, "@"):
			if l != "@object-format=sha1" {
				return h, fmt.Errorf("unsupported bundle capability %.60q", l)
			}
		case strings.HasPrefix(l, "-"):
			oid, _, _ := strings.Cut(l[1:], " ")
			if !plumbing.IsHash(oid) {
				return h, fmt.Errorf("bad prerequisite line %.60q", l)
			}
			h.prereqs = append(h.prereqs, oid)
		default:
			oid, name, ok := strings.Cut(l, " ")
			if !ok || !plumbing.IsHash(oid) || name == "" {
				return h, fmt.Errorf("bad ref line %.60q", l)
			}
			h.refs = append(h.refs, refTip{name: name, oid: oid})
		}
	}
}

// inspection is what inspectBundle learned.
type inspection struct {
	tip     string
	commits int
}

// inspectBundle decides whether a result bundle may reach the host repo.
// The rules: exactly one ref, refs/heads/amelia/<id>; its commit is in the
// bundle and descends from base; every commit the bundle adds has parents
// that are in the bundle or are prerequisites the host has; no commit adds
// or changes a gitlink (mode 160000) or a .gitmodules file; the objects
// inflate to at most 8×max bytes (so a small bundle cannot be a zip bomb).
//
// How: the header is parsed here; the pack is parsed by go-git into memory
// storage. The bundle is thin (its deltas may be against objects of the
// prerequisites), so the parser's storage is an overlay: objects from the
// pack go to memory, lookups fall back to the host repo's object store,
// read-only through go-git. Nothing is written to the host.
func inspectBundle(ctx context.Context, host *HostRepo, data []byte, id, base string, max int64) (inspection, error) {
	var ins inspection
	refuse := func(format string, a ...any) (inspection, error) {
		return ins, fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, a...))
	}
	if int64(len(data)) > max {
		return refuse("the bundle is %d bytes, over the %d-byte limit", len(data), max)
	}
	hdr, err := parseBundle(data)
	if err != nil {
		return refuse("%v", err)
	}
	want := "refs/heads/" + Branch(id)
	switch {
	case len(hdr.refs) != 1:
		return refuse("the bundle has %d refs, want exactly %s", len(hdr.refs), want)
	case hdr.refs[0].name != want:
		return refuse("the bundle's ref is %.100q, want %s", hdr.refs[0].name, want)
	}
	ins.tip = hdr.refs[0].oid

	if inflated, err := inflatedSize(hdr.pack); err != nil {
		return refuse("bad pack: %v", err)
	} else if inflated > 8*max {
		return refuse("the bundle's objects inflate to %d bytes, over %d", inflated, 8*max)
	}

	hostRepo, err := git.PlainOpenWithOptions(host.Dir, &git.PlainOpenOptions{EnableDotGitCommonDir: true})
	if err != nil {
		return ins, fmt.Errorf("open %s with go-git: %w", host.Dir, err)
	}
	prereq := map[plumbing.Hash]bool{}
	for _, p := range hdr.prereqs {
		h := plumbing.NewHash(p)
		if hostRepo.Storer.HasEncodedObject(h) != nil {
			return refuse("prerequisite %s is not in the host repo", p)
		}
		prereq[h] = true
	}
	mem := memory.NewStorage()
	ov := &overlay{Storage: mem, host: hostRepo.Storer}
	parser, err := packfile.NewParserWithStorage(packfile.NewScanner(bytes.NewReader(hdr.pack)), ov)
	if err != nil {
		return ins, err
	}
	if _, err := parser.Parse(); err != nil {
		return refuse("bad pack: %v", err)
	}
	if err := ctx.Err(); err != nil {
		return ins, err
	}

	tip := plumbing.NewHash(ins.tip)
	if _, ok := mem.Commits[tip]; !ok {
		return refuse("the branch's commit %s is not a new commit in the bundle", ins.tip)
	}
	// Walk the new commits from the tip; what lies beyond them must be
	// prerequisites, and one of them must be, or descend from, base.
	boundary := map[plumbing.Hash]bool{}
	seen := map[plumbing.Hash]bool{tip: true}
	for queue := []plumbing.Hash{tip}; len(queue) > 0; {
		c, err := object.GetCommit(ov, queue[0])
		queue = queue[1:]
		if err != nil {
			return refuse("commit: %v", err)
		}
		for _, p := range c.ParentHashes {
			if _, isNew := mem.Commits[p]; !isNew {
				if !prereq[p] {
					return refuse("commit %s has parent %s, neither in the bundle nor a prerequisite", c.Hash, p)
				}
				boundary[p] = true
			} else if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	if !boundary[plumbing.NewHash(base)] && !host.anyDescends(ctx, base, boundary) {
		return refuse("%s does not descend from the base commit %.12s", want, base)
	}
	for h := range mem.Commits {
		c, err := object.GetCommit(ov, h)
		if err != nil {
			return refuse("commit %s: %v", h, err)
		}
		if err := checkNoGitlinks(ov, c); err != nil {
			return refuse("commit %.12s %v", h, err)
		}
	}
	ins.commits = len(mem.Commits)
	return ins, nil
}

// anyDescends reports whether one of commits (host commits) has base as an
// ancestor; the host's own git answers, with its commit-graph.
func (h *HostRepo) anyDescends(ctx context.Context, base string, commits map[plumbing.Hash]bool) bool {
	for c := range commits {
		if _, err := h.git(ctx, nil, "merge-base", "--is-ancestor", base, c.String()); err == nil {
			return true
		}
	}
	return false
}

// checkNoGitlinks refuses a commit that, against its first parent, adds or
// changes a submodule entry or a .gitmodules file.
func checkNoGitlinks(s storer.EncodedObjectStorer, c *object.Commit) error {
	tree, err := c.Tree()
	if err != nil {
		return err
	}
	var parentTree *object.Tree
	if c.NumParents() > 0 {
		p, err := object.GetCommit(s, c.ParentHashes[0])
		if err != nil {
			return err
		}
		if parentTree, err = p.Tree(); err != nil {
			return err
		}
	}
	changes, err := object.DiffTree(parentTree, tree)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		a, err := ch.Action()
		if err != nil {
			return err
		}
		if a == merkletrie.Delete {
			continue
		}
		if ch.To.TreeEntry.Mode == filemode.Submodule {
			return fmt.Errorf("adds a gitlink (submodule) at %q", ch.To.Name)
		}
		if name := ch.To.Name; name == ".gitmodules" || strings.HasSuffix(name, "/.gitmodules") {
			return fmt.Errorf("adds or changes %q", name)
		}
	}
	return nil
}

// inflatedSize sums what the pack's objects inflate to: plain objects by
// their header, deltas by the target size at the start of their data. It
// inflates only delta data, in a first pass that keeps nothing.
func inflatedSize(pack []byte) (int64, error) {
	sc := packfile.NewScanner(bytes.NewReader(pack))
	_, n, err := sc.Header()
	if err != nil {
		return 0, err
	}
	var total int64
	for range n {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return 0, err
		}
		if !oh.Type.IsDelta() {
			total += oh.Length
			if _, _, err := sc.NextObject(io.Discard); err != nil {
				return 0, err
			}
			continue
		}
		var head prefixWriter
		if _, _, err := sc.NextObject(&head); err != nil {
			return 0, err
		}
		target, err := deltaTargetSize(head.b)
		if err != nil {
			return 0, err
		}
		total += target
	}
	return total, nil
}

// deltaTargetSize reads a delta's two leading varints (source size, target
// size) and returns the target size.
func deltaTargetSize(b []byte) (int64, error) {
	var sizes [2]int64
	for i := range sizes {
		var v int64
		for shift := 0; ; shift += 7 {
			if len(b) == 0 || shift > 56 {
				return 0, errors.New("bad delta header")
			}
			v |= int64(b[0]&0x7f) << shift
			cont := b[0]&0x80 != 0
			b = b[1:]
			if !cont {
				break
			}
		}
		sizes[i] = v
	}
	return sizes[1], nil
}

// prefixWriter keeps the first 20 bytes written to it.
type prefixWriter struct{ b []byte }

func (p *prefixWriter) Write(d []byte) (int, error) {
	if room := 20 - len(p.b); room > 0 {
		p.b = append(p.b, d[:min(room, len(d))]...)
	}
	return len(d), nil
}

// overlay is go-git object storage that writes to memory and reads from
// memory, then the host repo.
type overlay struct {
	*memory.Storage
	host storer.EncodedObjectStorer
}

func (o *overlay) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, err := o.Storage.EncodedObject(t, h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return o.host.EncodedObject(t, h)
	}
	return obj, err
}

func (o *overlay) HasEncodedObject(h plumbing.Hash) error {
	if o.Storage.HasEncodedObject(h) == nil {
		return nil
	}
	return o.host.HasEncodedObject(h)
}

func (o *overlay) EncodedObjectSize(h plumbing.Hash) (int64, error) {
	if n, err := o.Storage.EncodedObjectSize(h); err == nil {
		return n, nil
	}
	return o.host.EncodedObjectSize(h)
}
