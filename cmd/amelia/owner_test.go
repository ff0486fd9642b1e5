package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// sandboxName is the name amelia gives the sandbox of the host's profile
// (sandbox.Name): the profile's and a digest of this machine, the host's
// config file (or the built-in default standing in for it) and the
// profile.
func (h *host) sandboxName(t testing.TB, profile string) string {
	t.Helper()
	env := map[string]string{}
	for _, kv := range h.env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	c, err := config.Load(config.Options{
		HomeDir:   h.home,
		Environ:   h.env,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Profile(profile)
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.Name(p, sandbox.Owner())
}

// checkTwoConfigs drives a and b, two hosts (config files) whose profile
// e2e has the same sandbox block, side by side: each config's commands
// see, use and remove only its own sandbox.
func checkTwoConfigs(t *testing.T, a, b *host) {
	t.Helper()
	nameA, nameB := a.sandboxName(t, "e2e"), b.sandboxName(t, "e2e")
	if nameA == nameB {
		t.Fatalf("both configs' e2e sandboxes are named %s", nameA)
	}
	t.Cleanup(func() { a.amelia(t, "stop", "--force"); b.amelia(t, "stop", "--force") })
	must := func(h *host, code int, args ...string) result {
		t.Helper()
		r := h.amelia(t, args...)
		if r.code != code {
			t.Fatalf("amelia %s: exit %d, want %d\n%s%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		return r
	}
	// whose says, through the sandbox's own name, which sandbox an exec
	// of h's runs in.
	whose := func(h *host) string {
		t.Helper()
		return strings.TrimSpace(must(h, 0, "sandbox", "exec", "--", "sh", "-c", `echo "$AMELIA_SANDBOX"`).stdout)
	}
	// aRuns fails the test unless A's sandbox is still there, ready.
	aRuns := func(after string) {
		t.Helper()
		if r := a.amelia(t, "sandbox", "health"); r.code != 0 || !strings.Contains(r.stdout, nameA+" of profile e2e: ready") {
			t.Fatalf("after %s, A's sandbox: exit %d\n%s%s", after, r.code, r.stdout, r.stderr)
		}
	}
	// notA fails the test when B's output mentions A's sandbox.
	notA := func(what string, r result) {
		t.Helper()
		if strings.Contains(r.stdout+r.stderr, nameA) {
			t.Errorf("%s under config B speaks of A's sandbox %s:\n%s%s", what, nameA, r.stdout, r.stderr)
		}
	}

	up := must(a, 0, "sandbox", "up")
	if !strings.Contains(up.stdout, "sandbox "+nameA+" of profile e2e created") {
		t.Fatalf("A's sandbox up:\n%s", up.stdout)
	}

	// B sees its own sandbox, absent, and nothing of A's.
	ls := must(b, 0, "sandbox", "ls")
	if !strings.Contains(ls.stdout, nameB) || !strings.Contains(ls.stdout, "absent") {
		t.Errorf("B's sandbox ls does not show its own sandbox %s absent:\n%s", nameB, ls.stdout)
	}
	notA("sandbox ls", ls)
	health := must(b, 1, "sandbox", "health")
	if !strings.Contains(health.stdout, nameB+" of profile e2e: absent") {
		t.Errorf("B's sandbox health:\n%s%s", health.stdout, health.stderr)
	}
	notA("sandbox health", health)

	// B's exec runs in a sandbox of B's own, which it makes.
	if got := whose(b); got != nameB {
		t.Errorf("B's sandbox exec ran in sandbox %q, want its own %s", got, nameB)
	}
	aRuns("B's exec")
	if got := whose(a); got != nameA {
		t.Errorf("A's sandbox exec ran in sandbox %q, want %s", got, nameA)
	}

	// B's down and stop remove B's own, and leave A's.
	down := must(b, 0, "sandbox", "down")
	if !strings.Contains(down.stdout, "sandbox "+nameB+" of profile e2e removed") {
		t.Errorf("B's sandbox down:\n%s", down.stdout)
	}
	notA("sandbox down", down)
	aRuns("B's sandbox down")
	whose(b)
	stop := must(b, 0, "stop")
	if !strings.Contains(stop.stdout, "sandbox "+nameB+" of profile e2e removed") {
		t.Errorf("B's stop:\n%s", stop.stdout)
	}
	notA("stop", stop)
	aRuns("B's stop")

	// A's stop removes A's only.
	whose(b)
	stop = must(a, 0, "stop")
	if !strings.Contains(stop.stdout, "sandbox "+nameA+" of profile e2e removed") || strings.Contains(stop.stdout, nameB) {
		t.Errorf("A's stop:\n%s", stop.stdout)
	}
	must(a, 1, "sandbox", "health")
	if r := b.amelia(t, "sandbox", "health"); r.code != 0 || !strings.Contains(r.stdout, nameB+" of profile e2e: ready") {
		t.Errorf("after A's stop, B's sandbox: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// Two config files with the same profile name on one Docker engine: each
// sees, uses and removes only its own container. A container of an older
// version, named for the profile alone, is A's by its labels: A's ls
// shows it and A's stop removes it; B's commands leave it alone.
func TestTwoConfigsOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	a := newDockerHost(t, cli, dockerSandbox("open"))
	b := newDockerHost(t, cli, dockerSandbox("open"))
	checkTwoConfigs(t, a, b)

	// An older version's container of A's profile e2e. Its name is one
	// only this test makes: the engine may hold a user's of that name.
	legacy := "amelia-sandbox-e2e"
	if _, err := cli.ContainerInspect(t.Context(), legacy, client.ContainerInspectOptions{}); err == nil {
		t.Skipf("a container %s exists on the engine (a user's, of an older amelia): this test leaves it alone", legacy)
	}
	res, err := cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Name: legacy,
		Config: &container.Config{Image: image.TestBase, Cmd: []string{"sleep", "infinity"}, Labels: map[string]string{
			sandbox.LabelProfile: "e2e", sandbox.LabelConfig: a.configPath(), sandbox.LabelOwner: sandbox.Owner(),
		}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerStart(t.Context(), res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := b.amelia(t, "sandbox", "ls"); r.code != 0 || strings.Contains(r.stdout, "older") {
		t.Errorf("B's sandbox ls shows A's older container: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := b.amelia(t, "stop"); r.code != 0 || strings.Contains(r.stdout, "sandbox e2e ") {
		t.Errorf("B's stop: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := cli.ContainerInspect(t.Context(), res.ID, client.ContainerInspectOptions{}); err != nil {
		t.Fatalf("B's stop removed A's older container: %v", err)
	}
	if r := a.amelia(t, "sandbox", "ls"); r.code != 0 || !strings.Contains(r.stdout, "named by an older amelia") {
		t.Errorf("A's sandbox ls does not show its older container:\n%s%s", r.stdout, r.stderr)
	}
	if r := a.amelia(t, "stop"); r.code != 0 || !strings.Contains(r.stdout, "sandbox e2e of profile e2e removed (provider docker)") {
		t.Errorf("A's stop: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := cli.ContainerInspect(t.Context(), res.ID, client.ContainerInspectOptions{}); err == nil {
		t.Error("A's stop left its older container")
	}
}

// Two config files with the same profile name on one SSH machine and
// root: each sees, uses and removes only its own directory.
func TestTwoConfigsOnSSH(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	root := t.TempDir()
	block := sshSandbox(t, srv, root)
	a := newHostWith(t, block, root, llmtest.Options{})
	b := newHostWith(t, block, root, llmtest.Options{})
	checkTwoConfigs(t, a, b)
}

// Two config files with the same profile name in one Daytona
// organisation (the fake's, its sandboxes host directories): each sees,
// uses and removes only its own sandbox.
func TestTwoConfigsOnDaytona(t *testing.T) {
	f := daytonatest.Start(t, daytonatest.Options{})
	block := daytonaSandbox(t, f, "open")
	a := newHostWith(t, block, "", llmtest.Options{})
	b := newHostWith(t, block, "", llmtest.Options{})
	for _, h := range []*host{a, b} {
		h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
	}
	checkTwoConfigs(t, a, b)
	if left := f.Sandboxes(); len(left) != 1 {
		t.Errorf("Daytona holds %d sandboxes, want B's alone", len(left))
	}
}

// The built-in default of two homes (no config file in either) are two
// configs: their sandboxes are named apart.
func TestBuiltinDefaultsOfTwoHomes(t *testing.T) {
	a, b := newBareHost(t), newBareHost(t)
	if _, err := os.Stat(filepath.Dir(a.configPath())); err != nil {
		t.Fatal(err)
	}
	if na, nb := a.sandboxName(t, "local"), b.sandboxName(t, "local"); na == nb {
		t.Errorf("the built-in defaults of two homes both name their sandbox %s", na)
	}
}
