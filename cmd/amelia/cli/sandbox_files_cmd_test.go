package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/sandboxfs"
)

// sandbox ls PATH prints a directory as ls -l does, sizes aligned, and
// --json each entry's fields.
func TestPrintEntries(t *testing.T) {
	at := time.Date(2026, 11, 29, 8, 30, 0, 0, time.UTC)
	entries := []sandboxfs.Entry{
		{Name: "README.md", Type: "file", Mode: 0o644, Size: 1234, MTime: at, UID: 1000, GID: 1000},
		{Name: "bin", Type: "dir", Mode: 0o755, MTime: at, UID: 1000, GID: 1000},
		{Name: "current", Type: "symlink", Mode: 0o777, Size: 3, MTime: at, Target: "bin", UID: 1000, GID: 1000},
		{Name: "run.sh", Type: "file", Mode: 0o750, Size: 10485760, MTime: at.Add(-48 * time.Hour), UID: 1000, GID: 1000},
	}
	var got strings.Builder
	for _, asJSON := range []bool{false, true} {
		if err := printEntries(&got, entries, asJSON); err != nil {
			t.Fatal(err)
		}
	}
	if err := printEntries(&got, nil, true); err != nil {
		t.Fatal(err)
	}
	golden(t, "sandbox-ls-files", got.String())
}

// sandbox cp's sides: a leading ':' is the sandbox's, ':' alone its
// root.
func TestSandboxSide(t *testing.T) {
	for _, c := range []struct {
		in, want string
		in_      bool
	}{{":", ".", true}, {":src/", "src/", true}, {"./:x", "./:x", false}, {"dir", "dir", false}, {":/workspace/a", "/workspace/a", true}} {
		if got, in := sandboxSide(c.in); got != c.want || in != c.in_ {
			t.Errorf("sandboxSide(%q) = %q, %v; want %q, %v", c.in, got, in, c.want, c.in_)
		}
	}
}
