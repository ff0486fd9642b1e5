// Package gobuildcache fills a cache of third-party programs that the tests
// need and that are built with the go command: one directory per program
// and version, outside the clone, so a build is paid for once per machine.
// Each directory is built in a temporary one and renamed into place, so a
// build cut short leaves nothing that counts as built, and builds of one
// cache are serialized with a lock file, so concurrent callers build once.
package gobuildcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Entry is one directory of a cache.
type Entry struct {
	// Dir is the entry's directory, named for what is built in it (its
	// version); it counts as built when it exists.
	Dir string
	// What says what is built, for the log and errors.
	What string
	// Build builds the entry into tmp, an empty directory that becomes
	// Dir when Build succeeds.
	Build func(ctx context.Context, tmp string) error
}

// Fill builds the entries whose directories are missing, one after
// another, under the lock root/.build.lock; entries that exist take no
// time. The temporary directories are made in root, so each rename into
// place is atomic.
func Fill(ctx context.Context, root string, log *slog.Logger, entries []Entry) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("create the cache %s: %w", root, err)
	}
	unlock, err := Lock(ctx, filepath.Join(root, ".build.lock"))
	if err != nil {
		return err
	}
	defer unlock()
	for _, e := range entries {
		if _, err := os.Stat(e.Dir); err == nil {
			continue
		}
		log.Info("building", "what", e.What, "into", e.Dir)
		start := time.Now()
		tmp, err := os.MkdirTemp(root, ".building-")
		if err != nil {
			return fmt.Errorf("build %s: %w", e.What, err)
		}
		if err := e.Build(ctx, tmp); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("build %s: %w", e.What, err)
		}
		// MkdirTemp made it private; what is cached is for everyone to
		// read and run (a sandbox's user, say).
		if err := os.Chmod(tmp, 0o755); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("build %s: %w", e.What, err)
		}
		if err := os.Rename(tmp, e.Dir); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("build %s: move it into the cache: %w", e.What, err)
		}
		log.Info("built", "what", e.What, "took", time.Since(start).Round(time.Second))
	}
	return nil
}

// Lock takes an exclusive flock on path, waiting for ctx; calling the
// returned func releases it.
func Lock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wait for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Go runs the go command with args in dir, env added to this process's,
// and returns its standard output; on failure, the error holds the end of
// its standard error.
func Go(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := stderr.String()
		if len(msg) > 4000 {
			msg = "…" + msg[len(msg)-4000:]
		}
		return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}
