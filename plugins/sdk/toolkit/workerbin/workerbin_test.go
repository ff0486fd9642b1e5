package workerbin

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A worker's sha256 is kept beside it for the next process, and is
// trusted only while the worker's size and modification time are the
// ones it was taken at.
func TestSumsSidecar(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, FileName("amd64"))
	write := func(content string, mtime time.Time) string {
		if err := os.WriteFile(bin, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(bin, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(content))
		return hex.EncodeToString(h[:])
	}
	then := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := write("the worker", then)
	if sum, size, err := new(Sums).Sum(bin); err != nil || sum != want || size != 10 {
		t.Fatalf("first Sum: %s %d %v; want %s", sum, size, err, want)
	}
	if _, err := os.Stat(bin + sidecarSuffix); err != nil {
		t.Fatalf("no sidecar: %v", err)
	}
	// Same size and time, other bytes: a new process believes the sidecar
	// (which is what spares it the hashing).
	write("THE WORKER", then)
	if sum, _, _ := new(Sums).Sum(bin); sum != want {
		t.Errorf("a new Sums did not use the sidecar: %s", sum)
	}
	// A rebuilt worker (new time) is hashed again.
	rebuilt := write("THE WORKER", then.Add(time.Second))
	if sum, _, _ := new(Sums).Sum(bin); sum != rebuilt {
		t.Errorf("after a rebuild: %s, want %s", sum, rebuilt)
	}
	// A sidecar that is not one is ignored.
	if err := os.WriteFile(bin+sidecarSuffix, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if sum, _, _ := new(Sums).Sum(bin); sum != rebuilt {
		t.Errorf("with a garbled sidecar: %s, want %s", sum, rebuilt)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the directory holds %d files, want the worker and its sidecar", len(entries))
	}
}
