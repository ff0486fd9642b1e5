// Package workerbin finds the amelia-worker binaries that go into sandboxes
// on the host: static linux builds named amelia-worker-linux-ARCH, beside
// the amelia executable or in the directory AMELIA_WORKER_DIR names. Where
// a worker goes inside a sandbox is the provider's answer to EnsureRunning
// (sdk.WorkerPlace).
//
// It is part of the SDK's optional toolkit (see package toolkit), not of
// the provider contract.
package workerbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

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
// changes (by size and modification time): in memory, and beside the file
// (FILE.sha256, when its directory is writable), since hashing a worker
// takes longer than setting up a sandbox that already has it, and every
// amelia process would do it again. The zero value is ready; it is safe
// for concurrent use.
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
	if !ok {
		sum, ok = readSidecar(key)
	}
	if !ok {
		if sum, err = hashFile(path); err != nil {
			return "", 0, err
		}
		writeSidecar(key, sum)
	}
	s.mu.Lock()
	if s.sums == nil {
		s.sums = make(map[fileKey]string)
	}
	s.sums[key] = sum
	s.mu.Unlock()
	return sum, fi.Size(), nil
}

func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("worker binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash worker binary %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sidecarSuffix names the file beside a worker that keeps its sha256, as
// "SHA256 SIZE MTIME_UNIX_NANO": valid while the worker's size and
// modification time are those.
const sidecarSuffix = ".sha256"

func readSidecar(key fileKey) (string, bool) {
	b, err := os.ReadFile(key.path + sidecarSuffix)
	if err != nil {
		return "", false
	}
	f := strings.Fields(string(b))
	if len(f) != 3 || len(f[0]) != sha256.Size*2 || f[1] != strconv.FormatInt(key.size, 10) || f[2] != strconv.FormatInt(key.mtime, 10) {
		return "", false
	}
	if _, err := hex.DecodeString(f[0]); err != nil {
		return "", false
	}
	return f[0], true
}

// writeSidecar keeps sum beside the worker, replacing the file whole; a
// directory that cannot be written only means hashing again next time.
func writeSidecar(key fileKey, sum string) {
	tmp, err := os.CreateTemp(filepath.Dir(key.path), filepath.Base(key.path)+sidecarSuffix+".*")
	if err != nil {
		return
	}
	_, err = fmt.Fprintf(tmp, "%s %d %d\n", sum, key.size, key.mtime)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), key.path+sidecarSuffix)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}

// StampSuffix names the stamp a provider may put beside a worker it
// preinstalls in its sandboxes (sdk.WorkerPlace.Preinstalled): PATH +
// StampSuffix holds Stamp(sum, size). Where nothing but root could have
// written the worker and its stamp, the host takes the stamp for the
// worker's hash instead of hashing it at every run.
const StampSuffix = ".sha256"

// Stamp is the content of a preinstalled worker's stamp: its sha256 (hex)
// and its size in bytes.
func Stamp(sum string, size int64) []byte {
	return fmt.Appendf(nil, "%s %d\n", sum, size)
}
