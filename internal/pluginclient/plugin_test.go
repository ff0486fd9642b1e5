package pluginclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/hostproc"
)

// The test binary plays three parts, chosen by environment:
//   - launched by go-plugin (handshake cookie set): a test provider plugin
//     whose behaviour testMode selects;
//   - hostModeEnv set: a host that launches the plugin and runs one exec,
//     for the test that kills a host;
//   - otherwise: the tests.
const (
	testModeEnv = "AMELIA_SDK_TEST_MODE"
	hostModeEnv = "AMELIA_SDK_TEST_HOST_PIDFILE"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(shareHostEnv) != "":
		os.Exit(runShareHost(os.Getenv(shareHostEnv), os.Getenv(shareExecEnv)))
	case os.Getenv(rawDialEnv) != "":
		os.Exit(rawDial(os.Getenv(rawDialEnv)))
	case os.Getenv(paceEnv) != "":
		os.Exit(runPaced(os.Getenv(paceEnv), os.Getenv(progressEnv)))
	case os.Getenv(providerwire.Handshake.MagicCookieKey) != "":
		logger := sdk.NewLogger(os.Stderr, slog.LevelDebug)
		var p sdk.Provider = &testProvider{mode: os.Getenv(testModeEnv), log: logger}
		if os.Getenv(testModeEnv) == "settings" {
			p = settingsProvider{p}
		}
		opts := []sdk.ServeOption{sdk.WithLogger(logger)}
		switch os.Getenv(testModeEnv) {
		case "nodata":
			// A plugin of an SDK before the data channel.
			opts = append(opts, sdk.WithoutDataChannel())
		case "noshare":
			// A plugin of an SDK before sharing.
			opts = append(opts, sdk.WithoutSharing())
		}
		sdk.Serve(p, opts...)
	case os.Getenv(hostModeEnv) != "":
		os.Exit(runHost(os.Getenv(hostModeEnv)))
	default:
		os.Exit(m.Run())
	}
}

// testProvider runs execs as host processes in the current directory and
// misbehaves on request.
type testProvider struct {
	mode string
	log  *slog.Logger
}

func (p *testProvider) Info(context.Context) (sdk.Info, error) {
	if p.mode == "noisy" {
		// A library or child process writing to fd 1 after the handshake,
		// and a structured log record.
		cmd := exec.Command("sh", "-c", "echo stray-fd1-output")
		cmd.Stdout = os.NewFile(1, "fd1")
		_ = cmd.Run()
		p.log.Info("noisy says hello", "answer", 42)
	}
	return sdk.Info{Name: "test", Capabilities: sdk.Capabilities{EgressModes: []sdk.NetworkMode{sdk.NetworkOpen}}}, nil
}

func (p *testProvider) EnsureRunning(_ context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	return sdk.Sandbox{Ref: spec.SandboxRef, Workdir: "/"}, nil
}

func (p *testProvider) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	switch p.mode {
	case "crashy":
		_, _ = fmt.Fprintln(eio.Stdout, "partial output")
		panic("test provider exploded")
	case "environ":
		// The plugin's own environment, NUL-separated (go-plugin's
		// certificate spans lines).
		_, err := io.WriteString(eio.Stdout, strings.Join(os.Environ(), "\x00"))
		return sdk.ExitStatus{}, err
	case "ownfile":
		// Gives the process the host's own output file, where it is one.
		pw, ok := eio.Stdout.(*sdk.PipeWriter)
		var f *os.File
		if ok {
			f, ok = pw.File()
		}
		_, _ = fmt.Fprintf(eio.Stderr, "own=%v\n", ok)
		if ok {
			eio.Stdout = f
		}
	}
	return hostproc.Run(ctx, exec.Command(req.Argv[0], req.Argv[1:]...), eio, req.Grace())
}

func (p *testProvider) Teardown(context.Context, sdk.SandboxRef) error { return nil }

func (p *testProvider) HealthCheck(context.Context, sdk.SandboxRef) (sdk.Health, error) {
	return sdk.Health{State: sdk.HealthReady}, nil
}

// settingsProvider checks its settings with DecodeSettings.
type settingsProvider struct{ sdk.Provider }

func (settingsProvider) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	var s struct {
		Root   string `json:"root"`
		Limits struct {
			CPUs float64 `json:"cpus"`
		} `json:"limits"`
	}
	return sdk.SettingsProblems(sdk.DecodeSettings(req.Config, "test", &s))
}

// launch starts the test binary as a plugin in mode, logging to logs.
func launch(t *testing.T, mode string, logs *sdktest.Buffer) *pluginclient.Plugin {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), testModeEnv+"="+mode)
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := pluginclient.Launch(cmd, pluginclient.LaunchOptions{Name: "test-" + mode, Logger: logger})
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

var ref = sdk.SandboxRef{Name: "t"}

func TestCrashMidExecIsAClearError(t *testing.T) {
	tmp := t.TempDir() // the plugin's TMPDIR, which Close leaves empty
	t.Setenv("TMPDIR", tmp)
	p := launch(t, "crashy", &sdktest.Buffer{})
	_, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"true"}}, sdk.ExecIO{Stdout: &bytes.Buffer{}})
	if err == nil {
		t.Fatal("Exec on a plugin that panics returned no error")
	}
	want := `provider plugin "test-crashy" stopped unexpectedly: panic: test provider exploded`
	if err.Error() != want || !errors.Is(err, sdk.ErrUnavailable) {
		t.Errorf("err = %q, want %q matching ErrUnavailable", err, want)
	}
	p.Close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("a crashed plugin's Close left %v in its TMPDIR: its socket must go", left)
	}
}

// A plugin's settings problems reach the host with their keys; a plugin
// that cannot check its settings says so.
func TestPluginValidatesSettings(t *testing.T) {
	req := sdk.ValidateRequest{Config: []byte(`{"root":"/r","limits":{"cpu":2}}`), Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}}
	got, err := launch(t, "settings", &sdktest.Buffer{}).ValidateSettings(t.Context(), req)
	want := []sdk.Problem{{Key: "limits.cpu", Message: "unknown key, did you mean cpus? (known: cpus)"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	if _, err := launch(t, "", &sdktest.Buffer{}).ValidateSettings(t.Context(), req); !errors.Is(err, sdk.ErrUnsupported) {
		t.Errorf("a plugin without ValidateSettings: err = %v, want ErrUnsupported", err)
	}
}

func TestPluginOutputReachesTheHostLog(t *testing.T) {
	logs := &sdktest.Buffer{}
	p := launch(t, "noisy", logs)
	for range 2 { // the stray output must not break later calls either
		if _, err := p.Info(t.Context()); err != nil {
			t.Fatalf("Info: %v", err)
		}
	}
	p.Close() // flushes the plugin's stderr into the log
	got := logs.String()
	for _, want := range []string{
		// The structured record keeps its level, message and attributes.
		`level=INFO msg="noisy says hello" plugin=test-noisy answer=42`,
		// A child writing to fd 1 went to stderr, not into the handshake.
		`msg=stray-fd1-output plugin=test-noisy`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("host log lacks %s\nlog:\n%s", want, got)
		}
	}
}

// runHost is the host in TestPluginExitsWhenItsHostDies: it launches the
// plugin, starts a long exec that records its pid, and blocks.
func runHost(pidfile string) int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), hostModeEnv+"=")
	p, err := pluginclient.Launch(cmd, pluginclient.LaunchOptions{Name: "test"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, err = p.Exec(context.Background(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", "echo $$ > " + pidfile + "; exec sleep 600"}}, sdk.ExecIO{})
	fmt.Fprintln(os.Stderr, "exec ended:", err)
	return 1
}

// A plugin's environment is its command's, plus go-plugin's handshake
// variables; a command without one inherits the host's, as os/exec does.
func TestLaunchEnvironment(t *testing.T) {
	t.Setenv("AMELIA_SDK_TEST_SECRET", "host-only")
	t.Setenv(testModeEnv, "environ")
	// A host that is itself in a shared plugin's environment: what it
	// launches is a plugin of its own still.
	t.Setenv("AMELIA_PROVIDER_SHARED", filepath.Join(t.TempDir(), "x.sock"))
	for _, tc := range []struct {
		name string
		env  []string // the command's; nil inherits
		// want are variables the plugin must have, not those it must not.
		want, notWant []string
	}{
		{
			name:    "the command's environment",
			env:     []string{"AMELIA_SDK_TEST_GIVEN=yes", testModeEnv + "=environ"},
			want:    []string{"AMELIA_SDK_TEST_GIVEN", testModeEnv, providerwire.Handshake.MagicCookieKey, "PLUGIN_CLIENT_CERT"},
			notWant: []string{"AMELIA_SDK_TEST_SECRET", "PATH"},
		},
		{
			name:    "inherited",
			want:    []string{"AMELIA_SDK_TEST_SECRET", "PATH", providerwire.Handshake.MagicCookieKey},
			notWant: []string{"AMELIA_PROVIDER_SHARED"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = tc.env
			p, err := pluginclient.Launch(cmd, pluginclient.LaunchOptions{Name: "test-environ"})
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			t.Cleanup(p.Close)
			var out bytes.Buffer
			if _, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"env"}}, sdk.ExecIO{Stdout: &out}); err != nil {
				t.Fatalf("exec: %v", err)
			}
			got := map[string]bool{}
			for kv := range strings.SplitSeq(out.String(), "\x00") {
				name, _, _ := strings.Cut(kv, "=")
				got[name] = true
			}
			for _, name := range tc.want {
				if !got[name] {
					t.Errorf("the plugin lacks %s; it has %v", name, slices.Sorted(maps.Keys(got)))
				}
			}
			for _, name := range tc.notWant {
				if got[name] {
					t.Errorf("the plugin has %s", name)
				}
			}
		})
	}
}

func TestPluginExitsWhenItsHostDies(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	tmp := t.TempDir() // the plugin's TMPDIR, which it leaves empty
	host := exec.Command(os.Args[0])
	host.Env = append(os.Environ(), hostModeEnv+"="+pidfile, "TMPDIR="+tmp)
	var hostErr bytes.Buffer
	host.Stderr = &hostErr
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Process.Kill(); _ = host.Wait() })

	sleeper := waitFor(t, "the exec to start", func() (int, bool) {
		b, err := os.ReadFile(pidfile)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		return pid, err == nil && perr == nil
	})
	t.Cleanup(func() { _ = syscall.Kill(sleeper, syscall.SIGKILL) }) // in case the plugin did not
	plugin := parentOf(t, sleeper)
	if err := host.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = host.Wait()
	waitFor(t, "the plugin to exit after its host died", func() (int, bool) { return 0, !alive(plugin) })
	waitFor(t, "the exec's process to be killed", func() (int, bool) { return 0, !alive(sleeper) })
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("the plugin left %v in its TMPDIR: its socket must go with it", left)
	}
}

// waitFor polls cond until it holds, failing the test after 15 s.
func waitFor(t *testing.T, what string, cond func() (int, bool)) int {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if v, ok := cond(); ok {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
	return 0
}

// alive reports whether pid runs (a zombie has stopped running).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}
