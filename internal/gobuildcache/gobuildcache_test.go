package gobuildcache

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestFill(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	write := func(n *atomic.Int32) func(context.Context, string) error {
		return func(_ context.Context, tmp string) error {
			n.Add(1)
			return os.WriteFile(filepath.Join(tmp, "bin"), []byte("x"), 0o755)
		}
	}

	t.Run("builds only what is missing", func(t *testing.T) {
		root := t.TempDir()
		var a, b atomic.Int32
		entries := []Entry{{Dir: filepath.Join(root, "a-v1"), What: "a", Build: write(&a)}, {Dir: filepath.Join(root, "b-v1"), What: "b", Build: write(&b)}}
		if err := os.MkdirAll(entries[0].Dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Fill(ctx, root, log, entries); err != nil {
			t.Fatal(err)
		}
		if a.Load() != 0 || b.Load() != 1 {
			t.Errorf("built a %d and b %d times, want 0 and 1", a.Load(), b.Load())
		}
		if _, err := os.Stat(filepath.Join(entries[1].Dir, "bin")); err != nil {
			t.Errorf("b's build is not in its entry: %v", err)
		}
		if fi, err := os.Stat(entries[1].Dir); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("b's entry: %v, %v; want it readable by all (0755)", fi.Mode(), err)
		}
	})

	t.Run("a failed build leaves nothing", func(t *testing.T) {
		root := t.TempDir()
		dir := filepath.Join(root, "a-v1")
		err := Fill(ctx, root, log, []Entry{{Dir: dir, What: "a", Build: func(_ context.Context, tmp string) error {
			os.WriteFile(filepath.Join(tmp, "half"), nil, 0o644)
			return errors.New("compiler broke")
		}}})
		if err == nil || !strings.Contains(err.Error(), "build a: compiler broke") {
			t.Fatalf("Fill: %v, want the build's error", err)
		}
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if e.Name() != ".build.lock" {
				t.Errorf("left %s in the cache", e.Name())
			}
		}
	})

	t.Run("concurrent fills build once", func(t *testing.T) {
		root := t.TempDir()
		var n atomic.Int32
		entries := []Entry{{Dir: filepath.Join(root, "a-v1"), What: "a", Build: write(&n)}}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() { errs <- Fill(ctx, root, log, entries) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if n.Load() != 1 {
			t.Errorf("built %d times, want 1", n.Load())
		}
	})
}

func TestGoReportsStderr(t *testing.T) {
	_, err := Go(context.Background(), t.TempDir(), nil, "no-such-subcommand")
	if err == nil || !strings.Contains(err.Error(), "go no-such-subcommand") || !strings.Contains(err.Error(), "unknown command") {
		t.Fatalf("Go: %v, want the command and its stderr", err)
	}
}
