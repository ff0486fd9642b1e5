package kubernetes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/kubernetes"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// The provider against the real two-node cluster of k8stest: its API
// server, kubelets, containerd and the Agent Sandbox controller.

// workerDirEnv names the directory of the worker the tests built, for the
// plugin subprocesses (the test binary, run again).
const workerDirEnv = "AMELIA_WORKER_DIR"

// tmp holds what the tests build.
var tmp string

func TestMain(m *testing.M) {
	if sdktest.LaunchedAsPlugin() {
		logger := sdk.NewLogger(os.Stderr, slog.LevelDebug)
		sdk.Serve(kubernetes.New(kubernetes.Options{Version: "test", WorkerDirs: []string{os.Getenv(workerDirEnv)}, Logger: logger}), sdk.WithLogger(logger))
		return
	}
	var err error
	if tmp, err = os.MkdirTemp("", "amelia-kubernetes-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := k8stest.Main(m)
	os.RemoveAll(tmp)
	os.Exit(code)
}

var (
	workerOnce sync.Once
	workerErr  error
)

// cluster starts (or skips without) the cluster, builds the worker once
// and points the provider, in this process and its plugin subprocesses,
// at both.
func cluster(t testing.TB) *k8stest.Cluster {
	t.Helper()
	c := k8stest.Start(t)
	workerOnce.Do(func() {
		if _, workerErr = testbin.BuildSandboxWorker(tmp); workerErr == nil {
			workerErr = os.Setenv(workerDirEnv, tmp)
		}
	})
	if workerErr != nil {
		t.Fatalf("build the worker: %v", workerErr)
	}
	t.Setenv("KUBECONFIG", c.Kubeconfig())
	return c
}

// settings is a profile's kubernetes block for a fresh namespace of the
// cluster, with extra keys (nil removes one).
func settings(t testing.TB, c *k8stest.Cluster, extra map[string]any) (json.RawMessage, string) {
	t.Helper()
	ns := c.Namespace(t)
	s := map[string]any{"namespace": ns, "image": c.Image(), "image_pull_policy": "IfNotPresent"}
	for k, v := range extra {
		if v == nil {
			delete(s, k)
		} else {
			s[k] = v
		}
	}
	raw, _ := json.Marshal(s)
	return raw, ns
}

// logs is a provider log a test reads.
type logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// newProvider is the provider in this process, logging to l when not nil.
func newProvider(t testing.TB, l *logs) *kubernetes.Provider {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	if l != nil {
		logger = slog.New(slog.NewTextHandler(l, nil))
	}
	p := kubernetes.New(kubernetes.Options{Version: "test", WorkerDirs: []string{tmp}, Logger: logger})
	t.Cleanup(func() { p.Close() })
	return p
}

func spec(name string, cfg json.RawMessage, mode sdk.NetworkMode) sdk.Spec {
	return sdk.Spec{SandboxRef: sdk.SandboxRef{Name: name, Config: cfg}, Network: sdk.NetworkPolicy{Mode: mode}, Labels: map[string]string{"amelia.profile": name}}
}

// up starts a sandbox and tears it down when the test ends.
func up(t testing.TB, p sdk.Provider, s sdk.Spec) sdk.Sandbox {
	t.Helper()
	sb, err := p.EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatalf("EnsureRunning(%s): %v", s.Name, err)
	}
	t.Cleanup(func() {
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			t.Errorf("Teardown(%s): %v", s.Name, err)
		}
	})
	return sb
}

// run runs a shell script in the sandbox and returns its stdout.
func run(t testing.TB, p sdk.Provider, ref sdk.SandboxRef, script string) (string, sdk.ExitStatus, error) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", script}}, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	if err == nil && st.Code != 0 {
		t.Logf("exit %d, stderr: %s", st.Code, errb.String())
	}
	return out.String(), st, err
}

// conformance runs the kit against the provider as a plugin subprocess,
// as amelia runs it.
func conformance(t *testing.T, extra map[string]any) {
	c := cluster(t)
	// A nested mapping, for the kit's nested unknown key.
	extra["resources"] = map[string]any{"limits": map[string]string{"memory": "1Gi"}}
	cfg, _ := settings(t, c, extra)
	sdktest.Run(t, sdktest.Config{
		Command:  func() *exec.Cmd { return exec.Command(os.Args[0]) },
		Settings: cfg,
	})
}

func TestConformancePods(t *testing.T) { conformance(t, map[string]any{"api": "pods"}) }

func TestConformanceAgentSandbox(t *testing.T) {
	if !cluster(t).AgentSandbox() {
		t.Fatal("the test cluster has no Agent Sandbox controller")
	}
	conformance(t, map[string]any{"api": "agent-sandbox"})
}

// expect fails the test unless err is the sentinel and says want.
func expect(t *testing.T, what string, err, sentinel error, want string) {
	t.Helper()
	if !errors.Is(err, sentinel) || !strings.Contains(err.Error(), want) {
		t.Errorf("%s: %v; want %v saying %q", what, err, sentinel, want)
	}
}
