package cli

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin/linked"
	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// startEnv is the environment the tests started with: tests change HOME,
// and go build needs the real one to find its caches.
var startEnv = os.Environ()

// Launched by go-plugin as `<test binary> plugin serve NAME`, the test binary
// is amelia serving a built-in provider.
func TestMain(m *testing.M) {
	if os.Getenv(providerwire.Handshake.MagicCookieKey) != "" {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr, linked.Providers()))
	}
	os.Exit(m.Run())
}

// env is a test's own home and environment.
type env struct {
	home string
}

func newEnv(t *testing.T) env {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "AMELIA_") || strings.HasPrefix(k, "XDG_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
	// The test's own TMPDIR, short enough for sockets' paths: its shared
	// provider plugins live there, and are stopped when it ends.
	tmp, err := os.MkdirTemp("", "amc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)
	t.Cleanup(func() {
		sharedtest.Stop(t, tmp)
		os.RemoveAll(tmp)
	})
	return env{home: home}
}

// writeConfig writes the default config file.
func (e env) writeConfig(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(e.home, ".config", "amelia", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type result struct {
	code           int
	stdout, stderr string
}

func amelia(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := newApp(strings.NewReader(stdin), &out, &errb, linked.Providers()).run(t.Context(), args)
	return result{code, out.String(), errb.String()}
}

// normalize replaces the paths, times and ages that change between runs.
// An age in `sandbox ls` keeps its width, so the table stays aligned.
func (e env) normalize(s string) string {
	s = strings.NewReplacer(e.home, "$HOME", filepath.Dir(os.Args[0]), "$BINDIR").Replace(s)
	s = createdTime.ReplaceAllString(s, `"created": "$$TIME"`)
	// A sandbox's digest is of the host and the config file's path.
	s = sandboxDigest.ReplaceAllString(s, "${1}-<digest>")
	return lsAge.ReplaceAllStringFunc(s, func(m string) string {
		return "  Ns" + strings.Repeat(" ", len(m)-4)
	})
}

var (
	createdTime = regexp.MustCompile(`"created": "[^"]+"`)
	// sandboxDigest is the end of a sandbox's name (sandbox.Name); its
	// stand-in is as wide, so that tables stay aligned.
	sandboxDigest = regexp.MustCompile(`\b([a-z0-9][a-z0-9_]*)-[0-9a-f]{8}\b`)
	lsAge         = regexp.MustCompile(`  \d{1,2}s +`)
)

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", name, path, got, want)
	}
}

const localWarning = "amelia: warning: provider local isolates nothing: commands run directly on this machine as the current user\n"

func TestVersion(t *testing.T) {
	e := newEnv(t)
	r := amelia(t, "", "version")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	first, rest, _ := strings.Cut(r.stdout, "\n")
	if want := fmt.Sprintf("amelia %s (%s/%s, %s)", buildinfo.Version(), runtime.GOOS, runtime.GOARCH, runtime.Version()); first != want {
		t.Errorf("first line %q, want %q", first, want)
	}
	golden(t, "version", e.normalize(rest))
	if r := amelia(t, "", "--version"); r.code != 0 || r.stdout != first+"\n" {
		t.Errorf("--version: exit %d, %q; want %q", r.code, r.stdout, first+"\n")
	}
}

func TestVersionFindsWorkersInAmeliaWorkerDir(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "amelia-worker-linux-arm64"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AMELIA_WORKER_DIR", dir)
	r := amelia(t, "", "version")
	want := "worker linux/amd64: not found\nworker linux/arm64: " + filepath.Join(dir, "amelia-worker-linux-arm64") + "\n"
	if !strings.HasSuffix(r.stdout, want) {
		t.Errorf("stdout:\n%s\nwant it to end with:\n%s", e.normalize(r.stdout), want)
	}
}

// What `make run` runs: a command in the embedded default's sandbox.
func TestExecKeepsStreamsAndExitCode(t *testing.T) {
	newEnv(t)
	r := amelia(t, "", "sandbox", "exec", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "out\n" || r.stderr != localWarning+"err\n" {
		t.Errorf("got exit %d stdout %q stderr %q; want 3, %q, %q", r.code, r.stdout, r.stderr, "out\n", localWarning+"err\n")
	}
}

func TestExecFlags(t *testing.T) {
	newEnv(t)
	amelia(t, "", "sandbox", "exec", "--", "mkdir", "sub")
	r := amelia(t, "piped in", "sandbox", "exec", "-i", "-e", "GREETING=hi there", "-w", "sub", "--", "sh", "-c", `printf '%s|%s|' "$GREETING" "$(basename "$(pwd)")"; cat`)
	if r.code != 0 || r.stdout != "hi there|sub|piped in" {
		t.Errorf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// Without -i the command's stdin is empty, not amelia's.
	if r := amelia(t, "not passed", "sandbox", "exec", "--", "cat"); r.stdout != "" || r.code != 0 {
		t.Errorf("without -i: exit %d stdout %q", r.code, r.stdout)
	}
	// Flags after the command are the command's.
	if r := amelia(t, "", "sandbox", "exec", "sh", "-c", "echo -n flag-passed"); r.stdout != "flag-passed" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := amelia(t, "", "sandbox", "exec", "--timeout", "200ms", "--", "sleep", "60"); r.code != 128+15 || !strings.Contains(r.stderr, `"sleep" timed out after 200ms`) {
		t.Errorf("timeout: exit %d stderr %q", r.code, r.stderr)
	}
}

func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t)
	steps := []struct {
		args []string
		code int
	}{
		{[]string{"sandbox", "ls"}, 0},
		{[]string{"sandbox", "health"}, 1},
		{[]string{"sandbox", "up"}, 0},
		{[]string{"sandbox", "up"}, 0},
		{[]string{"sandbox", "health"}, 0},
		{[]string{"sandbox", "ls"}, 0},
		{[]string{"sandbox", "ls", "--json"}, 0},
		{[]string{"sandbox", "down"}, 0},
		{[]string{"sandbox", "down"}, 0},
		{[]string{"sandbox", "health"}, 1},
	}
	var transcript strings.Builder
	for _, s := range steps {
		r := amelia(t, "", s.args...)
		if r.code != s.code {
			t.Errorf("amelia %s: exit %d, want %d (stderr %q)", strings.Join(s.args, " "), r.code, s.code, r.stderr)
		}
		transcript.WriteString("$ amelia " + strings.Join(s.args, " ") + "\n" + r.stdout + r.stderr)
	}
	golden(t, "lifecycle", e.normalize(transcript.String()))
	if left, err := os.ReadDir(filepath.Join(e.home, ".local", "state", "amelia", "local")); len(left) != 0 {
		t.Errorf("the sandbox directory is still there after down: %v, %v", left, err)
	}
}

const twoProfiles = `default_profile: a
profiles:
  a:
    sandbox: {provider: local}
  b:
    sandbox: {provider: none}
`

// TestStopAndOrphans: sandbox ls shows each profile's sandbox with its
// workflows, and the orphan a removed profile left; stop --profile removes
// only that profile's; stop removes every profile's and the orphans, but
// not a sandbox another config file made in the same place.
func TestStopAndOrphans(t *testing.T) {
	e := newEnv(t)
	other := filepath.Join(t.TempDir(), "other.yaml")
	if err := os.WriteFile(other, []byte("profiles:\n  elsewhere:\n    sandbox: {provider: local}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := amelia(t, "", "--config", other, "sandbox", "up"); r.code != 0 {
		t.Fatalf("up elsewhere: %s", r.stderr)
	}
	e.writeConfig(t, twoProfiles+"  gone:\n    sandbox: {provider: local}\n")
	for _, p := range []string{"a", "b", "gone"} {
		if r := amelia(t, "", "--profile", p, "sandbox", "up"); r.code != 0 {
			t.Fatalf("up %s: %s", p, r.stderr)
		}
	}
	// A workflow's worktree, as amelia run leaves it while it runs.
	if r := amelia(t, "", "--profile", "a", "sandbox", "exec", "--", "mkdir", "-p", "worktrees/fix-login-3f9a"); r.code != 0 {
		t.Fatalf("mkdir: %s", r.stderr)
	}
	e.writeConfig(t, twoProfiles) // the profile "gone" is gone; its sandbox is not
	var transcript strings.Builder
	for _, step := range []struct {
		args []string
		code int
	}{
		{[]string{"sandbox", "ls"}, 0},
		{[]string{"sandbox", "ls", "--json"}, 0},
		{[]string{"--profile", "b", "stop"}, 0},
		{[]string{"sandbox", "ls"}, 0},
		// a's worktree is work nobody brought back: a is left alone.
		{[]string{"stop"}, 1},
		{[]string{"sandbox", "ls"}, 0},
		{[]string{"sandbox", "down", "--profile", "a"}, 1},
		{[]string{"stop", "--force"}, 0},
		{[]string{"sandbox", "ls"}, 0},
	} {
		r := amelia(t, "", step.args...)
		if r.code != step.code {
			t.Errorf("amelia %s: exit %d, want %d (stderr %q)", strings.Join(step.args, " "), r.code, step.code, r.stderr)
		}
		transcript.WriteString("$ amelia " + strings.Join(step.args, " ") + "\n" + r.stdout + r.stderr)
	}
	golden(t, "stop", e.normalize(transcript.String()))
	if _, err := os.Stat(filepath.Join(e.home, ".local", "state", "amelia", "local", "gone")); !os.IsNotExist(err) {
		t.Errorf("the orphan's directory is still there after stop: %v", err)
	}
	if r := amelia(t, "", "--config", other, "sandbox", "health"); r.code != 0 {
		t.Errorf("the other config's sandbox after stop: %s%s", r.stdout, r.stderr)
	}
}

func TestNetworkPolicyFailsClosed(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(t, "profiles:\n  dev:\n    sandbox: {provider: local, network: none}\n")
	r := amelia(t, "", "sandbox", "exec", "--", "echo", "should not run")
	want := `amelia: ` + e.home + `/.config/amelia/config.yaml: profiles.dev.sandbox.network: provider local cannot enforce "none" (it can enforce: open); pick another provider or network mode` + "\n"
	if r.code != 1 || r.stdout != "" || r.stderr != want {
		t.Errorf("exit %d stdout %q stderr %q; want 1 and %q", r.code, r.stdout, r.stderr, want)
	}
	if _, err := os.Stat(filepath.Join(e.home, ".local", "state", "amelia", "local", "dev")); !os.IsNotExist(err) {
		t.Errorf("a sandbox was created for a policy the provider cannot enforce: %v", err)
	}
}

func TestConfigShow(t *testing.T) {
	e := newEnv(t)
	golden(t, "config-show-builtin", e.normalize(amelia(t, "", "config", "show").stdout))
	e.writeConfig(t, twoProfiles+`  c:
    llm: {base_url: "https://llm.test/api/v1", api_key: sk-or-very-secret}
    sandbox: {provider: local, local: {root: /tmp/x, token: hush}}
`)
	r := amelia(t, "", "--profile", "c", "config", "show")
	if strings.Contains(r.stdout, "very-secret") || strings.Contains(r.stdout, "hush") {
		t.Errorf("config show printed a secret:\n%s", r.stdout)
	}
	golden(t, "config-show-profile", e.normalize(r.stdout))
}

func TestConfigErrors(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(t, `default_profile: dev
profiles:
  dev:
    model: ""
    sandbox:
      provider: local
      network: opn
      allowed_hosts: ["https://forge.test"]
  other:
    sandbox: {provider: no-such-provider}
`)
	var transcript strings.Builder
	for _, args := range [][]string{
		{"config", "validate"},
		{"sandbox", "exec", "--", "true"},
	} {
		r := amelia(t, "", args...)
		if r.code != 1 {
			t.Errorf("amelia %s: exit %d, want 1", strings.Join(args, " "), r.code)
		}
		transcript.WriteString("$ amelia " + strings.Join(args, " ") + "\n" + r.stdout + r.stderr)
	}
	e.writeConfig(t, "profiles:\n  dev:\n    sandbox: {provider: no-such-provider}\n")
	r := amelia(t, "", "config", "validate")
	transcript.WriteString("$ amelia config validate\n" + r.stdout + r.stderr)
	e.writeConfig(t, "profiles: [\n")
	r = amelia(t, "", "config", "show")
	transcript.WriteString("$ amelia config show\n" + r.stdout + r.stderr)

	// What only the providers can tell: their settings, key by key, and
	// a network policy they cannot enforce. Validate lists it all; a
	// command that would start the sandbox refuses it before it starts.
	e.writeConfig(t, `default_profile: dev
profiles:
  dev:
    sandbox:
      provider: docker
      docker:
        base_image: amelia-base:bookworm
        imagee: amelia-base:bookworm
        resources: {memroy: 4g, memory: 4x, limits: {gpus: 1}}
  fenced:
    sandbox: {provider: local, network: none}
  remote:
    sandbox:
      provider: ssh
      network: none
      ssh: {host: build-1.test, identity_file: ~/.ssh/id}
`)
	for _, step := range []struct {
		args []string
		env  []string
	}{
		{args: []string{"config", "validate"}},
		{args: []string{"config", "validate"}, env: []string{"AMELIA_PROFILES__DEV__SANDBOX__DOCKER__RESOURCES__MEMORY", "lots"}},
		{args: []string{"sandbox", "up"}},
		{args: []string{"--profile", "fenced", "sandbox", "exec", "--", "true"}},
	} {
		prefix := ""
		if step.env != nil {
			t.Setenv(step.env[0], step.env[1])
			prefix = step.env[0] + "='" + step.env[1] + "' "
		}
		r := amelia(t, "", step.args...)
		if step.env != nil {
			os.Unsetenv(step.env[0])
		}
		if r.code != 1 {
			t.Errorf("amelia %s: exit %d, want 1", strings.Join(step.args, " "), r.code)
		}
		transcript.WriteString("$ " + prefix + "amelia " + strings.Join(step.args, " ") + "\n" + r.stdout + r.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.home, ".local", "state", "amelia", "local", "fenced")); !os.IsNotExist(err) {
		t.Errorf("a sandbox was created for a profile with problems: %v", err)
	}

	// An override for a profile the config does not have names itself.
	os.Remove(filepath.Join(e.home, ".config", "amelia", "config.yaml"))
	t.Setenv("AMELIA_PROFILES__DEV__SANDBOX__PROVIDER", "docker")
	for _, args := range [][]string{{"sandbox", "ls"}, {"config", "validate"}} {
		r := amelia(t, "", args...)
		if r.code != 1 {
			t.Errorf("amelia %s: exit %d, want 1", strings.Join(args, " "), r.code)
		}
		transcript.WriteString("$ AMELIA_PROFILES__DEV__SANDBOX__PROVIDER=docker amelia " + strings.Join(args, " ") + "\n" + r.stdout + r.stderr)
	}
	golden(t, "config-errors", e.normalize(transcript.String()))
}

// config validate reports every problem at once: the file's own and,
// for what of the file could be read, what each profile's provider finds
// in its settings block; a network mode in doubt is not held against the
// provider, and a provider in doubt is not asked.
func TestConfigValidateReportsEverything(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(t, `default_profile: dev
profiles:
  dev:
    sandbox:
      provider: docker
      network: opn
      docker:
        imag: amelia-base:bookworm
        resources: {memroy: 4g}
  remote:
    sandbox:
      provider: ssh
      network: nonee
      ssh: {host: build-1.test}
  fenced:
    sandbox: {provider: local, network: none}
  typo:
    sandbox:
      provider: "dock er"
      dock er: {imag: x}
`)
	r := amelia(t, "", "config", "validate")
	if r.code != 1 {
		t.Errorf("config validate: exit %d, want 1", r.code)
	}
	golden(t, "config-validate-all", e.normalize(r.stdout+r.stderr))
}

func TestUsageErrors(t *testing.T) {
	newEnv(t)
	for _, args := range [][]string{
		{"vesion"},
		{"sandbox", "bogus"},
		{"config", "shw"},
		{"sandbox", "exec"},
		{"sandbox", "exec", "--no-such-flag", "--", "true"},
		{"sandbox", "exec", "-e", "NOEQUALS", "--", "true"},
		{"version", "extra"},
		{"plugin", "serve", "no-such"},
	} {
		r := amelia(t, "", args...)
		if r.code != 2 || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "amelia: ") {
			t.Errorf("amelia %s: exit %d stderr %q; want 2 and one line", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

func TestUnknownCommandSuggests(t *testing.T) {
	newEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"vesion"}, `amelia: unknown command "vesion" for "amelia" (did you mean version?)` + "\n"},
		{[]string{"sandbox", "exce"}, `amelia: unknown command "exce" for "amelia sandbox" (did you mean exec?)` + "\n"},
	} {
		if r := amelia(t, "", tc.args...); r.code != 2 || r.stderr != tc.want {
			t.Errorf("amelia %s: exit %d stderr %q, want 2 and %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

func TestDebugShowsPluginLogs(t *testing.T) {
	newEnv(t)
	r := amelia(t, "", "--debug", "sandbox", "up")
	// Attributes parsed back from a plugin's JSON log come in any order.
	for _, want := range [][]string{
		{`msg="starting provider plugin"`, "plugin=local"},
		{`msg="created local sandbox"`, "plugin=local", "sandbox=local", "level=INFO"},
	} {
		found := false
		for line := range strings.Lines(r.stderr) {
			all := true
			for _, w := range want {
				all = all && strings.Contains(line, w)
			}
			found = found || all
		}
		if !found {
			t.Errorf("--debug log has no line with all of %q:\n%s", want, r.stderr)
		}
	}
}

// buildHello builds the example third-party provider into a directory of its
// own and returns the directory.
func buildHello(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "amelia-provider-hello"), ".")
	cmd.Dir = filepath.Join("..", "..", "..", "examples", "provider-hello")
	cmd.Env = startEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build examples/provider-hello: %v\n%s", err, out)
	}
	return dir
}

// The extension story end to end: a third-party binary on the plugin path
// is listed, validated and used like a built-in provider.
func TestThirdPartyProvider(t *testing.T) {
	e := newEnv(t)
	dir := buildHello(t)
	shadow := filepath.Join(t.TempDir(), "amelia-provider-local")
	if err := os.WriteFile(shadow, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AMELIA_PLUGIN_PATH", dir+string(os.PathListSeparator)+filepath.Dir(shadow))

	r := amelia(t, "", "plugin", "ls")
	if r.code != 0 {
		t.Fatalf("plugin ls: exit %d: %s", r.code, r.stderr)
	}
	golden(t, "plugin-ls", strings.NewReplacer(dir, "$HELLODIR", filepath.Dir(shadow), "$SHADOWDIR").Replace(e.normalize(r.stdout+r.stderr)))

	// The plugin checks its settings for config validate.
	e.writeConfig(t, "profiles:\n  hi:\n    sandbox:\n      provider: hello\n      hello: {rooot: /tmp}\n")
	r = amelia(t, "", "config", "validate")
	if want := e.home + "/.config/amelia/config.yaml: profiles.hi.sandbox.hello.rooot: unknown key, did you mean root? (known: root)\n"; r.code != 1 || r.stderr != want {
		t.Errorf("validate a typo in hello's settings: exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
	}
	e.writeConfig(t, "profiles:\n  hi:\n    sandbox:\n      provider: hello\n      plugin_env: [KUBECONFIG]\n      hello: {root: "+t.TempDir()+"}\n")
	if r := amelia(t, "", "config", "validate"); r.code != 0 {
		t.Errorf("validate: %s", r.stderr)
	}
	r = amelia(t, "", "sandbox", "exec", "--", "sh", "-c", "echo from hello; exit 7")
	if r.code != 7 || r.stdout != "from hello\n" {
		t.Errorf("exec through hello: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	// The plugin has the base and what the profile grants, nothing else of
	// the host's.
	secrets := hostSecrets(t, "hi")
	t.Setenv("KUBECONFIG", "/etc/kube/config")
	t.Setenv("DOCKER_HOST", "unix:///nowhere.sock")
	r = amelia(t, "", "sandbox", "exec", "--", "sh", "-c", parentEnviron)
	if r.code != 0 {
		t.Fatalf("exec through hello: exit %d: %s", r.code, r.stderr)
	}
	checkPluginEnviron(t, r.stdout, secrets, []string{"PATH", "HOME", "KUBECONFIG"}, []string{"DOCKER_HOST", "AMELIA_PLUGIN_PATH"})
}

func TestDoctor(t *testing.T) {
	e := newEnv(t)
	workers := t.TempDir()
	if err := os.WriteFile(filepath.Join(workers, "amelia-worker-linux-"+runtime.GOARCH), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AMELIA_WORKER_DIR", workers)
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("the CLI tests need git on PATH")
	}
	// The upstreams: one that answers, one that refuses the key (quoting
	// it, as some do), and none at all.
	up := llmtest.New(t)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s"}}`, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
	}))
	t.Cleanup(refusing.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	e.writeConfig(t, fmt.Sprintf(`
default_profile: dev
profiles:
  dev:
    llm: {base_url: %q, api_key_env: DOCTOR_TEST_KEY}
    sandbox: {provider: local}
  fenced:
    llm: {base_url: %q, api_key_env: DOCTOR_TEST_KEY}
    sandbox: {provider: local, network: none, local: {rooot: /tmp}}
  elsewhere:
    llm: {base_url: %q, api_key_env: DOCTOR_TEST_KEY}
    sandbox: {provider: nosuch}
  keyless:
    llm: {base_url: %q, api_key: ""}
    sandbox: {provider: local}
`, up.URL()+"/v1", refusing.URL+"/v1", gone.URL+"/v1", refusing.URL+"/v1"))
	normalize := func(s string) string {
		return strings.NewReplacer(git, "$GIT", workers, "$WORKERS", runtime.GOARCH, "$ARCH",
			up.URL(), "$LLM", refusing.URL, "$REFUSING", gone.URL, "$GONE", gone.Listener.Addr().String(), "$GONEADDR").Replace(e.normalize(s))
	}
	var transcript strings.Builder
	for _, step := range []struct {
		env  string
		args []string
		code int
	}{
		{"", []string{"doctor"}, 1},
		{"sk-set", []string{"doctor", "--profile", "dev"}, 0},
		{"sk-set", []string{"doctor"}, 1},
	} {
		t.Setenv("DOCTOR_TEST_KEY", step.env)
		if step.env == "" {
			os.Unsetenv("DOCTOR_TEST_KEY")
		}
		r := amelia(t, "", step.args...)
		if r.code != step.code {
			t.Errorf("%v: exit %d, want %d; stderr %q", step.args, r.code, step.code, r.stderr)
		}
		fmt.Fprintf(&transcript, "$ amelia %s\n%s", strings.Join(step.args, " "), normalize(r.stdout))
	}
	golden(t, "doctor", transcript.String())
}

// doctor checks a profile's llm.gemini upstream as it checks llm: its key
// is set, and the upstream lists its models with it; never printing it.
func TestDoctorGemini(t *testing.T) {
	e := newEnv(t)
	workers := t.TempDir()
	if err := os.WriteFile(filepath.Join(workers, "amelia-worker-linux-"+runtime.GOARCH), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AMELIA_WORKER_DIR", workers)
	up := llmtest.New(t)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT",`+
			`"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}`)
	}))
	t.Cleanup(refusing.Close)
	e.writeConfig(t, fmt.Sprintf(`
default_profile: good
profiles:
  good:
    llm: {base_url: %[1]q, api_key: "", gemini: {base_url: %[2]q, api_key_env: DOCTOR_GEMINI_KEY}}
    sandbox: {provider: local}
  bad:
    llm: {base_url: %[1]q, api_key: "", gemini: {base_url: %[3]q, api_key_env: DOCTOR_GEMINI_KEY}}
    sandbox: {provider: local}
`, up.URL()+"/v1", up.URL(), refusing.URL))
	os.Unsetenv("DOCTOR_GEMINI_KEY")
	r := amelia(t, "", "doctor", "--profile", "good")
	if want := "✗ Gemini key: profile good: llm.gemini.api_key_env: DOCTOR_GEMINI_KEY is not set in this environment (export it, or set llm.gemini.api_key)"; r.code != 1 || !strings.Contains(r.stdout, want) {
		t.Errorf("without the key: exit %d, want 1 and %q:\n%s", r.code, want, r.stdout)
	}
	t.Setenv("DOCTOR_GEMINI_KEY", "AIza-doctor-SECRET")
	r = amelia(t, "", "doctor", "--profile", "good")
	if want := "✓ Gemini " + up.URL() + " answers and takes the key (1 model(s))"; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("with the key: exit %d, want 0 and %q:\n%s%s", r.code, want, r.stdout, r.stderr)
	}
	if reqs := up.Requests(); len(reqs) != 0 {
		t.Errorf("doctor generated content: %d requests", len(reqs))
	}
	r = amelia(t, "", "doctor", "--profile", "bad")
	if want := "✗ Gemini key: " + refusing.URL + " refused it: HTTP 400 Bad Request: API key not valid. Please pass a valid API key. — check the key"; r.code != 1 || !strings.Contains(r.stdout, want) || strings.Contains(r.stdout+r.stderr, "SECRET") {
		t.Errorf("a refused key: exit %d, want 1 and %q, never the key:\n%s", r.code, want, r.stdout)
	}
}
