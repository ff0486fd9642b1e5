package pluginhost

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Launched by go-plugin (its handshake cookie set), the test binary is a
// provider plugin whose Exec writes the plugin process's own environment.
func TestMain(m *testing.M) {
	if os.Getenv(providerwire.Handshake.MagicCookieKey) != "" {
		var opts []sdk.ServeOption
		if os.Getenv(oldSDKEnv) != "" {
			opts = append(opts, sdk.WithoutSharing())
		}
		sdk.Serve(environProvider{}, opts...)
		return
	}
	os.Exit(m.Run())
}

// oldSDKEnv makes the test plugin one of an SDK before sharing.
const oldSDKEnv = "AMELIA_TEST_OLD_SDK"

type environProvider struct{}

func (environProvider) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{Name: "envtest", Capabilities: sdk.Capabilities{EgressModes: []sdk.NetworkMode{sdk.NetworkOpen}}}, nil
}

func (environProvider) EnsureRunning(_ context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	return sdk.Sandbox{Ref: spec.SandboxRef, Workdir: "/"}, nil
}

// Exec writes os.Environ() NUL-separated (go-plugin's certificate spans
// lines).
func (environProvider) Exec(_ context.Context, _ sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	_, err := io.WriteString(eio.Stdout, strings.Join(os.Environ(), "\x00"))
	return sdk.ExitStatus{}, err
}

func (environProvider) Teardown(context.Context, sdk.SandboxRef) error { return nil }

func (environProvider) HealthCheck(context.Context, sdk.SandboxRef) (sdk.Health, error) {
	return sdk.Health{State: sdk.HealthReady}, nil
}

// pluginEnviron starts p for prof and returns the environment the plugin
// process has.
func pluginEnviron(t *testing.T, h *Host, p Plugin, prof *Profile) map[string]string {
	t.Helper()
	pl, err := h.Start(p, prof)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer pl.Close()
	var out bytes.Buffer
	if _, err := pl.Exec(t.Context(), sdk.ExecRequest{Sandbox: sdk.SandboxRef{Name: "t"}, Argv: []string{"env"}}, sdk.ExecIO{Stdout: &out}); err != nil {
		t.Fatalf("exec: %v", err)
	}
	env := map[string]string{}
	for kv := range strings.SplitSeq(out.String(), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// goPlugins reports whether name is one of the variables go-plugin sets
// for the handshake.
func goPlugins(name string) bool {
	return name == providerwire.Handshake.MagicCookieKey || strings.HasPrefix(name, "PLUGIN_")
}

// A real plugin process gets the base, its provider's declared variables
// and its profile's grants, and none of the host's secrets: not the LLM
// key, not the git token, not a config override holding a key.
func TestStartScrubsThePluginEnvironment(t *testing.T) {
	secrets := map[string]string{
		"OPENAI_API_KEY":                   "sk-" + rand.Text(),
		"GITHUB_TOKEN":                     "ghp_" + rand.Text(),
		"AMELIA_PROFILES__X__LLM__API_KEY": rand.Text(),
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	for k, v := range map[string]string{
		"AMELIA_WORKER_DIR": "/opt/workers", "LC_TIME": "C",
		"AMELIA_TEST_DECLARED": "declared", "AMELIA_TEST_DEFAULT_KEY": "default-key", "AMELIA_TEST_NAMED_KEY": "named-key",
		"KUBECONFIG": "/etc/k", "AMELIA_TEST_UNDECLARED": "undeclared",
	} {
		t.Setenv(k, v)
	}
	opts := Options{
		Server: os.Args[0],
		Builtins: []Builtin{{Name: "envtest", Env: Env{
			Vars:  []string{"AMELIA_TEST_DECLARED"},
			Named: []NamedVar{{Key: "key_env", Default: "AMELIA_TEST_DEFAULT_KEY"}},
		}}},
		Environ: os.Environ(),
	}
	h := New(opts)
	// The same, sharing its plugins.
	opts.Share = &Sharing{Dir: shareDir(t)}
	shared := New(opts)
	p, err := h.Find("envtest")
	if err != nil {
		t.Fatal(err)
	}
	profile := &Profile{
		Settings: map[string]any{"key_env": "AMELIA_TEST_NAMED_KEY"},
		Grant:    []string{"KUBECONFIG"},
		Secrets: []Secret{
			{Key: "llm.api_key_env", Var: "OPENAI_API_KEY", What: "the LLM key"},
			{Key: "git.token_env", Var: "GITHUB_TOKEN", What: "the git token"},
		},
	}
	for _, tc := range []struct {
		name          string
		host          *Host
		prof          *Profile
		want, notWant []string
	}{
		{
			name:    "no profile (plugin ls): base and declared",
			host:    h,
			want:    []string{"AMELIA_WORKER_DIR", "LC_TIME", "AMELIA_TEST_DECLARED", "AMELIA_TEST_DEFAULT_KEY"},
			notWant: []string{"KUBECONFIG", "AMELIA_TEST_NAMED_KEY", "AMELIA_TEST_UNDECLARED"},
		},
		{
			name:    "for a profile: base, declared and granted",
			host:    h,
			prof:    profile,
			want:    []string{"AMELIA_WORKER_DIR", "LC_TIME", "AMELIA_TEST_DECLARED", "AMELIA_TEST_NAMED_KEY", "KUBECONFIG"},
			notWant: []string{"AMELIA_TEST_DEFAULT_KEY", "AMELIA_TEST_UNDECLARED"},
		},
		{
			name:    "shared, for a profile: the same",
			host:    shared,
			prof:    profile,
			want:    []string{"AMELIA_WORKER_DIR", "LC_TIME", "AMELIA_TEST_DECLARED", "AMELIA_TEST_NAMED_KEY", "KUBECONFIG"},
			notWant: []string{"AMELIA_TEST_DEFAULT_KEY", "AMELIA_TEST_UNDECLARED"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := pluginEnviron(t, tc.host, p, tc.prof)
			for _, k := range tc.want {
				if env[k] != os.Getenv(k) {
					t.Errorf("the plugin has %s=%q, want %q", k, env[k], os.Getenv(k))
				}
			}
			for _, k := range slices.Concat(tc.notWant, slices.Collect(maps.Keys(secrets))) {
				if _, ok := env[k]; ok {
					t.Errorf("the plugin has %s", k)
				}
			}
			for k, v := range env {
				if !inBase(k) && !goPlugins(k) && !slices.Contains(tc.want, k) {
					t.Errorf("the plugin has %s, which nothing gave it", k)
				}
				for name, secret := range secrets {
					if strings.Contains(v, secret) {
						t.Errorf("the plugin's %s holds the value of %s", k, name)
					}
				}
			}
		})
	}
}

// A profile that grants its LLM key's variable starts no plugin.
func TestStartRefusesTheLLMKey(t *testing.T) {
	h := New(Options{Server: os.Args[0], Builtins: []Builtin{{Name: "envtest"}}, Environ: []string{"OPENAI_API_KEY=sk-x"}})
	p, err := h.Find("envtest")
	if err != nil {
		t.Fatal(err)
	}
	prof := &Profile{Grant: []string{"OPENAI_API_KEY"}, Secrets: []Secret{{Key: "llm.api_key_env", Var: "OPENAI_API_KEY", What: "the LLM key"}}}
	pl, err := h.Start(p, prof)
	if err == nil {
		pl.Close()
		t.Fatal("Start gave the plugin the LLM key's variable")
	}
	if want := "sandbox.plugin_env: OPENAI_API_KEY is the profile's llm.api_key_env; the LLM key never goes to a provider"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// shareDir is a directory for a test's shared plugins, which are stopped
// when it ends.
func shareDir(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "phs-")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, "s")
	t.Cleanup(func() {
		sharedtest.Stop(t, dir)
		os.RemoveAll(parent)
	})
	return dir
}

// Runs of a profile share a plugin; two profiles, or a profile whose
// settings changed, do not; a profile that wants its own plugin, and a
// start for no profile, get a process each.
func TestStartShares(t *testing.T) {
	t.Setenv("AMELIA_TEST_GRANTED", "granted")
	h := New(Options{Server: os.Args[0], Builtins: []Builtin{{Name: "envtest"}}, Environ: os.Environ(), Share: &Sharing{Dir: shareDir(t)}})
	p, err := h.Find("envtest")
	if err != nil {
		t.Fatal(err)
	}
	start := func(prof *Profile) *pluginclient.Plugin {
		t.Helper()
		pl, err := h.Start(p, prof)
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(pl.Close)
		return pl
	}
	dev := &Profile{ID: "config.yaml\x00dev", Settings: map[string]any{"root": "/a", "limits": map[string]any{"cpus": 2, "memory": "1g"}}}
	first := start(dev)
	if !first.Shared() {
		t.Fatal("a plugin started for a profile is not shared")
	}
	// The same settings, written in another order.
	same := &Profile{ID: dev.ID, Settings: map[string]any{"limits": map[string]any{"memory": "1g", "cpus": 2}, "root": "/a"}}
	if pl := start(same); pl.Pid() != first.Pid() {
		t.Errorf("a second run of the profile got plugin %d, not the first's %d", pl.Pid(), first.Pid())
	}
	for _, tc := range []struct {
		name   string
		prof   *Profile
		shared bool
	}{
		{"another profile", &Profile{ID: "config.yaml\x00prod", Settings: dev.Settings}, true},
		{"other settings", &Profile{ID: dev.ID, Settings: map[string]any{"root": "/b"}}, true},
		{"another grant", &Profile{ID: dev.ID, Settings: dev.Settings, Grant: []string{"AMELIA_TEST_GRANTED"}}, true},
		{"its own plugin", &Profile{ID: dev.ID, Settings: dev.Settings, OwnPlugin: true}, false},
		{"no profile", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := start(tc.prof)
			if pl.Shared() != tc.shared {
				t.Errorf("Shared() = %v, want %v", pl.Shared(), tc.shared)
			}
			if pl.Pid() == first.Pid() {
				t.Errorf("it got the dev profile's plugin %d", pl.Pid())
			}
		})
	}
}

// A plugin of an SDK before sharing is started for each run, as before.
func TestStartLaunchesAPluginThatCannotBeShared(t *testing.T) {
	t.Setenv(oldSDKEnv, "1")
	h := New(Options{Server: os.Args[0], Builtins: []Builtin{{Name: "envtest", Env: Env{Vars: []string{oldSDKEnv}}}}, Environ: os.Environ(), Share: &Sharing{Dir: shareDir(t)}})
	p, err := h.Find("envtest")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		pl, err := h.Start(p, &Profile{ID: "dev"})
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if pl.Shared() {
			t.Errorf("start %d: the plugin is shared", i)
		}
		if _, err := pl.Info(t.Context()); err != nil {
			t.Errorf("start %d: %v", i, err)
		}
		pl.Close()
	}
}
