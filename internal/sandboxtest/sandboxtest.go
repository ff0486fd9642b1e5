// Package sandboxtest gives tests of the layers above the provider contract a
// real sandbox: the local provider, behind the real plugin boundary. The test
// binary doubles as the plugin: TestMain calls ServePlugin first, which
// serves the local provider when go-plugin launched the binary, so the tests
// reach the sandbox exactly as amelia does (gRPC over go-plugin's socket, a
// separate process, the provider's own Exec).
//
//	func TestMain(m *testing.M) {
//		if sandboxtest.ServePlugin() {
//			return
//		}
//		os.Exit(m.Run())
//	}
package sandboxtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// ServePlugin serves the local provider and returns true when this process
// was launched as a plugin (go-plugin set its handshake cookie); otherwise
// it returns false at once.
func ServePlugin() bool {
	if os.Getenv(providerwire.Handshake.MagicCookieKey) == "" {
		return false
	}
	sdk.Serve(local.New(local.Options{Version: "test", HostEnv: os.Environ()}))
	return true
}

// Sandbox is a running local sandbox behind the plugin.
type Sandbox struct {
	Provider sdk.Provider
	Ref      sdk.SandboxRef
	// Workdir is the sandbox's working directory (sdk.Sandbox.Workdir).
	Workdir string
}

// New launches the test binary as the local provider plugin and starts a
// sandbox named name in a temporary root. The plugin stops and the sandbox
// is torn down when the test ends.
func New(t testing.TB, name string) *Sandbox {
	t.Helper()
	p, err := pluginclient.Launch(exec.Command(os.Args[0]), pluginclient.LaunchOptions{Name: local.Name})
	if err != nil {
		t.Fatalf("launch the local provider plugin: %v", err)
	}
	t.Cleanup(p.Close)
	cfg, _ := json.Marshal(map[string]string{"root": t.TempDir()})
	sb, err := p.EnsureRunning(t.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: name, Config: cfg},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
	})
	if err != nil {
		t.Fatalf("start local sandbox %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			t.Errorf("tear down sandbox %s: %v", name, err)
		}
	})
	return &Sandbox{Provider: p, Ref: sb.Ref, Workdir: sb.Workdir}
}

// SandboxRef is the sandbox Exec runs in: s is an sandboxexec.Execer.
func (s *Sandbox) SandboxRef() sdk.SandboxRef { return s.Ref }

// Exec runs req in the sandbox; it fills in req.Sandbox.
func (s *Sandbox) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	req.Sandbox = s.Ref
	return s.Provider.Exec(ctx, req, eio)
}

// Result is how a command in the sandbox ended.
type Result struct {
	Status         sdk.ExitStatus
	Stdout, Stderr string
}

func (r Result) String() string {
	sig := ""
	if r.Status.Signal != "" {
		sig = " (signal " + r.Status.Signal + ")"
	}
	return fmt.Sprintf("exit %d%s, stdout %q, stderr %q", r.Status.Code, sig, r.Stdout, r.Stderr)
}

// Run runs argv in the sandbox with extra environment env and stdin (both
// may be nil), bounded by a minute. It may be called from any goroutine: an
// exec that fails to run is reported as an error of the test and as exit
// code -1.
func (s *Sandbox) Run(t testing.TB, env map[string]string, stdin io.Reader, argv ...string) Result {
	t.Helper()
	var out, errb bytes.Buffer
	req := sdk.ExecRequest{Argv: argv, Env: env, Timeout: time.Minute}
	st, err := s.Exec(context.Background(), req, sdk.ExecIO{Stdin: stdin, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Errorf("exec %q: %v", argv, err)
		st.Code = -1
	}
	return Result{Status: st, Stdout: out.String(), Stderr: errb.String()}
}
