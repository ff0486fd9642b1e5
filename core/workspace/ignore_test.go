package workspace

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
)

// What a project's tests leave in the checkout stays out of the branch,
// whoever commits — CommitAll or the agent itself — and CommitAll names
// it; what the repository tracks under those names, or brings back in its
// own .gitignore, still goes in, and what the repository ignores itself
// is not named. Without the patterns, everything goes in.
func TestBuildOutputsStayOutOfTheBranch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ignore  []string
		leftOut []string // CommitAll's, in order
		absent  []string // paths not on the branch
		present []string
	}{
		{
			name:    "default",
			ignore:  BuildOutputs(),
			leftOut: []string{".pytest_cache/", "__pycache__/", "agent/__pycache__/", "node_modules/", "pkg/"}, // pkg/ holds only outputs
			absent:  []string{"__pycache__/m.cpython-311.pyc", "pkg/__pycache__/n.cpython-311.pyc", "node_modules/x/index.js", ".pytest_cache/v", "dist/out.bin", "agent/__pycache__/a.pyc"},
			present: []string{"lib/__pycache__/tracked.pyc", "src/new.py", ".cache/keep", "agent/a.py"},
		},
		{
			name:    "opted out",
			absent:  []string{"dist/out.bin"},
			present: []string{"__pycache__/m.cpython-311.pyc", "pkg/__pycache__/n.cpython-311.pyc", "node_modules/x/index.js", "lib/__pycache__/tracked.pyc", "src/new.py", "agent/__pycache__/a.pyc"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			host, dir := newHostRepo(t)
			// The repository tracks one .pyc (its choice), ignores dist/,
			// and brings .cache/ back.
			writeFile(t, filepath.Join(dir, "lib", "__pycache__", "tracked.pyc"), "v1")
			writeFile(t, filepath.Join(dir, ".gitignore"), "dist/\n!.cache/\n")
			gitT(t, dir, "add", "-f", "lib/__pycache__/tracked.pyc", ".gitignore")
			gitT(t, dir, "commit", "-q", "-m", "tracked outputs")
			sb := sandboxtest.New(t, "ws")
			ws, err := New(sb, sb.Workdir, Options{Worker: workerBin, Ignore: tc.ignore})
			if err != nil {
				t.Fatal(err)
			}
			synced, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
			if err != nil {
				t.Fatal(err)
			}
			id := "outputs-1"
			wt, err := ws.AddWorktree(ctx, id, synced.Base)
			if err != nil {
				t.Fatal(err)
			}
			// The agent commits some work itself, after running tests.
			inSandbox(t, sb, agentGit+`mkdir -p agent/__pycache__ && echo x >agent/a.py && echo c >agent/__pycache__/a.pyc
git add -A && git commit -qm "agent commit"`, wt)
			// Then leaves more, uncommitted.
			inSandbox(t, sb, `cd "$1"
mkdir -p __pycache__ pkg/__pycache__ node_modules/x .pytest_cache dist .cache src
echo c >__pycache__/m.cpython-311.pyc; echo c >pkg/__pycache__/n.cpython-311.pyc
echo js >node_modules/x/index.js; echo v >.pytest_cache/v; echo bin >dist/out.bin
echo keep >.cache/keep; echo 'print(1)' >src/new.py; echo v2 >lib/__pycache__/tracked.pyc`, wt)
			c, err := ws.CommitAll(ctx, id, "run the tests")
			if err != nil || !c.Committed {
				t.Fatalf("CommitAll = %+v, %v", c, err)
			}
			if !slices.Equal(c.LeftOut, tc.leftOut) {
				t.Errorf("CommitAll left out %q, want %q", c.LeftOut, tc.leftOut)
			}
			files := strings.Split(inSandbox(t, sb, `git -C "$1" ls-tree -r --name-only HEAD`, wt), "\n")
			for _, f := range tc.absent {
				if slices.Contains(files, f) {
					t.Errorf("%s is on the branch", f)
				}
			}
			for _, f := range tc.present {
				if !slices.Contains(files, f) {
					t.Errorf("%s is not on the branch: %q", f, files)
				}
			}
			if got := inSandbox(t, sb, `git -C "$1" show HEAD:lib/__pycache__/tracked.pyc`, wt); got != "v2" {
				t.Errorf("the tracked .pyc on the branch: %q, want the agent's change", got)
			}
		})
	}
}

// A pattern that would break the exclude file's lines is refused.
func TestIgnorePatternsAreLines(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "  ", "a\nb", "x\x00"} {
		if _, err := New(nil, "/w", Options{Ignore: []string{p}}); err == nil {
			t.Errorf("pattern %q accepted", p)
		}
	}
}

// What the repository ignores itself is not named left out, however much
// it ignores; what is named is bounded.
func TestIgnoredLeftOutIsBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		gitignore string
		leftOut   int // how many CommitAll names
	}{
		// The repository ignores more than maxLeftOut paths, among them
		// all that ours do, and more paths than ours before the last.
		{name: "theirs", gitignore: "*.tmp\n*.log\nnode_modules/\n", leftOut: 0},
		{name: "ours", gitignore: "*.tmp\n", leftOut: maxLeftOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			host, dir := newHostRepo(t)
			writeFile(t, filepath.Join(dir, ".gitignore"), tc.gitignore)
			gitT(t, dir, "add", ".gitignore")
			gitT(t, dir, "commit", "-q", "-m", "ignore")
			sb := sandboxtest.New(t, "ws")
			ws, err := New(sb, sb.Workdir, Options{Worker: workerBin, Ignore: []string{"node_modules/", "*.log"}})
			if err != nil {
				t.Fatal(err)
			}
			synced, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
			if err != nil {
				t.Fatal(err)
			}
			id := "bounded-1"
			wt, err := ws.AddWorktree(ctx, id, synced.Base)
			if err != nil {
				t.Fatal(err)
			}
			inSandbox(t, sb, `cd "$1" && i=0
while [ $i -le $2 ]; do echo l >a$i.log; echo t >a$i.tmp; i=$((i+1)); done
mkdir node_modules && echo js >node_modules/index.js && echo new >new.txt`, wt, strconv.Itoa(maxLeftOut))
			c, err := ws.CommitAll(ctx, id, "build")
			if err != nil || !c.Committed {
				t.Fatalf("CommitAll = %+v, %v", c, err)
			}
			if len(c.LeftOut) != tc.leftOut {
				t.Errorf("CommitAll left out %d paths, want %d: %q", len(c.LeftOut), tc.leftOut, c.LeftOut)
			}
		})
	}
}
