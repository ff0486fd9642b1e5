// Package workerbin finds the amelia-worker binaries that go into sandboxes:
// static linux builds named amelia-worker-linux-ARCH, beside the amelia
// executable or in the directory AMELIA_WORKER_DIR names.
package workerbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// BinDirEnv names the directory of a sandbox that workers are installed in,
// when its provider sets it in the commands' environment (the SSH
// provider: the sandbox's bin/); otherwise they go to $HOME/.amelia/bin.
const BinDirEnv = "AMELIA_BIN_DIR"

// Arches are the sandbox architectures a worker is built for.
func Arches() []string { return []string{"amd64", "arm64"} }

// FileName is the worker binary's name for a linux architecture.
func FileName(arch string) string { return "amelia-worker-linux-" + arch }

// Dirs are the places to look, in order: workerDir (AMELIA_WORKER_DIR) when
// set, else the directory of the amelia executable self.
func Dirs(workerDir, self string) []string {
	if workerDir != "" {
		return []string{workerDir}
	}
	return []string{filepath.Dir(self)}
}

// Find returns the path of the worker for arch.
func Find(dirs []string, arch string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, FileName(arch))
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s in %v: run `make build`, or set AMELIA_WORKER_DIR to the directory holding it", FileName(arch), dirs)
}

// Sums hashes worker binaries, keeping each file's sha256 until the file
// changes (by size and modification time). The zero value is ready; it is
// safe for concurrent use.
type Sums struct {
	mu   sync.Mutex
	sums map[fileKey]string
}

// fileKey identifies a version of a file for the cache.
type fileKey struct {
	path  string
	size  int64
	mtime int64 // UnixNano
}

// Sum returns the hex sha256 of the file at path and its size.
func (s *Sums) Sum(path string) (string, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, fmt.Errorf("worker binary: %w", err)
	}
	key := fileKey{path: path, size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	s.mu.Lock()
	sum, ok := s.sums[key]
	s.mu.Unlock()
	if ok {
		return sum, fi.Size(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", 0, fmt.Errorf("worker binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", 0, fmt.Errorf("hash worker binary %s: %w", path, err)
	}
	sum = hex.EncodeToString(h.Sum(nil))
	s.mu.Lock()
	if s.sums == nil {
		s.sums = make(map[fileKey]string)
	}
	s.sums[key] = sum
	s.mu.Unlock()
	return sum, fi.Size(), nil
}
