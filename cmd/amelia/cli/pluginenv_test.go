package cli

import (
	"crypto/rand"
	"os"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin/linked"
)

// parentEnviron prints, one a line, the environment the process that
// started it was started with: in a local or hello sandbox, that of the
// provider plugin itself.
const parentEnviron = `tr '\0' '\n' < /proc/$PPID/environ`

// hostSecrets puts into the test's environment an LLM key, a git token and
// a config override holding the LLM key of profile, all random, and
// returns them by variable.
func hostSecrets(t *testing.T, profile string) map[string]string {
	t.Helper()
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skipf("no /proc to read a plugin's environment from: %v", err)
	}
	secrets := map[string]string{
		"OPENAI_API_KEY": "sk-" + rand.Text(),
		"GITHUB_TOKEN":   "ghp_" + rand.Text(),
		"AMELIA_PROFILES__" + strings.ToUpper(profile) + "__LLM__API_KEY": "sk-" + rand.Text(),
	}
	for k, v := range secrets {
		t.Setenv(k, v)
	}
	return secrets
}

// checkPluginEnviron checks a plugin's environment as parentEnviron
// printed it: it has the variables want, with the test's values, and
// neither the variables notWant nor any of secrets, by name or value.
func checkPluginEnviron(t *testing.T, out string, secrets map[string]string, want, notWant []string) {
	t.Helper()
	env := map[string]string{}
	for line := range strings.Lines(out) {
		k, v, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "=")
		env[k] = v
	}
	for _, k := range want {
		if v, ok := env[k]; !ok || v != os.Getenv(k) {
			t.Errorf("the plugin has %s=%q (set: %v), want %q", k, v, ok, os.Getenv(k))
		}
	}
	for _, k := range notWant {
		if _, ok := env[k]; ok {
			t.Errorf("the plugin has %s", k)
		}
	}
	for name, secret := range secrets {
		if _, ok := env[name]; ok {
			t.Errorf("the plugin has %s", name)
		}
		if strings.Contains(out, secret) {
			t.Errorf("the plugin's environment holds the value of %s", name)
		}
	}
}

// A built-in plugin started for a profile gets the base environment and
// the profile's grants; not the LLM key, the git token or a config
// override, which the host's environment holds.
func TestPluginEnvironment(t *testing.T) {
	e := newEnv(t)
	secrets := hostSecrets(t, "dev")
	t.Setenv("AMELIA_WORKER_DIR", t.TempDir())
	t.Setenv("LC_TIME", "C")
	t.Setenv("KUBECONFIG", "/etc/kube/config")
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("UNRELATED_HOST_VAR", "x")
	e.writeConfig(t, `profiles:
  dev:
    git: {token_env: GITHUB_TOKEN}
    sandbox: {provider: local, plugin_env: [KUBECONFIG]}
`)
	r := amelia(t, "", "sandbox", "exec", "--", "sh", "-c", parentEnviron)
	if r.code != 0 {
		t.Fatalf("exec: exit %d: %s", r.code, r.stderr)
	}
	checkPluginEnviron(t, r.stdout, secrets,
		[]string{"PATH", "HOME", "AMELIA_WORKER_DIR", "LC_TIME", "KUBECONFIG"},
		[]string{"UNRELATED_HOST_VAR", "DOCKER_CONFIG"})

	// plugin ls starts every plugin for no profile: the base and what its
	// provider declares, which the debug log lists by name.
	r = amelia(t, "", "--debug", "plugin", "ls")
	if r.code != 0 {
		t.Fatalf("plugin ls: exit %d: %s", r.code, r.stderr)
	}
	starts := 0
	for line := range strings.Lines(r.stderr) {
		if !strings.Contains(line, `msg="starting provider plugin"`) {
			continue
		}
		starts++
		for _, name := range []string{"UNRELATED_HOST_VAR", "OPENAI_API_KEY", "GITHUB_TOKEN", "AMELIA_PROFILES__"} {
			if strings.Contains(line, name) {
				t.Errorf("plugin ls started a plugin with %s: %s", name, line)
			}
		}
		if docker := strings.Contains(line, "plugin=docker"); docker != strings.Contains(line, "DOCKER_CONFIG") {
			t.Errorf("only docker declares DOCKER_CONFIG: %s", line)
		}
		if kube := strings.Contains(line, "plugin=kubernetes"); kube != strings.Contains(line, "KUBECONFIG") {
			t.Errorf("only kubernetes declares KUBECONFIG: %s", line)
		}
	}
	if starts != len(linked.Providers()) {
		t.Errorf("plugin ls logged %d plugin starts, want %d:\n%s", starts, len(linked.Providers()), r.stderr)
	}
}

// A profile that grants its plugin the LLM key's variable starts nothing.
func TestPluginEnvRefusesTheLLMKey(t *testing.T) {
	e := newEnv(t)
	t.Setenv("OPENAI_API_KEY", "sk-"+rand.Text())
	e.writeConfig(t, "profiles:\n  dev:\n    sandbox: {provider: local, plugin_env: [KUBECONFIG, OPENAI_API_KEY]}\n")
	r := amelia(t, "", "sandbox", "exec", "--", "echo", "should not run")
	want := "amelia: profile dev: sandbox.plugin_env: OPENAI_API_KEY is the profile's llm.api_key_env; the LLM key never goes to a provider\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Errorf("exit %d stdout %q stderr %q; want 1 and %q", r.code, r.stdout, r.stderr, want)
	}
	// config validate says so before anything runs.
	r = amelia(t, "", "config", "validate")
	want = e.home + "/.config/amelia/config.yaml: profiles.dev: sandbox.plugin_env: OPENAI_API_KEY is the profile's llm.api_key_env; the LLM key never goes to a provider\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("validate: exit %d stderr %q; want 1 and %q", r.code, r.stderr, want)
	}
}
