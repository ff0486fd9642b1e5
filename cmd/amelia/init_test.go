package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// newBareHost is a user's machine with no config file: a home, and a git
// checkout with one commit.
func newBareHost(t *testing.T) *host {
	t.Helper()
	h := newHost(t, llmtest.Options{})
	if err := os.Remove(h.configPath()); err != nil {
		t.Fatal(err)
	}
	h.withoutKey()
	return h
}

// The quick start: amelia init on a machine with an engine writes a config
// whose default is a docker profile that works; a run on it with the
// scripted model brings the branch back; ls shows the sandbox and stop
// removes it. init keeps an existing file.
func TestInitThenRunOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newBareHost(t)
	dockertest.RemoveContainers(t, cli, "amelia.config="+h.configPath())

	r := h.amelia(t, "init")
	if r.code != 0 {
		t.Fatalf("amelia init: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"wrote " + h.configPath(), "profile docker (the default)", "FROM amelia-base:bookworm", "scripted:echo"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("init's output does not say %q:\n%s", want, r.stdout)
		}
	}
	if fi, err := os.Stat(h.configPath()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config file: %v, %v; want mode 0600", fi, err)
	}
	if r := h.amelia(t, "config", "validate"); r.code != 0 {
		t.Errorf("config validate: exit %d\n%s", r.code, r.stderr)
	}

	r = h.amelia(t, "run", "--workflow", "init", "--model", "scripted:echo", "say hello")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if got := h.git(t, "show", "amelia/init:AMELIA_ECHO.md"); got != "say hello" {
		t.Errorf("AMELIA_ECHO.md on the branch: %q", got)
	}
	name := h.sandboxName(t, "docker")
	if r := h.amelia(t, "sandbox", "ls"); !strings.Contains(r.stdout, "docker   "+name+"  docker") || !strings.Contains(r.stdout, "ready") {
		t.Errorf("sandbox ls does not show the docker sandbox %s ready:\n%s%s", name, r.stdout, r.stderr)
	}
	if r := h.amelia(t, "stop"); r.code != 0 || !strings.Contains(r.stdout, "sandbox "+name+" of profile docker removed (provider docker)") {
		t.Errorf("stop: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	before, _ := os.ReadFile(h.configPath())
	r = h.amelia(t, "init")
	after, _ := os.ReadFile(h.configPath())
	if r.code != 2 || !strings.Contains(r.stderr, "exists") || string(after) != string(before) {
		t.Errorf("init over an existing config: exit %d, %q; the file changed: %t", r.code, r.stderr, string(after) != string(before))
	}
	if r := h.amelia(t, "init", "--force", "--no-build"); r.code != 0 {
		t.Errorf("init --force: exit %d\n%s", r.code, r.stderr)
	}
	if kept, _ := os.ReadFile(h.configPath() + ".bak"); string(kept) != string(before) {
		t.Error("init --force did not keep the old config as .bak")
	}
}

// Without an engine, init makes local the default and says why.
func TestInitWithoutAnEngine(t *testing.T) {
	h := newBareHost(t)
	h.env = append(h.env, "DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-engine.sock"))
	r := h.amelia(t, "init")
	if r.code != 0 {
		t.Fatalf("amelia init: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "profile local (the default)") || !strings.Contains(r.stdout, "no Docker engine answers") {
		t.Errorf("init's output:\n%s", r.stdout)
	}
	// amelia is not on the test's PATH: the next step names it by its path.
	if want := "\n  " + ameliaBin + " run --model scripted:echo"; !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, "make install") {
		t.Errorf("init's next step is not runnable: want %q and how to install it in:\n%s", want, r.stdout)
	}
	cfg, _ := os.ReadFile(h.configPath())
	if !strings.Contains(string(cfg), "default_profile: local") {
		t.Errorf("config:\n%s", cfg)
	}
	if r := h.amelia(t, "config", "validate"); r.code != 0 {
		t.Errorf("config validate: exit %d\n%s", r.code, r.stderr)
	}
}

// Once PATH finds this amelia, init's next step is plain amelia run.
func TestInitNamesAmeliaOnPath(t *testing.T) {
	h := newBareHost(t)
	h.env = append(h.env, "DOCKER_HOST=unix://"+filepath.Join(t.TempDir(), "no-engine.sock"))
	for i, kv := range h.env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			h.env[i] = "PATH=" + binDir + string(filepath.ListSeparator) + v
		}
	}
	r := h.amelia(t, "init")
	if r.code != 0 {
		t.Fatalf("amelia init: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "\n  amelia run --model scripted:echo") || strings.Contains(r.stdout, "make install") {
		t.Errorf("init's next step with amelia on PATH:\n%s", r.stdout)
	}
}

// amelia run --sandbox docker with no config file makes a container that
// ls sees and stop removes (it was left running, seen by no command).
func TestSandboxFlagIsSeenAndStopped(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newBareHost(t)
	// The built-in default of this test's home, not a user's.
	dockertest.RemoveContainers(t, cli, "amelia.config=built-in:"+h.configPath())
	h.env = append(h.env, "AMELIA_PROFILES__LOCAL__SANDBOX__DOCKER__BASE_IMAGE=amelia-base:bookworm")
	r := h.amelia(t, "run", "--sandbox", "docker", "--workflow", "flag", "--model", "scripted:echo", "hi")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// The summary names the sandbox the run left, and its provider.
	name := h.sandboxName(t, "local")
	if left := "sandbox " + name + " on provider docker (running; amelia stop --profile local removes it)"; !strings.Contains(r.stdout+r.stderr, left) {
		t.Errorf("the run's summary does not say %q:\n%s%s", left, r.stdout, r.stderr)
	}
	r = h.amelia(t, "sandbox", "ls")
	if !strings.Contains(r.stdout, "local    "+name+"  docker") || !strings.Contains(r.stdout, "made by amelia run --sandbox docker") {
		t.Errorf("sandbox ls does not show the docker sandbox %s of profile local:\n%s%s", name, r.stdout, r.stderr)
	}
	r = h.amelia(t, "stop")
	if r.code != 0 || !strings.Contains(r.stdout, "sandbox "+name+" of profile local removed (provider docker)") {
		t.Errorf("stop: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := h.amelia(t, "sandbox", "ls"); r.code != 0 || strings.Contains(r.stdout, "docker") {
		t.Errorf("after stop, sandbox ls: exit %d, still shows a docker sandbox:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// doctor says ✗ for a docker sandbox that amelia run could not start: its
// base image is not on the engine (and cannot be pulled here). sandbox
// up's error names the missing image and the variable that would set
// another. The sandbox of a profile of the same name in another config
// file is not in the way.
func TestDoctorSeesWhatRunWouldRefuse(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, `{provider: docker, docker: {base_image: "amelia-no-such-base:none"}}`)
	r := h.amelia(t, "doctor")
	if r.code != 1 || !strings.Contains(r.stdout, "✗ sandbox absent, and amelia run could not create it") || !strings.Contains(r.stdout, "amelia-no-such-base:none is not on the Docker engine") {
		t.Errorf("doctor with a missing base image: exit %d\n%s", r.code, r.stdout)
	}
	r = h.amelia(t, "sandbox", "up")
	if r.code == 0 || !strings.Contains(r.stderr, "base image amelia-no-such-base:none is not on the Docker engine") ||
		!strings.Contains(r.stderr, "AMELIA_PROFILES__E2E__SANDBOX__DOCKER__BASE_IMAGE=amelia-base:bookworm") {
		t.Errorf("sandbox up with a missing base image: exit %d, stderr %q", r.code, r.stderr)
	}

	// The same profile name in another config file, whose sandbox runs:
	// it is not this config's, nor in its way.
	other := newDockerHost(t, cli, dockerSandbox("open"))
	if r := other.amelia(t, "sandbox", "up"); r.code != 0 {
		t.Fatalf("sandbox up: exit %d\n%s", r.code, r.stderr)
	}
	mine := newDockerHost(t, cli, dockerSandbox("open"))
	r = mine.amelia(t, "doctor")
	if !strings.Contains(r.stdout, "✓ sandbox absent: amelia run creates it") || strings.Contains(r.stdout, other.configPath()) {
		t.Errorf("doctor beside another config's sandbox: exit %d\n%s", r.code, r.stdout)
	}
}
