// Package workerbin finds the amelia-worker binaries that go into sandboxes:
// static linux builds named amelia-worker-linux-ARCH, beside the amelia
// executable or in the directory AMELIA_WORKER_DIR names.
package workerbin

import (
	"fmt"
	"os"
	"path/filepath"
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
