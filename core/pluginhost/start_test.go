package pluginhost

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Launched by go-plugin (its handshake cookie set), the test binary is a
// provider plugin whose Exec writes the plugin process's own environment.
func TestMain(m *testing.M) {
	if os.Getenv(sdk.Handshake.MagicCookieKey) != "" {
		sdk.Serve(environProvider{})
		return
	}
	os.Exit(m.Run())
}

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
	return name == sdk.Handshake.MagicCookieKey || strings.HasPrefix(name, "PLUGIN_")
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
	h := New(Options{
		Self: os.Args[0],
		Builtins: []Builtin{{Name: "envtest", Env: Env{
			Vars:  []string{"AMELIA_TEST_DECLARED"},
			Named: []NamedVar{{Key: "key_env", Default: "AMELIA_TEST_DEFAULT_KEY"}},
		}}},
		Environ: os.Environ(),
	})
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
		prof          *Profile
		want, notWant []string
	}{
		{
			name:    "no profile (plugin ls): base and declared",
			want:    []string{"AMELIA_WORKER_DIR", "LC_TIME", "AMELIA_TEST_DECLARED", "AMELIA_TEST_DEFAULT_KEY"},
			notWant: []string{"KUBECONFIG", "AMELIA_TEST_NAMED_KEY", "AMELIA_TEST_UNDECLARED"},
		},
		{
			name:    "for a profile: base, declared and granted",
			prof:    profile,
			want:    []string{"AMELIA_WORKER_DIR", "LC_TIME", "AMELIA_TEST_DECLARED", "AMELIA_TEST_NAMED_KEY", "KUBECONFIG"},
			notWant: []string{"AMELIA_TEST_DEFAULT_KEY", "AMELIA_TEST_UNDECLARED"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := pluginEnviron(t, h, p, tc.prof)
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
	h := New(Options{Self: os.Args[0], Builtins: []Builtin{{Name: "envtest"}}, Environ: []string{"OPENAI_API_KEY=sk-x"}})
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
