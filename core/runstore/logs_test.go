package runstore

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A log is seen whole once kept, replaces the workflow's log before it,
// and goes, with what a dead host was writing, once it expired.
func TestLogs(t *testing.T) {
	dir := t.TempDir()
	l := NewLogs(dir)
	if _, _, err := l.Open("dev", "wf"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open before any log: %v, want ErrNotFound", err)
	}
	for _, content := range []string{"first", "second"} {
		w, err := l.Create("dev", "wf")
		if err != nil {
			t.Fatal(err)
		}
		w.WriteLine([]byte(content + " a"))
		if f, _, err := l.Open("dev", "wf"); err == nil {
			f.Close()
			if content == "first" {
				t.Error("a log being written is seen before it is kept")
			}
		}
		w.WriteLine([]byte(content + " b"))
		if err := w.Keep(); err != nil {
			t.Fatal(err)
		}
	}
	f, _, err := l.Open("dev", "wf")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "second a\nsecond b\n" {
		t.Errorf("the log: %q, want the second run's", b)
	}
	if st, err := os.Stat(filepath.Join(dir, "dev", "wf.jsonl")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the log's mode: %v, %v; want 0600", st, err)
	}
	if got := l.Find("wf"); !slices.Equal(got, []string{"dev"}) {
		t.Errorf("Find = %q", got)
	}

	// A host died while writing another run's log.
	dead, err := l.Create("dev", "dead")
	if err != nil {
		t.Fatal(err)
	}
	dead.WriteLine([]byte("x"))
	old := time.Now().Add(-LogRetention - time.Hour)
	for _, p := range []string{filepath.Join(dir, "dev", "wf.jsonl"), dead.f.Name()} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := l.Create("dev", "fresh")
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.Keep(); err != nil { // prunes
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "dev"))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"fresh.jsonl"}) {
		t.Errorf("after the expired logs went: %q, want only the fresh one", names)
	}
}

func TestLogsRefusePaths(t *testing.T) {
	l := NewLogs(t.TempDir())
	for _, n := range [][2]string{{"dev", "../x"}, {"..", "wf"}, {"dev", ".hidden"}, {"", "wf"}, {"dev", "a/b"}} {
		if _, err := l.Create(n[0], n[1]); err == nil {
			t.Errorf("Create(%q, %q) accepted", n[0], n[1])
		}
	}
}
