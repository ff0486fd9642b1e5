package workspace

import (
	"errors"
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

	good := bundleOf(t, agent, "refs/heads/amelia/x", "^"+base)
	ins, err := inspectBundle(ctx, host, good, "x", base, DefaultMaxResultBytes)
	if err != nil || ins.commits != 1 || ins.tip != gitT(t, agent, "rev-parse", "amelia/x") {
		t.Errorf("honest bundle: %+v, %v", ins, err)
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
}

// TestHostileResults: an agent that rewrites its branch to unrelated
// history, adds a gitlink, or produces too much, gets its result refused
// through the whole path; the host repo gains no ref.
func TestHostileResults(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newSynced(t)
	host, dir, sb, ws := s.host, s.dir, s.sb, s.ws
	refsBefore := refs(t, dir)
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
	}
}
