// Package testbin builds the project's binaries for tests that run them as
// real processes: the amelia-worker that goes into sandboxes.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// moduleRoot is the repository root, found from this file's location.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("testbin: cannot locate the module root")
	}
	return filepath.Join(filepath.Dir(file), "..", ".."), nil
}

// BuildWorker builds amelia-worker for this machine into dir and returns its
// path. It is built with -race when the calling test binary is, so races in
// the worker fail the tests that run it. Call it once, from TestMain.
func BuildWorker(dir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "amelia-worker")
	args := []string{"build", "-o", out}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "./cmd/worker")...)
	build.Dir = root
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("build amelia-worker: %w", err)
	}
	return out, nil
}
