package runstore

import (
	"os"
	"path/filepath"
	"testing"
)

// An export is written 0600 in a 0700 directory, read and removed only
// by its own path: a record naming another file is refused.
func TestExports(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "exports")
	e := NewExports(dir)
	p, err := e.Write("dev", "fix-1", []byte("# v2 git bundle\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "dev", "fix-1.bundle"); p != want {
		t.Errorf("path %s, want %s", p, want)
	}
	for path, mode := range map[string]os.FileMode{p: 0o600, filepath.Dir(p): 0o700 | os.ModeDir} {
		if st, err := os.Stat(path); err != nil || st.Mode() != mode {
			t.Errorf("%s: %v, want mode %v", path, err, mode)
		}
	}
	if b, err := e.Read(p); err != nil || string(b) != "# v2 git bundle\n" {
		t.Errorf("Read: %q, %v", b, err)
	}
	outside := filepath.Join(t.TempDir(), "x.bundle")
	os.WriteFile(outside, []byte("x"), 0o600)
	for _, bad := range []string{
		outside,
		filepath.Join(dir, "dev", "..", "..", "x.bundle"),
		filepath.Join(dir, "dev", "fix-1.json"),
		filepath.Join(dir, "fix-1.bundle"),
		filepath.Join(dir, "a", "b", "fix-1.bundle"),
		"dev/fix-1.bundle",
	} {
		if _, err := e.Read(bad); err == nil {
			t.Errorf("Read(%q) was not refused", bad)
		}
		if err := e.Remove(bad); err == nil {
			t.Errorf("Remove(%q) was not refused", bad)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a refused Remove removed %s: %v", outside, err)
	}
	for _, bad := range [][2]string{{"..", "x"}, {"dev", ".hidden"}, {"dev", "a/b"}} {
		if _, err := e.Write(bad[0], bad[1], nil); err == nil {
			t.Errorf("Write(%q, %q) was not refused", bad[0], bad[1])
		}
	}
	if err := e.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(p); err != nil {
		t.Errorf("removing a missing export: %v", err)
	}
}

// Updated is when the record was last written.
func TestUpdated(t *testing.T) {
	s := New(t.TempDir())
	if _, err := s.Updated("dev", "none"); err == nil {
		t.Error("Updated of no record: no error")
	}
	if err := s.Put(Record{Profile: "dev", Workflow: "wf", State: Kept}); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(filepath.Join(s.dir, "dev", "wf.json"))
	if got, err := s.Updated("dev", "wf"); err != nil || !got.Equal(st.ModTime()) {
		t.Errorf("Updated = %v, %v; want %v", got, err, st.ModTime())
	}
}
