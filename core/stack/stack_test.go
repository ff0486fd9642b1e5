package stack_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// These tests open stacks over the local provider, served in this
// process through the sandbox.Opener seam, with the real worker.

var workerBin string

func TestMain(m *testing.M) {
	if sandboxtest.ServePlugin() {
		return
	}
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerBin, err = testbin.BuildWorker(dir)
		return err
	}))
}

// dying is a provider whose plugin the test says died.
type dying struct {
	sdk.Provider
	dead *atomic.Bool
}

func (d dying) Exited() bool { return d.dead.Load() }

type fixture struct {
	open    *sandboxtest.Opener
	host    stack.Host
	profile *config.Profile
	dead    atomic.Bool // the provider opened last died
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	path := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "profiles:\n  t:\n    sandbox: {provider: local, local: {root: " + root + "}}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Options{Path: path, LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	p, err := cfg.Profile("t")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{open: &sandboxtest.Opener{Roots: map[string]string{"local": root}}, profile: p}
	f.open.Wrap = func(_ string, p sdk.Provider) sdk.Provider {
		f.dead.Store(false) // a new plugin
		return dying{p, &f.dead}
	}
	f.host = stack.Host{Sandboxes: f.open, Workers: &driver.Installer{Binary: workerBin}}
	return f
}

// OpenWorkflow goes up the whole stack, each layer once, and what each
// step learnt is a field from then on; Close stops the one plugin.
func TestOpenWorkflow(t *testing.T) {
	f := newFixture(t)
	st, err := stack.OpenWorkflow(t.Context(), f.host, f.profile, "", "wf")
	if err != nil {
		t.Fatalf("OpenWorkflow: %v", err)
	}
	if st.Running == nil || st.Running.Workdir == "" || st.Worker == "" || st.Workspace == nil || st.Driver == nil {
		t.Fatalf("stack %+v: a layer is missing", st)
	}
	if st.Driver.Worker != st.Worker || st.Driver.Provider != "local" {
		t.Errorf("driver %+v, want the stack's worker %s on local", st.Driver, st.Worker)
	}
	if st.UID != "" {
		t.Errorf("uid %q on a provider that does not separate runs", st.UID)
	}
	// The worker is where the stack says, and runs there.
	var out strings.Builder
	res, err := st.Exec(t.Context(), sdk.ExecRequest{Argv: []string{st.Worker, "version"}}, sdk.ExecIO{Stdout: &out})
	if err != nil || res.Code != 0 || out.Len() == 0 {
		t.Errorf("%s version: %+v, %v, %q", st.Worker, res, err, out.String())
	}
	if ref := st.SandboxRef(); ref.Name == "" {
		t.Errorf("sandbox ref %+v", ref)
	}
	if err := st.Close(t.Context()); err != nil {
		t.Errorf("Close: %v", err)
	}
	if o, c := f.open.Opened.Load(), f.open.Closed.Load(); o != 1 || c != 1 {
		t.Errorf("providers opened %d, closed %d; want 1 and 1", o, c)
	}
}

// Each step needs the one below it, and says which when it is missing.
func TestStepsInOrder(t *testing.T) {
	f := newFixture(t)
	st, err := stack.Open(t.Context(), f.host, f.profile, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(t.Context())
	for _, tc := range []struct {
		step string
		err  error
		want string
	}{
		{"InstallWorker", st.InstallWorker(t.Context()), "Up first"},
		{"OpenWorkspace", st.OpenWorkspace(workspace.Options{}), "InstallWorker first"},
		{"As", st.As(t.Context(), "wf", nil), "OpenWorkspace first"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s before its step: %v, want an error saying %q", tc.step, tc.err, tc.want)
		}
	}
	if f.open.Opened.Load() != 1 {
		t.Errorf("opened %d providers, want 1", f.open.Opened.Load())
	}
}

// When the plugin dies, Repair starts another (and its sandbox), stops
// the dead one, and everything above goes on through the new one.
func TestRepairReplacesADeadPlugin(t *testing.T) {
	f := newFixture(t)
	st, err := stack.OpenWorkflow(t.Context(), f.host, f.profile, "", "wf")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(t.Context())
	if did, err := st.Repair(t.Context()); did || err != nil {
		t.Fatalf("Repair of a live plugin: %v, %v; want nothing done", did, err)
	}
	first := st.Sandbox()
	f.dead.Store(true)
	if did, err := st.Repair(t.Context()); !did || err != nil {
		t.Fatalf("Repair of a dead plugin: %v, %v; want it replaced", did, err)
	}
	if st.Sandbox() == first || st.Sandbox().ProviderExited() {
		t.Errorf("the stack still goes through the dead plugin")
	}
	if o, c := f.open.Opened.Load(), f.open.Closed.Load(); o != 2 || c != 1 {
		t.Errorf("providers opened %d, closed %d; want 2 and 1", o, c)
	}
	// The workspace reaches the sandbox through the new plugin.
	if ids, err := workspace.Workflows(t.Context(), st); err != nil {
		t.Errorf("Workflows after the repair: %v, %v", ids, err)
	}
}

// A stack over a plugin the caller started asks an agent's state of the
// worker a run's record names, and of that worker only.
func TestRecordedDriver(t *testing.T) {
	f := newFixture(t)
	st, err := stack.OpenWorkflow(t.Context(), f.host, f.profile, "", "wf")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(t.Context())
	// A run that ended with code 3, as its supervisor leaves it.
	dir := filepath.Join(st.Running.Workdir, "ended-run")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "exit"), []byte(`{"code":3}`), 0o600); err != nil {
		t.Fatal(err)
	}
	over := stack.Over(st.Sandbox(), nil)
	state, err := over.RecordedDriver(st.Worker, "").AgenticState(t.Context(), dir)
	if err != nil || state.State != driver.AgentEnded || state.Code == nil || *state.Code != 3 {
		t.Errorf("the recorded worker says %+v, %v; want ended with code 3", state, err)
	}
	if _, err := over.RecordedDriver(filepath.Join(st.Running.Workdir, "no-worker"), "").AgenticState(t.Context(), dir); err == nil {
		t.Error("a worker the sandbox does not have answered")
	}
}

// KeepAwake holds the sandbox's busy lock through one exec for as long
// as it is not released; an exec that is lost is taken again; release
// ends it, and the lock with it.
func TestKeepAwake(t *testing.T) {
	f := newFixture(t)
	st, err := stack.OpenWorkflow(t.Context(), f.host, f.profile, "", "wf")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close(t.Context())
	dir := t.TempDir()
	busy := filepath.Join(dir, lifetime.BusyFile)
	if err := os.WriteFile(busy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stack.Watched(st, dir)
	release := st.KeepAwake(t.Context())
	defer release(t.Context())

	first := holders(t, st.Running.Workdir, func(pids []int) bool { return len(pids) == 1 })[0]
	if !locked(t, busy) {
		t.Fatal("the sandbox is not busy while kept awake")
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	holders(t, st.Running.Workdir, func(pids []int) bool { return len(pids) == 1 && pids[0] != first })
	if !locked(t, busy) {
		t.Fatal("the sandbox is not busy once the lost hold was taken again")
	}
	if err := release(t.Context()); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := release(t.Context()); err != nil {
		t.Errorf("a second release: %v", err)
	}
	if locked(t, busy) {
		t.Error("the sandbox is busy after release")
	}
	holders(t, st.Running.Workdir, func(pids []int) bool { return len(pids) == 0 })
}

// holders waits until the processes that hold the sandbox awake (the cat
// of the exec KeepAwake runs, in the sandbox's workdir) are as want says,
// and returns them.
func holders(t *testing.T, workdir string, want func(pids []int) bool) []int {
	t.Helper()
	for {
		var pids []int
		comms, _ := filepath.Glob("/proc/[0-9]*/comm")
		for _, c := range comms {
			comm, err := os.ReadFile(c)
			if err != nil || strings.TrimSpace(string(comm)) != "cat" {
				continue
			}
			if cwd, err := os.Readlink(filepath.Join(filepath.Dir(c), "cwd")); err != nil || cwd != workdir {
				continue
			}
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
			pids = append(pids, pid)
		}
		if want(pids) {
			return pids
		}
		if t.Context().Err() != nil {
			t.Fatalf("the processes holding the sandbox awake are %v, not as wanted", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// locked says whether a command holds the busy file's lock.
func locked(t *testing.T, busy string) bool {
	t.Helper()
	fd, err := os.Open(busy)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if err := unix.Flock(int(fd.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}
