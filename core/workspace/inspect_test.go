package workspace

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// bundleOf makes a bundle of revs in repo with real git.
func bundleOf(t testing.TB, repo string, revs ...string) []byte {
	t.Helper()
	f := filepath.Join(t.TempDir(), "b.bundle")
	gitT(t, repo, append([]string{"bundle", "create", "-q", f}, revs...)...)
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInspectBundle: hostile bundles made with real git are refused with
// the reason, before anything reaches the host repo; an honest one passes.
func TestInspectBundle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, dir := newHostRepo(t)
	base := gitT(t, dir, "rev-parse", "main")
	agent := filepath.Join(t.TempDir(), "agent")
	gitT(t, dir, "clone", "-q", dir, agent)
	commit := func(branch, from, file string) {
		gitT(t, agent, "checkout", "-q", "-B", branch, from)
		writeFile(t, filepath.Join(agent, file), "content of "+file+"\n")
		gitT(t, agent, "add", "-A")
		gitT(t, agent, "commit", "-qm", "add "+file)
	}
	commit("amelia/x", base, "ok.txt")
	commit("amelia/y", base, "y.txt")
	commit("main", base, "main.txt")
	gitT(t, agent, "checkout", "-q", "--orphan", "amelia/orphan")
	gitT(t, agent, "commit", "-qm", "unrelated")
	gitT(t, agent, "checkout", "-q", "-B", "amelia/gitlink", "amelia/x")
	gitT(t, agent, "update-index", "--add", "--cacheinfo", "160000,"+base+",vendor/lib")
	gitT(t, agent, "commit", "-qm", "add a gitlink")
	commit("amelia/modules", "amelia/x", ".gitmodules")
	commit("amelia/nested-modules", "amelia/x", "sub/.gitmodules")
	// A gitlink added in an older commit of the branch, hidden under a
	// later harmless one.
	commit("amelia/deep", "amelia/gitlink", "later.txt")

	// 4 MiB of zeros compress to a few KiB: a small bundle, big objects.
	gitT(t, agent, "checkout", "-q", "-B", "amelia/bomb", base)
	writeFile(t, filepath.Join(agent, "zeros"), strings.Repeat("\x00", 4<<20))
	gitT(t, agent, "add", "-A")
	gitT(t, agent, "commit", "-qm", "zeros")
	bomb := bundleOf(t, agent, "refs/heads/amelia/bomb", "^"+base)
	if len(bomb) > 64<<10 {
		t.Fatalf("the zeros bundle is %d bytes", len(bomb))
	}

	// Merges: one of two honest branches; one whose side branch adds a
	// gitlink; one that adds a gitlink itself, in the merge commit.
	gitT(t, agent, "checkout", "-q", "-B", "amelia/merge", "amelia/x")
	gitT(t, agent, "merge", "-q", "--no-ff", "-m", "merge", "amelia/y")
	gitT(t, agent, "checkout", "-q", "-B", "side", base)
	gitT(t, agent, "update-index", "--add", "--cacheinfo", "160000,"+base+",side/lib")
	gitT(t, agent, "commit", "-qm", "a gitlink on the side")
	gitT(t, agent, "checkout", "-q", "-B", "amelia/merge-side", "amelia/x")
	gitT(t, agent, "merge", "-q", "--no-ff", "-m", "merge", "side")
	gitT(t, agent, "checkout", "-q", "-B", "amelia/evil-merge", "amelia/x")
	gitT(t, agent, "merge", "-q", "--no-ff", "--no-commit", "amelia/y")
	gitT(t, agent, "update-index", "--add", "--cacheinfo", "160000,"+base+",merge/lib")
	gitT(t, agent, "commit", "-qm", "merge, and a gitlink")

	// The host's own .gitmodules (here untracked) may tell git to ignore
	// a submodule's changes: the inspection must see them still.
	writeFile(t, filepath.Join(dir, ".gitmodules"), "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = ../lib\n\tignore = all\n")
	gitT(t, dir, "config", "diff.ignoreSubmodules", "all")
	before := gitDirFiles(t, host)

	good := bundleOf(t, agent, "refs/heads/amelia/x", "^"+base)
	xTip := gitT(t, agent, "rev-parse", "amelia/x")
	ins, err := inspectBundle(ctx, host, good, "x", base, DefaultMaxResultBytes)
	if err != nil || ins.commits != 1 || ins.tip != xTip {
		t.Errorf("honest bundle: %+v, %v", ins, err)
	}
	ins.discard()
	merge := bundleOf(t, agent, "refs/heads/amelia/merge", "^"+base)
	ins, err = inspectBundle(ctx, host, merge, "merge", base, DefaultMaxResultBytes)
	if err != nil || ins.commits != 3 || ins.tip != gitT(t, agent, "rev-parse", "amelia/merge") {
		t.Errorf("honest merge: %+v, %v", ins, err)
	}
	ins.discard()
	if after := gitDirFiles(t, host); !slices.Equal(after, before) {
		t.Errorf("inspecting honest bundles changed the host's git directory:\n%s", diffLines(before, after))
	}
	// amelia/z on top of amelia/x, bundled relative to amelia/x, which the
	// host never had.
	commit("amelia/z", "amelia/x", "z.txt")
	lacking := bundleOf(t, agent, "refs/heads/amelia/z", "^amelia/x")
	for _, tc := range []struct {
		name, says string
		id         string
		data       []byte
		max        int64
	}{
		{"two refs", "2 refs", "x", bundleOf(t, agent, "refs/heads/amelia/x", "refs/heads/amelia/y", "^"+base), 0},
		{"wrong ref name", `"refs/heads/main"`, "x", bundleOf(t, agent, "refs/heads/main", "^"+base), 0},
		{"another workflow's ref", `"refs/heads/amelia/y"`, "x", bundleOf(t, agent, "refs/heads/amelia/y", "^"+base), 0},
		{"a tag", `"refs/tags/amelia/x"`, "x", func() []byte {
			gitT(t, agent, "tag", "-f", "amelia/x", "amelia/x")
			return bundleOf(t, agent, "refs/tags/amelia/x", "^"+base)
		}(), 0},
		{"not descending from base", "does not descend", "orphan", bundleOf(t, agent, "refs/heads/amelia/orphan"), 0},
		{"gitlink", `gitlink (submodule) at "vendor/lib"`, "gitlink", bundleOf(t, agent, "refs/heads/amelia/gitlink", "^"+base), 0},
		{"gitlink deeper in history", `gitlink (submodule) at "vendor/lib"`, "deep", bundleOf(t, agent, "refs/heads/amelia/deep", "^"+base), 0},
		{".gitmodules", `".gitmodules"`, "modules", bundleOf(t, agent, "refs/heads/amelia/modules", "^"+base), 0},
		{"nested .gitmodules", `"sub/.gitmodules"`, "nested-modules", bundleOf(t, agent, "refs/heads/amelia/nested-modules", "^"+base), 0},
		{"over the size limit", "over the 100-byte limit", "x", good, 100},
		{"objects inflating past 8x the limit", "inflate to", "bomb", bomb, 64 << 10},
		{"not a bundle", "not a git bundle", "x", []byte("# v9 git bundle\n\nPACK"), 0},
		{"truncated header", "truncated", "x", good[:50], 0},
		{"truncated pack", "bad pack", "x", good[:len(good)-30], 0},
		{"prerequisite the host lacks", "not in the host repo", "z", lacking, 0},
		{"corrupt object in the pack", "bad pack", "x", flipByte(good, len(good)-25), 0},
		{"bad pack checksum", "bad pack", "x", flipByte(good, len(good)-1), 0},
		{"parent not a prerequisite", "neither in the bundle nor a prerequisite", "x", editHeader(t, good, func(h string) string {
			return strings.Join(slices.DeleteFunc(strings.Split(h, "\n"), func(l string) bool { return strings.HasPrefix(l, "-") }), "\n")
		}), 0},
		{"tip not in the bundle", "not a new commit in the bundle", "x", editHeader(t, good, func(h string) string {
			return strings.Replace(h, "\n"+xTip+" ", "\n"+base+" ", 1)
		}), 0},
		{"no objects", "not a new commit in the bundle", "x", func() []byte {
			h, _, _ := bytes.Cut(good, []byte("\n\n"))
			pack := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
			sum := sha1.Sum(pack)
			return slices.Concat(h, []byte("\n\n"), pack, sum[:])
		}(), 0},
		{"merge of a side branch with a gitlink", `gitlink (submodule) at "side/lib"`, "merge-side", bundleOf(t, agent, "refs/heads/amelia/merge-side", "^"+base), 0},
		{"merge commit adding a gitlink", `gitlink (submodule) at "merge/lib"`, "evil-merge", bundleOf(t, agent, "refs/heads/amelia/evil-merge", "^"+base), 0},
	} {
		max := tc.max
		if max == 0 {
			max = DefaultMaxResultBytes
		}
		_, err := inspectBundle(ctx, host, tc.data, tc.id, base, max)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: inspectBundle = %v, want ErrRefused saying %q", tc.name, err, tc.says)
		}
	}
	if after := gitDirFiles(t, host); !slices.Equal(after, before) {
		t.Errorf("refused bundles changed the host's git directory:\n%s", diffLines(before, after))
	}

	// Stored: the quarantined pack moves into the host, which then has
	// the branch, whole, and no quarantine left.
	ins, err = inspectBundle(ctx, host, merge, "merge", base, DefaultMaxResultBytes)
	if err != nil {
		t.Fatal(err)
	}
	err = host.storeResult(ctx, ins, "amelia/merge")
	ins.discard()
	if err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, dir, "rev-parse", "amelia/merge"); got != ins.tip {
		t.Errorf("stored branch at %s, want %s", got, ins.tip)
	}
	gitT(t, dir, "fsck", "--strict", "--no-dangling")
	if q, _ := filepath.Glob(filepath.Join(host.CommonDir, "objects", "amelia-quarantine-*")); len(q) > 0 {
		t.Errorf("quarantine left behind: %v", q)
	}
}

// gitDirFiles lists the files of the host's git directory with their
// sizes.
func gitDirFiles(t *testing.T, host *HostRepo) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(host.CommonDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, fmt.Sprintf("%s %d", path, fi.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// diffLines says which lines only a or only b has.
func diffLines(a, b []string) string {
	var out []string
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// flipByte returns a copy of b with the byte at i inverted.
func flipByte(b []byte, i int) []byte {
	c := slices.Clone(b)
	c[i] ^= 0xff
	return c
}

// editHeader returns a copy of bundle b with its header (without the empty
// line that ends it) rewritten by edit.
func editHeader(t *testing.T, b []byte, edit func(string) string) []byte {
	t.Helper()
	h, pack, ok := bytes.Cut(b, []byte("\n\n"))
	if !ok {
		t.Fatal("no bundle header")
	}
	return slices.Concat([]byte(edit(string(h))), []byte("\n\n"), pack)
}

// TestCheckInflated: hand-made packs whose objects lie about their sizes,
// or would inflate past the limit, are refused before they are inflated.
func TestCheckInflated(t *testing.T) {
	t.Parallel()
	const limit = 100
	refBase := make([]byte, sha1Len)
	blob := packObj(3, 50, nil, strings.Repeat("a", 50))
	for _, tc := range []struct {
		name string
		pack []byte
		says string // "" when the pack passes
	}{
		{"blob as declared", packOf(packObj(3, 5, nil, "hello")), ""},
		// A 50-byte blob and two deltas with 16-byte targets, one against
		// the blob by offset, one by id: 82 bytes in all.
		{"deltas within the limit", packOf(blob, packObj(objOfsDelta, 4, []byte{byte(len(blob))}, "\x32\x10ab"),
			packObj(objRefDelta, 3, refBase, "\x32\x10a")), ""},
		{"blob over the limit", packOf(packObj(3, 200, nil, strings.Repeat("a", 200))), "objects inflate to more than 100"},
		{"blob declaring a huge size, not inflated", packOf(packObj(3, 1<<40, nil, "x")), "objects inflate to more than 100"},
		{"blob larger than declared", packOf(packObj(3, 3, nil, "hello")), "more bytes than the 3"},
		{"blob smaller than declared", packOf(packObj(3, 10, nil, "hello")), "fewer bytes than the 10"},
		{"delta with a huge target", packOf(packObj(objRefDelta, 8, refBase, "\x05\x80\x80\x80\x80\x80\x20ab")), "objects inflate to more than 100"},
		{"delta data over the limit", packOf(packObj(objRefDelta, 200, refBase, "\x05\x05"+strings.Repeat("a", 198))), "deltas inflate to more than 100"},
		{"delta base before the pack", packOf(packObj(objOfsDelta, 4, []byte{0x40}, "\x32\x32ab")), "outside the pack"},
		{"truncated base id", slices.Concat(packOf()[:8], []byte{0, 0, 0, 1}, []byte{objRefDelta<<4 | 4}, refBase[:5]), "unexpected EOF"},
		{"bad object type", packOf(packObj(5, 5, nil, "hello")), "object type 5"},
		{"not zlib", slices.Concat(packOf()[:8], []byte{0, 0, 0, 1}, []byte{3<<4 | 5}, []byte("hello"), refBase), "zlib"},
		{"bytes after the objects", append(packOf(packObj(3, 5, nil, "hello")), 'x'), "21 bytes after the last object"},
		{"not a pack", []byte("KCAP\x00\x00\x00\x02\x00\x00\x00\x00"), "no pack signature"},
	} {
		err := checkInflated(tc.pack, limit)
		if tc.says == "" && err != nil || tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("%s: checkInflated = %v, want %q", tc.name, err, tc.says)
		}
	}
}

// packOf makes a pack of objects (made by packObj) with a checksum of
// zeros, which checkInflated does not check.
func packOf(objs ...[]byte) []byte {
	p := []byte("PACK\x00\x00\x00\x02")
	p = binary.BigEndian.AppendUint32(p, uint32(len(objs)))
	return slices.Concat(append(append([][]byte{p}, objs...), make([]byte, sha1Len))...)
}

// packObj encodes one pack object: its type and declared size, then base
// (a delta's base offset or id), then data, compressed.
func packObj(typ byte, size int64, base []byte, data string) []byte {
	b := []byte{typ<<4 | byte(size&0x0f)}
	for size >>= 4; size > 0; size >>= 7 {
		b[len(b)-1] |= 0x80
		b = append(b, byte(size&0x7f))
	}
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write([]byte(data))
	zw.Close()
	return slices.Concat(b, base, z.Bytes())
}

// TestHostileResults: an agent that rewrites its branch to unrelated
// history, adds a gitlink, or produces too much, gets its result refused
// through the whole path; the host repo gains no ref, no file.
func TestHostileResults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newSynced(t)
	host, dir, sb, ws := s.host, s.dir, s.sb, s.ws
	refsBefore, filesBefore := refs(t, dir), gitDirFiles(t, host)
	for _, tc := range []struct {
		id, agent, says string
		max             int64
	}{
		{"orphan", `git checkout -q --orphan tmp && git commit -qm unrelated && git update-ref "refs/heads/amelia/$1" HEAD`, "does not descend", 0},
		{"gitlink", `git update-index --add --cacheinfo "160000,$(git rev-parse HEAD),sub" && git commit -qm gitlink`, "gitlink", 0},
		{"big", `head -c 300000 /dev/urandom >big.bin && git add big.bin && git commit -qm big`, "exceeds 100000 bytes", 100000},
	} {
		wt, err := ws.AddWorktree(ctx, tc.id, s.Base)
		if err != nil {
			t.Fatal(err)
		}
		inSandbox(t, sb, agentGit+tc.agent, wt, tc.id)
		_, err = ws.FetchResult(ctx, host, tc.id, s.Base, ResultOptions{MaxBytes: tc.max})
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: FetchResult = %v, want ErrRefused saying %q", tc.id, err, tc.says)
		}
		if got := refs(t, dir); !slices.Equal(got, refsBefore) {
			t.Errorf("%s: host refs changed:\n%s", tc.id, strings.Join(got, "\n"))
		}
		if got := gitDirFiles(t, host); !slices.Equal(got, filesBefore) {
			t.Errorf("%s: host's git directory changed:\n%s", tc.id, diffLines(filesBefore, got))
		}
	}
}
