package driver_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	coresandbox "github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// workerDir holds amelia-worker-linux-<this machine's arch>: the worker
// built for this machine by TestMain (with -race when the tests have it),
// as core/workerbin expects to find it beside amelia.
var workerDir string

// The test binary doubles as the local provider plugin (sandboxtest), so the
// tests reach the sandbox exactly as amelia does.
func TestMain(m *testing.M) {
	if sandboxtest.ServePlugin() {
		return
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// The plugin processes sandboxtest launches are this race-enabled test
	// binary, which would otherwise sleep a second as each one exits (the
	// Makefile sets the same).
	os.Setenv("GORACE", raceEnv)
	return testbin.Main(m, func(dir string) error {
		bin, err := testbin.BuildWorker(dir)
		if err != nil {
			return err
		}
		workerDir = filepath.Join(dir, "bin")
		if err := os.Mkdir(workerDir, 0o755); err != nil {
			return err
		}
		return os.Symlink(bin, filepath.Join(workerDir, workerbin.FileName(runtime.GOARCH)))
	})
}

// amelia run drives core/sandbox's sandboxes.
var _ sandboxexec.Execer = (*coresandbox.Sandbox)(nil)

// raceEnv keeps a race-enabled worker from sleeping a second at exit.
const raceEnv = "atexit_sleep_ms=0"

// countingExecer passes execs on to a sandbox and counts them, and those
// that carry stdin (uploads and file writes).
type countingExecer struct {
	sandboxexec.Execer
	execs, withStdin atomic.Int32
}

func (c *countingExecer) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	c.execs.Add(1)
	if eio.Stdin != nil {
		c.withStdin.Add(1)
	}
	return c.Execer.Exec(ctx, req, eio)
}

// execerFunc is an sandboxexec.Execer made of a function.
type execerFunc func(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error)

func (f execerFunc) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	return f(ctx, req, eio)
}

func (execerFunc) SandboxRef() sdk.SandboxRef { return sdk.SandboxRef{Name: "func"} }

// installWorker installs the test worker in sb and returns its path there.
func installWorker(t *testing.T, sb sandboxexec.Execer) string {
	t.Helper()
	in := &driver.Installer{Dirs: []string{workerDir}, Provider: "local"}
	path, err := in.EnsureWorker(t.Context(), sb, sdk.WorkerPlace{})
	if err != nil {
		t.Fatalf("EnsureWorker: %v", err)
	}
	return path
}

// realSandbox is a fresh local sandbox with the test worker installed.
type realSandbox struct {
	*sandboxtest.Sandbox
	worker string
}

func newRealSandbox(t *testing.T) realSandbox {
	t.Helper()
	sb := sandboxtest.New(t, "drv")
	return realSandbox{Sandbox: sb, worker: installWorker(t, sb)}
}

// driverFor is a Driver running the real worker in sb, pointed at srv as
// its proxy.
func (sb realSandbox) driverFor(srv *llmtest.Server) *driver.Driver {
	return &driver.Driver{
		Exec:     sb,
		Worker:   sb.worker,
		Provider: "local",
		Env: map[string]string{
			"AMELIA_PROXY_URL":   srv.URL(),
			"AMELIA_PROXY_TOKEN": "run-token-driver-test",
			"GORACE":             raceEnv,
		},
	}
}

// realDriver is a Driver running the real worker in a fresh local sandbox,
// pointed at srv as its proxy.
func realDriver(t *testing.T, srv *llmtest.Server) (*driver.Driver, *sandboxtest.Sandbox) {
	t.Helper()
	sb := newRealSandbox(t)
	return sb.driverFor(srv), sb.Sandbox
}

// workflowID is a fresh workflow id: /tmp is shared by every local
// sandbox on this machine, so each test names its own calls' files.
func workflowID(t *testing.T) string {
	b := make([]byte, 4)
	rand.Read(b)
	name := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	return name + "-" + hex.EncodeToString(b)
}

// callFilesScript lists, as seen inside the sandbox, the calls'
// directories (driver.FilePrefix*) and everything in them, one path a line.
const callFilesScript = `for d in "$1"*; do [ -e "$d" ] || continue; printf '%s\n' "$d"; find "$d" -mindepth 1 2>/dev/null; done; true`

// filesOf lists the calls' directories and files, as seen inside the
// sandbox, whose paths contain workflow.
func filesOf(t *testing.T, sb *sandboxtest.Sandbox, workflow string) []string {
	t.Helper()
	r := sb.Run(t, nil, nil, "sh", "-c", callFilesScript, "sh", driver.FilePrefix)
	if r.Status.Code != 0 {
		t.Fatalf("list %s*: %s", driver.FilePrefix, r)
	}
	var out []string
	for _, f := range strings.Fields(r.Stdout) {
		if strings.Contains(f, workflow) {
			out = append(out, f)
		}
	}
	return out
}

func noFilesLeft(t *testing.T, sb *sandboxtest.Sandbox, workflow string) {
	t.Helper()
	if left := filesOf(t, sb, workflow); len(left) > 0 {
		t.Errorf("files left in %s*: %v", driver.FilePrefix, left)
	}
}

// fakeWorker writes a shell script standing in for amelia-worker and
// returns its path (the local provider runs host processes, so the host
// path is the path inside the sandbox).
func fakeWorker(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-worker")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// pidFile is a file a fake worker writes its pid to.
func pidFile(t *testing.T) string { return filepath.Join(t.TempDir(), "pid") }

// assertGone checks that no process whose pid is in file still runs.
func assertGone(t *testing.T, file string) {
	t.Helper()
	for _, pid := range pids(t, file) {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the worker (pid %d) still runs (kill -0: %v)", pid, err)
		}
	}
}

// pids reads the pids fake workers wrote to file, one per start: at least
// one.
func pids(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the fake worker wrote no pid: %v", err)
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			t.Fatalf("pid file %q: %v", b, err)
		}
		out = append(out, pid)
	}
	if len(out) == 0 {
		t.Fatalf("the fake worker wrote no pid")
	}
	return out
}
