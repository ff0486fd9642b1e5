package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// Two runs of a 40 000-file repository on docker, one after the other in
// one sandbox: each brings its branch back on exactly its base, the
// second (of another workflow, on a base with a new commit and
// uncommitted changes) in the checkout the first parked; neither leaves
// a checkout, a workflow or a uid record behind, only the parked
// checkout, and its trash goes.
func TestRunLargeRepoOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"),
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("one.txt", "one\n")}},
		llmtest.Turn{Text: "Added one.txt."},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("two.txt", "two\n")}},
		llmtest.Turn{Text: "Added two.txt."},
	)
	const dirs, perDir = 400, 100
	for d := range dirs {
		dir := filepath.Join(h.repo, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range perDir {
			writeFile(t, filepath.Join(dir, fmt.Sprintf("f%03d.txt", f)), fmt.Sprintf("%d/%d\n", d, f))
		}
	}
	h.git(t, "add", "-A")
	h.git(t, "commit", "-q", "-m", "40 000 files")

	r := h.amelia(t, "run", "--json", "--workflow", "big-1", "Add one.txt.")
	if r.code != 0 {
		t.Fatalf("the first run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	base1 := h.git(t, "rev-parse", "main")
	if got := h.git(t, "rev-parse", "amelia/big-1^"); got != base1 {
		t.Errorf("amelia/big-1 starts from %s, want main at %s", got, base1)
	}
	if got := h.git(t, "diff", "--name-only", "main", "amelia/big-1"); got != "one.txt" {
		t.Errorf("amelia/big-1 changes %q, want one.txt", got)
	}
	// What a run leaves in the sandbox once the trash (its run
	// directory), which goes in the background, is gone.
	state := func() string {
		t.Helper()
		if w := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `cd /workspace/.amelia/parked && i=0 && while ls -d .trash-* >/dev/null 2>&1; do i=$((i + 1)); [ "$i" -lt 3000 ] || { echo "the trash is still there: $(ls -d .trash-*)" >&2; exit 1; }; sleep 0.1; done`); w.code != 0 {
			t.Fatalf("wait for the trash to go: exit %d: %s", w.code, w.stderr)
		}
		r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `cd /workspace || exit 1
for e in worktrees/* worktrees/.[!.]* .amelia/parked/* .amelia/parked/.[!.]*; do [ -e "$e" ] && echo "${e%%-*}"; done
echo "users $(ls .amelia/users | wc -l) parked $(ls .amelia/pool | grep -cx '[0-9]*')"
`)
		if r.code != 0 {
			t.Fatalf("look into the sandbox: exit %d: %s", r.code, r.stderr)
		}
		return strings.TrimSpace(r.stdout)
	}
	if got := state(); got != ".amelia/parked/.park\nusers 0 parked 1" {
		t.Errorf("the sandbox after the first run:\n%s\nwant one parked checkout and its pool record alone", got)
	}

	// The host moves on, and has uncommitted changes.
	writeFile(t, filepath.Join(h.repo, "d000", "f000.txt"), "changed\n")
	h.git(t, "commit", "-q", "-am", "change a file")
	writeFile(t, filepath.Join(h.repo, "d001", "f001.txt"), "uncommitted\n")
	writeFile(t, filepath.Join(h.repo, "untracked.txt"), "untracked\n")
	r = h.amelia(t, "run", "--json", "--include-dirty", "--workflow", "big-2", "Add two.txt.")
	if r.code != 0 {
		t.Fatalf("the second run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	base2 := h.git(t, "rev-parse", "main")
	if got := h.git(t, "rev-parse", "amelia/big-2~2"); got != base2 {
		t.Errorf("amelia/big-2 starts from %s, want main at %s under the uncommitted changes' commit", got, base2)
	}
	if got := h.git(t, "diff", "--name-only", "main", "amelia/big-2"); got != "d001/f001.txt\ntwo.txt\nuntracked.txt" {
		t.Errorf("amelia/big-2 changes %q, want the uncommitted changes and two.txt", got)
	}
	if got := h.git(t, "show", "amelia/big-2:d000/f000.txt"); got != "changed" {
		t.Errorf("d000/f000.txt on amelia/big-2: %q, want the new base's", got)
	}
	if got := h.git(t, "ls-tree", "-r", "--name-only", "amelia/big-2"); strings.Contains(got, "one.txt") || strings.Count(got, "\n")+1 != dirs*perDir+3 {
		t.Errorf("amelia/big-2 has %d files (one.txt among them: %v), want the base's %d and its two", strings.Count(got, "\n")+1, strings.Contains(got, "one.txt"), dirs*perDir+1)
	}
	if got := state(); got != ".amelia/parked/.park\nusers 0 parked 1" {
		t.Errorf("the sandbox after the second run:\n%s\nwant one parked checkout and its pool record alone", got)
	}
	ls := h.amelia(t, "sandbox", "ls", "--json")
	if ls.code != 0 || strings.Contains(ls.stdout, "big-") {
		t.Errorf("sandbox ls shows a workflow after both runs ended (exit %d):\n%s%s", ls.code, ls.stdout, ls.stderr)
	}
}
