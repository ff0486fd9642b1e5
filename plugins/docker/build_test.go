package docker_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// A step that fails ends EnsureRunning with the step and its output; no
// container is left.
func TestBuildFailureShowsTheStep(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "Dockerfile"), "FROM "+image.TestBase+"\nRUN echo preparing the thing; echo it went wrong >&2; exit 3\n")
	p := newProvider(t)
	s := spec(t, dockertest.Settings(map[string]any{"dockerfile": filepath.Join(dir, "Dockerfile")}), sdk.NetworkOpen)
	_, err := p.EnsureRunning(t.Context(), s)
	if err == nil {
		t.Fatal("EnsureRunning built a Dockerfile whose RUN fails")
	}
	first, rest, _ := strings.Cut(err.Error(), "\n")
	if !strings.Contains(first, "Step 2/2 : RUN echo preparing the thing") || !strings.Contains(first, "returned a non-zero code: 3") {
		t.Errorf("the error's first line does not name the failing step and its exit code:\n%s", first)
	}
	if !strings.Contains(rest, "preparing the thing") || !strings.Contains(rest, "it went wrong") {
		t.Errorf("the error does not carry the step's output:\n%s", err)
	}
	list, _ := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("name", "amelia-sandbox-"+s.Name)})
	if len(list.Items) != 0 {
		t.Errorf("a failed build left a container: %v", list.Items[0].Names)
	}
}

// The image is built once and reused; a different worker builds a new
// image, which a new sandbox runs with that worker inside.
func TestImageRebuiltWhenTheWorkerChanges(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	settings := dockertest.Settings(nil)
	tag, err := p.BuildImage(t.Context(), settings, false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if again, err := p.BuildImage(t.Context(), settings, false, &out); err != nil || again != tag || !strings.Contains(out.String(), "up to date") {
		t.Errorf("second build: %s %v %q, want %s up to date", again, err, out.String(), tag)
	}

	// Another build of the worker: the same program, other bytes (new ones
	// each run, so the image is new).
	name := builtWorker(t)
	b, err := os.ReadFile(filepath.Join(workerDir, name))
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, rand.Text()...)
	otherDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(otherDir, name), b, 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	p2 := docker.New(docker.Options{WorkerDirs: []string{otherDir}})
	t.Cleanup(func() { p2.Close() })
	out.Reset()
	newTag, err := p2.BuildImage(t.Context(), settings, false, &out)
	if err != nil {
		t.Fatal(err)
	}
	dockertest.RemoveImage(t, cli, newTag)
	if newTag == tag || !strings.Contains(out.String(), "COPY amelia-worker") {
		t.Errorf("a new worker built %s (was %s); output:\n%s", newTag, tag, out.String())
	}
	img, err := cli.ImageInspect(t.Context(), newTag)
	if err != nil {
		t.Fatal(err)
	}
	hash := img.Config.Labels["amelia.image-hash"]
	if !strings.HasPrefix(hash, strings.TrimPrefix(newTag, "amelia-sandbox:")) {
		t.Errorf("image %s is labelled amelia.image-hash=%q", newTag, hash)
	}
	sb := up(t, p2, spec(t, settings, sdk.NetworkOpen))
	if got := run(t, p2, sb.Ref, "", "sha256sum", image.WorkerPath); !strings.HasPrefix(got, hex.EncodeToString(sum[:])) {
		t.Errorf("the new sandbox's worker is %s, want the new build's %x", got, sum)
	}
}

// A devcontainer-style Dockerfile is built in its context (less what
// .dockerignore excludes), and Amelia's image goes on top.
func TestDevcontainerDockerfile(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, ".devcontainer", "Dockerfile"), "FROM "+image.TestBase+"\nCOPY . /devcontext/\n")
	writeFile(t, filepath.Join(dir, "tool.txt"), "a tool\n")
	writeFile(t, filepath.Join(dir, "secret.env"), "TOKEN=do-not-ship\n")
	writeFile(t, filepath.Join(dir, ".dockerignore"), "*.env\n")
	p := newProvider(t)
	s := spec(t, dockertest.Settings(map[string]any{"dockerfile": filepath.Join(dir, ".devcontainer", "Dockerfile"), "build_context": dir}), sdk.NetworkOpen)
	// Registered before up's teardown, so it runs after it: the images go
	// once no container uses them.
	dockertest.RemoveNewImages(t, cli, "amelia-devcontainer")
	var img string
	t.Cleanup(func() {
		if img != "" {
			dockertest.RemoveImageNow(t, cli, img)
		}
	})
	sb := up(t, p, s)
	img = sb.Details["image"]
	got := run(t, p, sb.Ref, "", "sh", "-c", "cat /devcontext/tool.txt; ls /devcontext; id -un; test -x "+image.WorkerPath+" && echo worker")
	if !strings.Contains(got, "a tool") || strings.Contains(got, "secret.env") || !strings.Contains(got, "amelia\nworker") {
		t.Errorf("the sandbox built from the devcontainer Dockerfile shows:\n%s", got)
	}
}

// A ready image that is neither on the engine nor pullable is a clear
// error, and nothing is created.
func TestMissingReadyImage(t *testing.T) {
	dockertest.Engine(t)
	p := newProvider(t)
	_, err := p.EnsureRunning(t.Context(), spec(t, dockertest.Settings(map[string]any{"image": "127.0.0.1:1/amelia/none:test"}), sdk.NetworkOpen))
	if !errors.Is(err, sdk.ErrNotFound) || !strings.Contains(err.Error(), `docker.image "127.0.0.1:1/amelia/none:test" is not on the engine`) {
		t.Errorf("EnsureRunning with a missing image: %v", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// builtWorker names the one worker build the test binary made (its
// sha256 sidecar lies beside it and is not a build).
func builtWorker(t *testing.T) string {
	t.Helper()
	var found []string
	for _, arch := range workerbin.Arches() {
		name := workerbin.FileName(arch)
		if _, err := os.Stat(filepath.Join(workerDir, name)); err == nil {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		t.Fatalf("worker builds in %s: %v, want exactly one", workerDir, found)
	}
	return found[0]
}
