package driver_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// hostWorker is the content of the worker binary the tests install.
func hostWorker(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(workerDir, workerbin.FileName(runtime.GOARCH)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// homeOf is the local sandbox's $HOME.
func homeOf(sb *sandboxtest.Sandbox) string { return filepath.Join(filepath.Dir(sb.Workdir), "home") }

// installedOK checks that path holds the host worker, executable, and runs.
func installedOK(t *testing.T, sb *sandboxtest.Sandbox, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(b, hostWorker(t)) {
		t.Fatalf("%s does not hold the worker (%d bytes, %v)", path, len(b), err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode())
	}
	r := sb.Run(t, map[string]string{"GORACE": raceEnv}, nil, path, "version")
	if r.Status.Code != 0 || !strings.HasPrefix(r.Stdout, "amelia-worker ") {
		t.Errorf("%s version: %s", path, r)
	}
}

// The first EnsureWorker streams the worker in; the next ones find it by
// its sha256 and upload nothing; a damaged copy is replaced.
func TestEnsureWorker(t *testing.T) {
	sb := sandboxtest.New(t, "install")
	ex := &countingExecer{Execer: sb}
	in := &driver.Installer{Dirs: []string{t.TempDir(), workerDir}, Provider: "local"}

	path, err := in.EnsureWorker(t.Context(), ex, sdk.WorkerPlace{})
	if err != nil {
		t.Fatal(err)
	}
	prefix := homeOf(sb) + "/.amelia/bin/amelia-worker-"
	if !strings.HasPrefix(path, prefix) || len(path) != len(prefix)+16 {
		t.Errorf("installed at %s, want %s<16 hex digits>", path, prefix)
	}
	if n := ex.withStdin.Load(); n != 1 {
		t.Errorf("%d uploads, want 1", n)
	}
	installedOK(t, sb, path)

	ex.withStdin.Store(0)
	ex.execs.Store(0)
	again, err := in.EnsureWorker(t.Context(), ex, sdk.WorkerPlace{})
	if err != nil || again != path {
		t.Fatalf("second EnsureWorker = %s, %v; want %s", again, err, path)
	}
	if n := ex.withStdin.Load(); n != 0 {
		t.Errorf("%d uploads for a worker already there", n)
	}
	if n := ex.execs.Load(); n != 1 {
		t.Errorf("%d execs to find the worker there, want 1 (the probe, which hashes it)", n)
	}

	// Damage it (same size, so only the hash can tell).
	damaged := hostWorker(t)
	damaged[len(damaged)/2] ^= 0xff
	if err := os.WriteFile(path, damaged, 0o755); err != nil {
		t.Fatal(err)
	}
	ex.withStdin.Store(0)
	if again, err = in.EnsureWorker(t.Context(), ex, sdk.WorkerPlace{}); err != nil || again != path {
		t.Fatalf("EnsureWorker over a damaged copy = %s, %v", again, err)
	}
	if n := ex.withStdin.Load(); n != 1 {
		t.Errorf("%d uploads to replace a damaged copy, want 1", n)
	}
	installedOK(t, sb, path)
}

// Two runs starting at once on a fresh sandbox both install, and both
// succeed: each writes its own temporary file and renames it into place.
func TestEnsureWorkerConcurrent(t *testing.T) {
	sb := sandboxtest.New(t, "concurrent")
	in := &driver.Installer{Dirs: []string{workerDir}, Provider: "local"}
	const n = 3
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { paths[i], errs[i] = in.EnsureWorker(t.Context(), sb, sdk.WorkerPlace{}) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || paths[i] != paths[0] {
			t.Errorf("install %d: %s, %v", i, paths[i], errs[i])
		}
	}
	installedOK(t, sb, paths[0])
	entries, err := os.ReadDir(filepath.Dir(paths[0]))
	if err != nil || len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("install dir holds %v (%v), want the worker only", names, err)
	}
}

// A worker the provider put into the sandbox (a Docker image's) is used
// when its sha256 is the right one, and ignored when it is not.
func TestEnsureWorkerPreinstalled(t *testing.T) {
	sb := sandboxtest.New(t, "baked")
	baked := filepath.Join(t.TempDir(), "amelia-worker")
	stale := filepath.Join(t.TempDir(), "amelia-worker")
	if err := os.WriteFile(baked, hostWorker(t), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, []byte("an older build"), 0o755); err != nil {
		t.Fatal(err)
	}
	ex := &countingExecer{Execer: sb}
	in := &driver.Installer{Dirs: []string{workerDir}}
	place := sdk.WorkerPlace{Preinstalled: []string{"/nonexistent/amelia-worker", stale, baked}}
	path, err := in.EnsureWorker(t.Context(), ex, place)
	if err != nil || path != baked || ex.withStdin.Load() != 0 {
		t.Errorf("EnsureWorker = %s, %v with %d uploads; want the baked-in %s and none", path, err, ex.withStdin.Load(), baked)
	}

	path, err = in.EnsureWorker(t.Context(), ex, sdk.WorkerPlace{Preinstalled: []string{stale}})
	if err != nil || !strings.HasPrefix(path, homeOf(sb)) || ex.withStdin.Load() != 1 {
		t.Errorf("with a stale copy: %s, %v, %d uploads", path, err, ex.withStdin.Load())
	}
}

// A provider that names as preinstalled the path the installer would put
// the worker at anyway (or one path twice) has each hashed once.
func TestEnsureWorkerPreinstalledAtDest(t *testing.T) {
	sb := sandboxtest.New(t, "at-dest")
	in := &driver.Installer{Dirs: []string{workerDir}}
	path, err := in.EnsureWorker(t.Context(), sb, sdk.WorkerPlace{})
	if err != nil {
		t.Fatal(err)
	}
	var answer strings.Builder // the probe's: machine, directory, a line per path
	ex := execerFunc(func(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
		eio.Stdout = io.MultiWriter(eio.Stdout, &answer)
		return sb.Exec(ctx, req, eio)
	})
	got, err := in.EnsureWorker(t.Context(), ex, sdk.WorkerPlace{Preinstalled: []string{path, path}})
	if err != nil || got != path {
		t.Fatalf("EnsureWorker = %s, %v; want %s", got, err, path)
	}
	hashed := 0
	for _, l := range strings.Split(strings.TrimSpace(answer.String()), "\n")[2:] {
		if len(l) == 64 {
			hashed++
		}
	}
	if hashed != 1 {
		t.Errorf("the probe hashed %d files (%q), want %s once", hashed, answer.String(), path)
	}
}

// The provider's install directory is where the worker goes.
func TestEnsureWorkerPlaceDir(t *testing.T) {
	sb := sandboxtest.New(t, "placed")
	dir := filepath.Join(t.TempDir(), "sandbox-bin")
	in := &driver.Installer{Dirs: []string{workerDir}}
	path, err := in.EnsureWorker(t.Context(), sb, sdk.WorkerPlace{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != dir {
		t.Errorf("installed at %s, want it in %s", path, dir)
	}
	installedOK(t, sb, path)
}

// An architecture there is no worker for, and a missing host binary, are
// errors that say what to do.
func TestEnsureWorkerErrors(t *testing.T) {
	sb := sandboxtest.New(t, "errors")
	// The sandbox answers the probe as another machine would.
	machine := func(m string) sandboxexec.Execer {
		return execerFunc(func(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
			if len(req.Argv) >= 3 && strings.Contains(req.Argv[2], "$(uname -m)") {
				req.Argv = slices.Clone(req.Argv)
				req.Argv[2] = strings.Replace(req.Argv[2], "$(uname -m)", m, 1)
			}
			return sb.Exec(ctx, req, eio)
		})
	}
	in := &driver.Installer{Dirs: []string{workerDir}, Provider: "ssh"}
	_, err := in.EnsureWorker(t.Context(), machine("riscv64"), sdk.WorkerPlace{})
	if err == nil || !strings.Contains(err.Error(), `"riscv64" is not supported`) || !strings.Contains(err.Error(), "provider ssh") {
		t.Errorf("riscv64: %v", err)
	}

	other := map[string]string{"amd64": "aarch64", "arm64": "x86_64"}[runtime.GOARCH]
	dirs := []string{workerDir}
	_, err = in.EnsureWorker(t.Context(), machine(other), sdk.WorkerPlace{})
	want := "no " + workerbin.FileName(map[string]string{"aarch64": "arm64", "x86_64": "amd64"}[other]) + " in "
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "make build") {
		t.Errorf("%s with %v: %v, want %q", other, dirs, err, want)
	}

	// Binary overrides the lookup, whatever the architecture.
	in.Binary = filepath.Join(workerDir, workerbin.FileName(runtime.GOARCH))
	if _, err := in.EnsureWorker(t.Context(), machine(other), sdk.WorkerPlace{}); err != nil {
		t.Errorf("with Binary: %v", err)
	}
}
