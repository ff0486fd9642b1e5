package docker_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// defaultImageMax is the most the default sandbox image may weigh: the
// docs/providers/docker.md states its size, and the toolchain must stay bounded.
const defaultImageMax = 700 << 20

// The default sandbox can build and test an ordinary project: C with make,
// Python in a venv, and the tools scripts reach for. Its image stays
// within the size docs/providers/docker.md states.
func TestDefaultImageHasTheToolchain(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	sb := up(t, p, spec(t, dockertest.Settings(nil), sdk.NetworkNone))
	const project = `set -e
cd "$(mktemp -d)"
printf '#include <stdio.h>\nint main(void){puts("built");return 0;}\n' > hello.c
printf 'hello: hello.c\n\tcc -o $@ $<\ncheck: hello\n\t./hello\n' > Makefile
make -s check
python3 -m venv venv
venv/bin/python -c 'import sys; print("venv", sys.prefix != sys.base_prefix)'
venv/bin/pip --version >/dev/null && echo pip
echo '{"a":1}' | jq .a
for tool in g++ pkg-config curl unzip xz less ssh rg fzf; do command -v $tool >/dev/null || echo "no $tool"; done
`
	got := run(t, p, sb.Ref, "", "bash", "-c", project)
	if got != "built\nvenv True\npip\n1\n" {
		t.Errorf("an ordinary project in the default sandbox:\n%s", got)
	}
	res, err := cli.ImageInspect(t.Context(), sb.Details["image"])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the default sandbox image %s is %d MB", sb.Details["image"], res.Size>>20)
	if res.Size > defaultImageMax {
		t.Errorf("the default sandbox image is %d MB, more than the %d MB docs/providers/docker.md states", res.Size>>20, defaultImageMax>>20)
	}
}

// A project's own Dockerfile gets none of the toolchain forced in: what it
// lacks stays missing unless the profile lists it in docker.packages. Its
// build arguments reach it, and docker.env reaches every command.
func TestProjectDockerfileGetsItsOwnEnvironment(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveNewImages(t, cli, "amelia-devcontainer") // after the containers
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	dir := t.TempDir()
	// jq leaves the image: the toolchain would bring it back.
	writeFile(t, filepath.Join(dir, "Dockerfile"), "FROM "+image.TestBase+"\nARG VARIANT=unset\nRUN dpkg --purge jq && echo \"$VARIANT\" > /variant\n")
	p := newProvider(t)
	sb := up(t, p, spec(t, dockertest.Settings(map[string]any{
		"dockerfile": filepath.Join(dir, "Dockerfile"),
		"build_args": map[string]any{"VARIANT": "3.11"},
		"env":        map[string]any{"PROJECT_MODE": "test", "PATH": "/opt/project/bin:/usr/local/bin:/usr/bin:/bin"},
	}), sdk.NetworkNone))
	got := run(t, p, sb.Ref, "", "sh", "-c", `cat /variant; echo "$PROJECT_MODE $PATH"; command -v jq || echo no jq`)
	if got != "3.11\ntest /opt/project/bin:/usr/local/bin:/usr/bin:/bin\nno jq\n" {
		t.Errorf("the sandbox of a project's Dockerfile shows:\n%s", got)
	}
}

// A run whose devcontainer asks for another environment than its sandbox
// was made with is refused, saying how to go on; the sandbox is left as it
// is. Without a devcontainer (amelia sandbox exec, attach) it is reused.
func TestDevcontainerEnvironmentChangeIsRefused(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	settings := func(mode string) map[string]any {
		return map[string]any{"devcontainer_file": ".devcontainer/devcontainer.json", "env": map[string]any{"MODE": mode}}
	}
	s := spec(t, dockertest.Settings(settings("one")), sdk.NetworkNone)
	sb := up(t, p, s)
	if got := inspect(t, cli, sb.Ref.ID).Config.Labels["amelia.devcontainer"]; got != ".devcontainer/devcontainer.json" {
		t.Errorf("the container's amelia.devcontainer label is %q", got)
	}
	again, err := p.EnsureRunning(t.Context(), s)
	if err != nil || again.Ref.ID != sb.Ref.ID {
		t.Fatalf("the same devcontainer did not reuse its sandbox: %v", err)
	}
	changed := s
	changed.Config = dockertest.Settings(settings("two"))
	_, err = p.EnsureRunning(t.Context(), changed)
	if !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "not the one this repository's .devcontainer/devcontainer.json asks for") ||
		!strings.Contains(err.Error(), "amelia sandbox down -p") {
		t.Errorf("a changed devcontainer: %v", err)
	}
	if err := p.Preflight(t.Context(), changed); !errors.Is(err, sdk.ErrConflict) {
		t.Errorf("Preflight of a changed devcontainer: %v", err)
	}
	plain := s
	plain.Config = dockertest.Settings(nil)
	reused, err := p.EnsureRunning(t.Context(), plain)
	if err != nil || reused.Ref.ID != sb.Ref.ID {
		t.Errorf("without a devcontainer the sandbox was not reused: %v", err)
	}
	if got := run(t, p, sb.Ref, "", "sh", "-c", "echo $MODE"); got != "one\n" {
		t.Errorf("the sandbox's env is %q, want the first devcontainer's", got)
	}
}
