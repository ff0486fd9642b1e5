package worker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/internal/gittest"
)

// A pack and its index from host git's pack-objects are stored as they
// are: the repository reads the commit and its files at once, and the
// refs named are set. What was damaged, cut short or made longer on the
// way, or comes under another name, is refused, and leaves nothing in
// the repository's pack directory.
func TestReceivePack(t *testing.T) {
	src := t.TempDir()
	gittest.Git(t, src, "init", "-q", "-b", "main")
	for i, name := range []string{"a.txt", "b/c.txt"} {
		os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755)
		os.WriteFile(filepath.Join(src, name), []byte(strings.Repeat(name+"\n", 100*(i+1))), 0o644)
	}
	gittest.Git(t, src, "add", ".")
	gittest.Git(t, src, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
	base := strings.TrimSpace(gittest.Git(t, src, "rev-parse", "HEAD"))
	out := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "git", "pack-objects", "--revs", "--delta-base-offset", "--index-version=2", "-q", filepath.Join(out, "pack"))
	cmd.Dir, cmd.Env, cmd.Stdin = src, gittest.Env(t.TempDir()), strings.NewReader("main\n")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("pack-objects: %v", err)
	}
	name := strings.TrimSpace(string(b))
	idx, err1 := os.ReadFile(filepath.Join(out, "pack-"+name+".idx"))
	pack, err2 := os.ReadFile(filepath.Join(out, "pack-"+name+".pack"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	p := workstep.Pack{Name: name, IdxSize: int64(len(idx)), PackSize: int64(len(pack))}
	input := string(idx) + string(pack)
	flip := func(s string, i int) string { return s[:i] + string(s[i]^1) + s[i+1:] }
	other := strings.Repeat("0", 40)

	root := t.TempDir()
	repo := filepath.Join(root, "repo")
	ref := []workstep.RefTip{{Name: "refs/heads/main", Oid: base}}
	for _, tc := range []struct {
		name  string
		pack  workstep.Pack
		input string
		want  string
	}{
		{"a pack byte damaged", p, flip(input, len(idx)+len(pack)/2), "damaged in transfer"},
		{"an index byte damaged", p, flip(input, len(idx)/2), "damaged in transfer"},
		{"cut short", p, input[:len(input)-1], "the input ended"},
		{"more input", p, input + "x", "more input than"},
		{"sizes swapped", workstep.Pack{Name: name, IdxSize: p.PackSize, PackSize: p.IdxSize}, input, "store the pack"},
		{"another name", workstep.Pack{Name: other, IdxSize: p.IdxSize, PackSize: p.PackSize}, input, "not its name"},
		{"no name", workstep.Pack{Name: "../x", IdxSize: p.IdxSize, PackSize: p.PackSize}, input, "is not a pack's name"},
		{"too small", workstep.Pack{Name: name, IdxSize: 10, PackSize: p.PackSize}, input, "too small"},
	} {
		r := step(t, workstep.Receive{Root: root, Repo: repo, Pack: &tc.pack, Refs: ref}, tc.input)
		if r.code == 0 || !strings.Contains(string(r.stderr), tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want a failure with %q", tc.name, r.code, r.stderr, tc.want)
		}
		if ents, _ := os.ReadDir(filepath.Join(repo, "objects", "pack")); len(ents) != 0 {
			t.Errorf("%s: the pack directory holds %v, want nothing", tc.name, ents)
		}
	}

	if r := step(t, workstep.Receive{Root: root, Repo: repo, Pack: &p, Refs: ref}, input); r.code != 0 {
		t.Fatalf("receive: exit %d: %s", r.code, r.stderr)
	}
	for _, ext := range []string{".pack", ".idx"} {
		fi, err := os.Stat(filepath.Join(repo, "objects", "pack", "pack-"+name+ext))
		if err != nil || fi.Mode().Perm() != 0o444 {
			t.Errorf("pack-%s%s: %v %v, want a file of mode 0444", name, ext, fi, err)
		}
	}
	if got := gittest.Git(t, repo, "rev-parse", "main"); strings.TrimSpace(got) != base {
		t.Errorf("main is at %q, want %s", got, base)
	}
	if got := gittest.Git(t, repo, "show", "main:b/c.txt"); got != strings.TrimSpace(strings.Repeat("b/c.txt\n", 200)) {
		t.Errorf("b/c.txt from the pack: %.40q", got)
	}
	gittest.Git(t, repo, "fsck", "--strict")
}
