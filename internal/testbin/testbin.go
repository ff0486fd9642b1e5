// Package testbin builds the project's binaries for tests that run them as
// real processes: the amelia-worker that goes into sandboxes, and amelia.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// Main is the body of a TestMain whose tests run built binaries: build
// puts them into a fresh temporary directory (with BuildWorker or
// BuildAmelia), the tests run, the directory is removed, and the exit code
// is returned for os.Exit. A failed build fails the whole package, saying
// why.
func Main(m interface{ Run() int }, build func(dir string) error) int {
	dir, err := os.MkdirTemp("", "amelia-testbin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testbin:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	return m.Run()
}

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
	return build(filepath.Join(dir, "amelia-worker"), "./cmd/worker")
}

// BuildSandboxWorker builds amelia-worker into dir under the name amelia
// and its providers look for (amelia-worker-linux-GOARCH), and returns its
// path; with -race when the calling test binary is.
func BuildSandboxWorker(dir string) (string, error) {
	return build(filepath.Join(dir, workerbin.FileName(runtime.GOARCH)), "./cmd/worker")
}

// BuildAmelia builds amelia into dir, with amelia-providers (which
// serves the built-in providers) and the worker beside it
// (BuildSandboxWorker), and returns amelia's path. All are built with
// -race when the calling test binary is.
func BuildAmelia(dir string) (string, error) {
	if _, err := BuildSandboxWorker(dir); err != nil {
		return "", err
	}
	if _, err := build(filepath.Join(dir, "amelia-providers"), "./cmd/amelia-providers", HostTags); err != nil {
		return "", err
	}
	return build(filepath.Join(dir, "amelia"), "./cmd/amelia", HostTags)
}

// HostTags are the build tags of amelia and amelia-providers, as the
// Makefile builds them: grpcnotrace leaves out gRPC's request tracing
// (golang.org/x/net/trace and html/template), which amelia never turns on.
const HostTags = "grpcnotrace"

// build builds the package pkg of this module into out, with the build
// tags given: static, as the Makefile builds it, unless with -race, which
// needs cgo.
func build(out, pkg string, tags ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cgo := "CGO_ENABLED=0"
	if raceEnabled {
		args = append(args, "-race")
		cgo = "CGO_ENABLED=1"
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Env = append(os.Environ(), cgo)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %w", pkg, err)
	}
	return out, nil
}
