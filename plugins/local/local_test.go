package local_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/local"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// The test binary doubles as the plugin: launched by go-plugin (which sets
// the handshake cookie), it serves the local provider instead of testing.
func TestMain(m *testing.M) {
	if sdktest.LaunchedAsPlugin() {
		sdk.Serve(local.New(local.Options{Version: "test", HostEnv: os.Environ()}))
		return
	}
	os.Exit(m.Run())
}

func settings(t *testing.T, root string) json.RawMessage {
	b, err := json.Marshal(map[string]string{"root": root})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConformance(t *testing.T) {
	sdktest.Run(t, sdktest.Config{
		Command:  func() *exec.Cmd { return exec.Command(os.Args[0]) },
		Settings: settings(t, t.TempDir()),
	})
}

// newSandbox starts a sandbox on an in-process provider.
func newSandbox(t *testing.T, opts local.Options) (*local.Provider, sdk.Sandbox) {
	t.Helper()
	p := local.New(opts)
	sb, err := p.EnsureRunning(t.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: "t1", Config: settings(t, t.TempDir())},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Teardown(context.Background(), sb.Ref) })
	return p, sb
}

func run(t *testing.T, p *local.Provider, req sdk.ExecRequest) (sdk.ExitStatus, string) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := p.Exec(t.Context(), req, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("Exec(%q): %v", req.Argv, err)
	}
	return st, out.String() + errb.String()
}

func TestInfoSaysItIsolatesNothing(t *testing.T) {
	info, err := local.New(local.Options{}).Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Isolated || !strings.Contains(info.Description, "isolates nothing") {
		t.Errorf("Info = %+v, want Isolated false and a description saying it isolates nothing", info)
	}
	if info.Supports(sdk.NetworkNone) || info.Supports(sdk.NetworkAllowlist) || !info.Supports(sdk.NetworkOpen) {
		t.Errorf("EgressModes = %v, want only open", info.EgressModes)
	}
}

func TestRefusesNetworkPoliciesItCannotEnforce(t *testing.T) {
	p := local.New(local.Options{})
	for _, mode := range []sdk.NetworkMode{sdk.NetworkNone, sdk.NetworkAllowlist} {
		_, err := p.EnsureRunning(t.Context(), sdk.Spec{
			SandboxRef: sdk.SandboxRef{Name: "t1", Config: settings(t, t.TempDir())},
			Network:    sdk.NetworkPolicy{Mode: mode},
		})
		if !errors.Is(err, sdk.ErrUnsupported) || !strings.Contains(err.Error(), string(mode)) {
			t.Errorf("network %s: err = %v, want ErrUnsupported naming the mode", mode, err)
		}
	}
}

func TestHostSecretsStayOut(t *testing.T) {
	p, sb := newSandbox(t, local.Options{HostEnv: []string{"PATH=" + os.Getenv("PATH"), "OPENAI_API_KEY=sk-secret", "HOME=/root"}})
	_, out := run(t, p, sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"env"}})
	if strings.Contains(out, "sk-secret") || strings.Contains(out, "OPENAI_API_KEY") {
		t.Errorf("the host's API key reached the sandbox:\n%s", out)
	}
	if !strings.Contains(out, "HOME="+filepath.Dir(sb.Workdir)+"/home\n") {
		t.Errorf("HOME is not the sandbox's own home:\n%s", out)
	}
}

// Another user is refused, and so is root even when the current user is
// root: the provider does not declare ExecAsRoot.
func TestExecAsAnotherUserIsRefused(t *testing.T) {
	p, sb := newSandbox(t, local.Options{})
	for _, u := range []string{"amelia-nobody", "root"} {
		_, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}, User: u}, sdk.ExecIO{})
		if !errors.Is(err, sdk.ErrUnsupported) {
			t.Errorf("user %s: err = %v, want ErrUnsupported", u, err)
		}
	}
}

func TestTeardownKillsBackgroundProcesses(t *testing.T) {
	p, sb := newSandbox(t, local.Options{HostEnv: os.Environ()})
	// The background sleep outlives its exec, in a session of its own.
	st, out := run(t, p, sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"}})
	if st.Code != 0 {
		t.Fatalf("exit %+v: %s", st, out)
	}
	pid := strings.TrimSpace(out)
	t.Cleanup(func() { // in case Teardown failed to
		if n, err := strconv.Atoi(pid); err == nil {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	})
	if err := p.Teardown(t.Context(), sb.Ref); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err == nil && !bytes.Contains(status, []byte("\nState:\tZ")) {
		t.Errorf("background process %s survived Teardown:\n%s", pid, status)
	}
}

func TestTeardownRemovesReadOnlyTrees(t *testing.T) {
	p, sb := newSandbox(t, local.Options{HostEnv: os.Environ()})
	run(t, p, sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "mkdir -p ro/deep && touch ro/deep/f && chmod -R a-w ro"}})
	if err := p.Teardown(t.Context(), sb.Ref); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(sb.Workdir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory still there after Teardown: %v", err)
	}
}

func TestTeardownLeavesForeignDirectoriesAlone(t *testing.T) {
	root := t.TempDir()
	foreign := filepath.Join(root, "precious")
	if err := os.MkdirAll(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	err := local.New(local.Options{}).Teardown(t.Context(), sdk.SandboxRef{Name: "precious", Config: settings(t, root)})
	if !errors.Is(err, sdk.ErrConflict) {
		t.Errorf("err = %v, want ErrConflict", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a directory without the sandbox marker was removed: %v", err)
	}
}

func TestExecPathFromRequestEnv(t *testing.T) {
	p, sb := newSandbox(t, local.Options{HostEnv: os.Environ()})
	bin := filepath.Join(t.TempDir(), "amelia-test-tool")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho tool ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	st, out := run(t, p, sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"amelia-test-tool"}, Env: map[string]string{"PATH": filepath.Dir(bin) + ":/usr/bin:/bin"}})
	if st.Code != 0 || out != "tool ran\n" {
		t.Errorf("exit %+v output %q, want the tool found on the exec's PATH", st, out)
	}
}

func TestUnknownSettingIsRejected(t *testing.T) {
	_, err := local.New(local.Options{}).EnsureRunning(t.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: "t1", Config: json.RawMessage(`{"root":"` + t.TempDir() + `","rooot":"/tmp"}`)},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
	})
	if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "local.rooot: unknown key, did you mean root?") {
		t.Errorf("err = %v, want ErrInvalid naming the key", err)
	}
}

// ValidateSettings finds what EnsureRunning refuses, at its key.
func TestValidateSettings(t *testing.T) {
	p := local.New(local.Options{DefaultRoot: t.TempDir()})
	for _, tc := range []struct {
		in   string
		want []sdk.Problem
	}{
		{in: ``},
		{in: `{"root":"/srv/sandboxes"}`},
		{in: `{"rooot":"/tmp"}`, want: []sdk.Problem{{Key: "rooot", Message: "unknown key, did you mean root? (known: root)"}}},
		{in: `{"root":"rel/dir"}`, want: []sdk.Problem{{Key: "root", Message: `must be an absolute directory, got "rel/dir"`}}},
	} {
		got, err := p.ValidateSettings(t.Context(), sdk.ValidateRequest{Config: json.RawMessage(tc.in), Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestRelativeRootIsRejected(t *testing.T) {
	_, err := local.New(local.Options{}).EnsureRunning(t.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: "t1", Config: json.RawMessage(`{"root":"rel/dir"}`)},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
	})
	if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "local.root") {
		t.Errorf("err = %v, want ErrInvalid naming local.root", err)
	}
}
