package worker_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// write-file makes its directory the user's alone and the file anew,
// 0600, with the step's input, replacing a leftover of a wider mode; it
// refuses a directory that is a link and a file not directly in it.
func TestStepWriteFile(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(root, "left")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, "prompt.txt"), []byte("an old, longer prompt"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, file string
		refused         string // what stderr says; "" when it writes
	}{
		{name: "a new directory", dir: filepath.Join(root, "new", "run"), file: "prompt.txt"},
		{name: "a leftover", dir: left, file: "prompt.txt"},
		{name: "a linked directory", dir: filepath.Join(root, "link"), file: "prompt.txt", refused: "is not a directory"},
		{name: "a file elsewhere", dir: root, file: "../x", refused: "is not a file directly in"},
		{name: "a relative directory", dir: "run", file: "prompt.txt", refused: "is not a file directly in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.dir + "/" + tc.file
			r := step(t, workstep.WriteFile{Dir: tc.dir, Path: path}, "the prompt\n")
			if tc.refused != "" {
				if r.code == 0 || !strings.Contains(string(r.stderr), tc.refused) {
					t.Errorf("exit %d, stderr %q; want a refusal saying %q", r.code, r.stderr, tc.refused)
				}
				if _, err := os.Stat(filepath.Join(elsewhere, "prompt.txt")); err == nil {
					t.Error("the file was written through the link")
				}
				return
			}
			if r.code != 0 {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "the prompt\n" {
				t.Errorf("the file holds %q (%v)", got, err)
			}
			for p, want := range map[string]os.FileMode{tc.dir: 0o700, path: 0o600} {
				if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
					t.Errorf("%s: %v %v, want mode %v", p, fi.Mode(), err, want)
				}
			}
		})
	}
}
