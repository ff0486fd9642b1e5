package workspace

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
			if !isOID(oid) {
				return h, fmt.Errorf("bad prerequisite line %.60q", l)
			}
			h.prereqs = append(h.prereqs, oid)
		default:
			oid, name, ok := strings.Cut(l, " ")
			if !ok || !isOID(oid) || name == "" {
				return h, fmt.Errorf("bad ref line %.60q", l)
			}
			h.refs = append(h.refs, refTip{name: name, oid: oid})
		}
	}
}

// sha1Len is the length of a SHA-1 object id in bytes, the only object
// format parseBundle accepts.
const sha1Len = 20

// isOID reports whether s is a SHA-1 object id as git writes it: 40
// lower-case hex digits.
func isOID(s string) bool {
	return len(s) == 2*sha1Len && strings.Trim(s, "0123456789abcdef") == ""
}

// inspection is what inspectBundle learned, and the quarantine holding
// the bundle's objects, indexed: storeResult moves them into the host
// repo; discard removes what is left of them.
type inspection struct {
	tip     string
	commits int
	q       *quarantine
}

// discard removes the quarantine.
func (ins inspection) discard() {
	if ins.q != nil {
		ins.q.remove()
	}
}

// inspectBundle decides whether a result bundle may reach the host repo.
// The rules: exactly one ref, refs/heads/amelia/<id>; its commit is in the
// bundle and descends from base; every commit the bundle adds has parents
// that are in the bundle or are prerequisites the host has; no commit adds
// or changes a gitlink (mode 160000) or a .gitmodules file; the objects
// inflate to at most 8×max bytes (so a small bundle cannot be a zip bomb).
//
// How, the way git's receive-pack quarantines a push: the header is parsed
// here, and the pack's object headers are walked here (checkInflated)
// before git inflates anything. Then host git indexes the pack, with
// strict fsck, into a quarantine object directory of its own that borrows
// the host repo's objects (the bundle is thin: its deltas may be against
// objects of the prerequisites), and answers the rest there. Nothing is
// written to the host repo: the caller stores the result from the
// quarantine (inspection.q) or discards it. On a refusal the quarantine
// is gone already.
func inspectBundle(ctx context.Context, host *HostRepo, data []byte, id, base string, max int64) (_ inspection, err error) {
	refuse := func(format string, a ...any) (inspection, error) {
		return inspection{}, fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, a...))
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
	tip := hdr.refs[0].oid

	if err := checkInflated(hdr.pack, 8*max); err != nil {
		var over *inflateError
		if errors.As(err, &over) {
			return refuse("the bundle's %v", err)
		}
		return refuse("bad pack: %v", err)
	}
	missing, err := host.missingObjects(ctx, hdr.prereqs)
	if err != nil {
		return inspection{}, fmt.Errorf("look up the bundle's prerequisites: %w", err)
	}
	if len(missing) > 0 {
		return refuse("prerequisite %s is not in the host repo", missing[0])
	}

	q, err := host.newQuarantine()
	if err != nil {
		return inspection{}, err
	}
	defer func() {
		if err != nil {
			q.remove()
		}
	}()
	if err := q.indexPack(ctx, hdr.pack); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return refuse("bad pack: %v", err)
		}
		return inspection{}, fmt.Errorf("index the bundle's pack: %w", err)
	}
	// Every object the bundle's objects link to is in the bundle or the
	// host repo now: index-pack --strict checked.
	parents, err := q.bundleCommits(ctx, len(hdr.pack)-sha1Len)
	if err != nil {
		return inspection{}, fmt.Errorf("inspect the bundle: %w", err)
	}
	if _, ok := parents[tip]; !ok {
		return refuse("the branch's commit %s is not a new commit in the bundle", tip)
	}
	// Walk the new commits from the tip; what lies beyond them must be
	// prerequisites.
	prereq := map[string]bool{}
	for _, p := range hdr.prereqs {
		prereq[p] = true
	}
	seen := map[string]bool{tip: true}
	for queue := []string{tip}; len(queue) > 0; queue = queue[1:] {
		c := queue[0]
		for _, p := range parents[c] {
			if _, isNew := parents[p]; !isNew {
				if !prereq[p] {
					return refuse("commit %s has parent %s, neither in the bundle nor a prerequisite", c, p)
				}
			} else if !seen[p] {
				seen[p] = true
				queue = append(queue, p)
			}
		}
	}
	if _, err := q.git(ctx, nil, "merge-base", "--is-ancestor", base, tip); err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 1 {
			return inspection{}, fmt.Errorf("inspect the bundle: %w", err)
		}
		return refuse("%s does not descend from the base commit %.12s", want, base)
	}
	if c, why, err := q.firstGitlink(ctx, parents); err != nil {
		return inspection{}, fmt.Errorf("inspect the bundle: %w", err)
	} else if why != "" {
		return refuse("commit %.12s %s", c, why)
	}
	return inspection{tip: tip, commits: len(parents), q: q}, nil
}

// missingObjects returns those of oids the host repo does not have.
func (h *HostRepo) missingObjects(ctx context.Context, oids []string) ([]string, error) {
	if len(oids) == 0 {
		return nil, nil
	}
	var out strings.Builder
	in := strings.NewReader(strings.Join(oids, "\n") + "\n")
	if err := h.gitIO(ctx, nil, in, &out, "cat-file", "--batch-check=%(objectname)"); err != nil {
		return nil, err
	}
	var missing []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if oid, ok := strings.CutSuffix(l, " missing"); ok {
			missing = append(missing, oid)
		}
	}
	return missing, nil
}

// quarantine is a temporary object directory whose objects/info/alternates
// is the host repo's object directory: git run there (q.git) reads the
// host's objects and refs but writes objects only into the quarantine, and
// may write no ref (GIT_QUARANTINE_PATH).
type quarantine struct {
	host *HostRepo
	dir  string
	pack string // pack-<hash>, once indexPack has written it
}

// newQuarantine makes the directory in the host's object directory, where
// git's receive-pack keeps its own, so that its pack moves into the host
// repo by a rename (on the same file system). Where that directory cannot
// be written, the result could not be stored anyway.
func (h *HostRepo) newQuarantine() (*quarantine, error) {
	objects := filepath.Join(h.CommonDir, "objects")
	dir, err := os.MkdirTemp(objects, "amelia-quarantine-")
	if err != nil {
		return nil, fmt.Errorf("quarantine for the result: %w", err)
	}
	q := &quarantine{host: h, dir: dir}
	err = os.MkdirAll(filepath.Join(dir, "info"), 0o700)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "info", "alternates"), []byte(objects+"\n"), 0o600)
	}
	if err != nil {
		q.remove()
		return nil, fmt.Errorf("quarantine for the result: %w", err)
	}
	return q, nil
}

func (q *quarantine) remove() { os.RemoveAll(q.dir) }

// git runs host git in the quarantine, stdin (if not nil) as its input.
func (q *quarantine) git(ctx context.Context, stdin io.Reader, args ...string) (string, error) {
	var out strings.Builder
	env := []string{"GIT_OBJECT_DIRECTORY=" + q.dir, "GIT_QUARANTINE_PATH=" + q.dir}
	err := q.host.gitIO(ctx, env, stdin, &out, args...)
	return out.String(), err
}

// indexPack has git read the thin pack, complete it with the bases of its
// deltas from the host repo (--fix-thin, appended at its end), check every
// object as `fetch.fsckObjects` would and that every object it links to
// exists (--strict), and write it with its index into the quarantine.
func (q *quarantine) indexPack(ctx context.Context, pack []byte) error {
	out, err := q.git(ctx, bytes.NewReader(pack), "index-pack", "--stdin", "--fix-thin", "--strict")
	if err != nil {
		return err
	}
	kind, hash, _ := strings.Cut(strings.TrimSpace(out), "\t")
	if kind != "pack" || !isOID(hash) {
		return fmt.Errorf("git index-pack printed %.80q, not a SHA-1 pack's name", out)
	}
	q.pack = "pack-" + hash
	return nil
}

// bundleCommits maps each commit the bundle's pack holds to its parents.
// The objects index-pack appended to complete the pack, from the host
// repo, lie at packEnd (where the bundle's pack had its checksum) or
// after it, and are not the bundle's.
func (q *quarantine) bundleCommits(ctx context.Context, packEnd int) (map[string][]string, error) {
	idx, err := os.Open(filepath.Join(q.dir, "pack", q.pack+".idx"))
	if err != nil {
		return nil, err
	}
	defer idx.Close()
	out, err := q.git(ctx, idx, "show-index")
	if err != nil {
		return nil, err
	}
	var ids strings.Builder
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		if len(f) < 2 {
			return nil, fmt.Errorf("git show-index printed %.80q", l)
		}
		off, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("git show-index printed %.80q", l)
		}
		if off < int64(packEnd) {
			ids.WriteString(f[1] + "\n")
		}
	}
	out, err = q.git(ctx, strings.NewReader(ids.String()), "cat-file", "--batch-check=%(objecttype) %(objectname)")
	if err != nil {
		return nil, err
	}
	var commits strings.Builder
	for l := range strings.Lines(out) {
		if oid, ok := strings.CutPrefix(l, "commit "); ok {
			commits.WriteString(oid)
		}
	}
	parents := map[string][]string{}
	if commits.Len() == 0 {
		return parents, nil
	}
	out, err = q.git(ctx, strings.NewReader(commits.String()), "rev-list", "--no-walk=unsorted", "--parents", "--stdin")
	if err != nil {
		return nil, err
	}
	for l := range strings.Lines(out) {
		if f := strings.Fields(l); len(f) > 0 {
			parents[f[0]] = f[1:]
		}
	}
	return parents, nil
}

// firstGitlink diffs each commit of parents (commit → its parents) against
// its first parent (a root commit against the empty tree) in one git
// process, and returns the first commit that adds or changes a gitlink
// (a submodule) or a .gitmodules file, with what it does; why is empty
// when none does. The first parent suffices: a gitlink or .gitmodules no
// diff shows is one the first parent has already, so it comes, from first
// parent to first parent, from the host.
func (q *quarantine) firstGitlink(ctx context.Context, parents map[string][]string) (commit, why string, err error) {
	var in strings.Builder
	for c, ps := range parents {
		in.WriteString(c)
		if len(ps) > 0 {
			in.WriteString(" " + ps[0])
		}
		in.WriteString("\n")
	}
	// --ignore-submodules=none: the host's .gitmodules could otherwise
	// hide a submodule's changes from the diff.
	out, err := q.git(ctx, strings.NewReader(in.String()), "diff-tree", "--stdin", "-r", "--root", "-z",
		"--no-renames", "--ignore-submodules=none")
	if err != nil {
		return "", "", err
	}
	// -z: a commit's id, then per change ":<modes> <oids> <status>" and
	// its path, each NUL-terminated.
	f := strings.Split(out, "\x00")
	for i := 0; i < len(f); i++ {
		rec := f[i]
		if !strings.HasPrefix(rec, ":") {
			commit = rec
			continue
		}
		if i++; i == len(f) {
			return "", "", fmt.Errorf("git diff-tree printed %.80q without a path", rec)
		}
		path := f[i]
		fields := strings.Fields(rec)
		if len(fields) != 5 {
			return "", "", fmt.Errorf("git diff-tree printed %.80q", rec)
		}
		if fields[4] == "D" {
			continue
		}
		if fields[1] == "160000" {
			return commit, fmt.Sprintf("adds a gitlink (submodule) at %q", path), nil
		}
		if path == ".gitmodules" || strings.HasSuffix(path, "/.gitmodules") {
			return commit, fmt.Sprintf("adds or changes %q", path), nil
		}
	}
	return "", "", nil
}

// inflateError is a pack whose objects would inflate to more than allowed.
type inflateError struct {
	what  string
	limit int64
}

func (e *inflateError) Error() string {
	return fmt.Sprintf("%s inflate to more than %d bytes", e.what, e.limit)
}

// Pack object types (gitformat-pack(5)) that are deltas.
const (
	objOfsDelta = 6
	objRefDelta = 7
)

// checkInflated walks the pack's objects (gitformat-pack(5)) and fails
// with an *inflateError as soon as they would inflate to more than limit
// bytes: plain objects by the size in their header, before inflating
// them; deltas by their target size, in the first bytes of their data,
// before inflating the rest. Each object's data is inflated (and dropped)
// only to find the next object, and never past the size its header
// declares, so a pack that lies costs no more than one that does not;
// the deltas' own data is held to limit as well. Objects are not hashed
// and deltas not resolved: index-pack does that, after this.
func checkInflated(pack []byte, limit int64) error {
	if len(pack) < 12 || string(pack[:4]) != "PACK" {
		return errors.New("no pack signature")
	}
	if v := binary.BigEndian.Uint32(pack[4:]); v != 2 && v != 3 {
		return fmt.Errorf("pack version %d", v)
	}
	n := binary.BigEndian.Uint32(pack[8:])
	r := bytes.NewReader(pack[12:])
	var z zlibReader
	var total, deltas int64
	for i := range n {
		off := int64(len(pack) - r.Len())
		typ, size, err := objectHeader(r)
		if err != nil {
			return fmt.Errorf("object %d at %d: %w", i, off, err)
		}
		switch typ {
		case 1, 2, 3, 4: // commit, tree, blob, tag
			if total += size; total > limit {
				return &inflateError{"objects", limit}
			}
			err = z.inflate(r, size, nil)
		case objOfsDelta, objRefDelta:
			if typ == objOfsDelta {
				err = skipBaseOffset(r, off)
			} else if r.Len() < sha1Len {
				err = io.ErrUnexpectedEOF
			} else {
				_, err = r.Seek(sha1Len, io.SeekCurrent)
			}
			if err != nil {
				break
			}
			if deltas += size; deltas > limit {
				return &inflateError{"deltas", limit}
			}
			err = z.inflate(r, size, func(head []byte) error {
				target, err := deltaTargetSize(head)
				if err != nil {
					return err
				}
				if total += target; total > limit {
					return &inflateError{"objects", limit}
				}
				return nil
			})
		default:
			err = fmt.Errorf("object type %d", typ)
		}
		if err != nil {
			return fmt.Errorf("object %d at %d: %w", i, off, err)
		}
	}
	if r.Len() != sha1Len {
		return fmt.Errorf("%d bytes after the last object, want the %d-byte checksum", r.Len(), sha1Len)
	}
	return nil
}

// objectHeader reads a pack object's type and inflated size.
func objectHeader(r io.ByteReader) (typ byte, size int64, err error) {
	b, err := r.ReadByte()
	if err != nil {
		return 0, 0, io.ErrUnexpectedEOF
	}
	typ, size = b>>4&7, int64(b&0x0f)
	for shift := 4; b&0x80 != 0; shift += 7 {
		if shift > 56 {
			return 0, 0, errors.New("object size overflows")
		}
		if b, err = r.ReadByte(); err != nil {
			return 0, 0, io.ErrUnexpectedEOF
		}
		size |= int64(b&0x7f) << shift
	}
	return typ, size, nil
}

// skipBaseOffset reads an OFS_DELTA's base offset, which must point back
// into the pack from off, where the delta starts.
func skipBaseOffset(r io.ByteReader, off int64) error {
	b, err := r.ReadByte()
	if err != nil {
		return io.ErrUnexpectedEOF
	}
	rel := int64(b & 0x7f)
	for b&0x80 != 0 {
		if rel >= 1<<55 {
			return errors.New("delta base offset overflows")
		}
		if b, err = r.ReadByte(); err != nil {
			return io.ErrUnexpectedEOF
		}
		rel = (rel+1)<<7 | int64(b&0x7f)
	}
	if rel == 0 || rel > off-12 {
		return fmt.Errorf("delta base offset %d outside the pack", rel)
	}
	return nil
}

// zlibReader inflates pack objects' data, one zlib stream after another,
// with the same state.
type zlibReader struct{ zr io.ReadCloser }

// inflate reads one zlib stream from r, which must inflate to exactly size
// bytes, and leaves r just after it. head, when not nil, is given the
// first bytes (up to 20) before the rest is inflated, and may stop it.
func (z *zlibReader) inflate(r *bytes.Reader, size int64, head func([]byte) error) error {
	// A *bytes.Reader is an io.ByteReader: zlib reads no byte past the
	// stream's end.
	var err error
	if z.zr == nil {
		z.zr, err = zlib.NewReader(r)
	} else {
		err = z.zr.(zlib.Resetter).Reset(r, nil)
	}
	if err != nil {
		return err
	}
	short := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("inflates to fewer bytes than the %d its header says", size)
		}
		return err
	}
	rest := size
	if head != nil {
		b := make([]byte, min(size, 20))
		if _, err := io.ReadFull(z.zr, b); err != nil {
			return short(err)
		}
		if err := head(b); err != nil {
			return err
		}
		rest -= int64(len(b))
	}
	if _, err := io.CopyN(io.Discard, z.zr, rest); err != nil {
		return short(err)
	}
	// The stream ends here; zlib checks its checksum on the way.
	var one [1]byte
	switch _, err := io.ReadFull(z.zr, one[:]); err {
	case io.EOF:
		return nil
	case nil:
		return fmt.Errorf("inflates to more bytes than the %d its header says", size)
	default:
		return err
	}
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
