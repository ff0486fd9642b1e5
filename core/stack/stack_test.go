package stack_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
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
