package docker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// A container named like a sandbox that Amelia did not create is neither
// used nor removed.
func TestForeignContainerIsLeftAlone(t *testing.T) {
	cli := dockertest.Engine(t)
	foreign := "foreign-" + testRun
	dockertest.RemoveContainers(t, cli, testLabel+"="+foreign)
	p := newProvider(t)
	s := spec(t, dockertest.Settings(nil), sdk.NetworkOpen)
	name := "amelia-sandbox-" + s.Name
	res, err := cli.ContainerCreate(t.Context(), client.ContainerCreateOptions{
		Name:   name,
		Config: &container.Config{Image: image.TestBase, Cmd: []string{"true"}, Labels: map[string]string{testLabel: foreign}},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.EnsureRunning(t.Context(), s)
	if !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "Amelia did not create") {
		t.Errorf("EnsureRunning over a foreign container: %v, want a conflict saying Amelia did not create it", err)
	}
	if err := p.Teardown(t.Context(), s.SandboxRef); !errors.Is(err, sdk.ErrConflict) {
		t.Errorf("Teardown of a foreign container: %v, want a conflict", err)
	}
	if _, err := p.HealthCheck(t.Context(), s.SandboxRef); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("HealthCheck of a foreign container: %v, want not found", err)
	}
	if c := inspect(t, cli, res.ID); c.Config.Labels[testLabel] != foreign {
		t.Errorf("the foreign container changed: %v", c.Config.Labels)
	}
}

// A container removed while a command runs in it ends that command with
// an error saying so; the next exec says the sandbox is gone.
func TestContainerRemovedMidExec(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	sb := up(t, p, spec(t, dockertest.Settings(nil), sdk.NetworkOpen))

	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", "echo running; exec sleep 600"}}, sdk.ExecIO{Stdout: outW})
		outW.Close()
		if err == nil {
			err = fmt.Errorf("no error, exit status %+v", st)
		}
		done <- err
	}()
	line := make([]byte, 8)
	if _, err := io.ReadFull(outR, line); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, outR)
	if _, err := cli.ContainerRemove(t.Context(), sb.Ref.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, sdk.ErrNotFound) || !strings.Contains(err.Error(), "was removed while the command ran") {
		t.Errorf("Exec whose container was removed: %v", err)
	}
	_, err = p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{})
	if !errors.Is(err, sdk.ErrNotFound) || !strings.Contains(err.Error(), "amelia sandbox up") {
		t.Errorf("Exec in a removed sandbox: %v", err)
	}
}

// An engine that does not answer gives the message that says where amelia
// looked and what to check.
func TestEngineUnreachable(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "dead.sock")
	p, err := pluginclient.Launch(pluginCommand("DOCKER_HOST=unix://"+sock), pluginclient.LaunchOptions{Name: "docker"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	_, err = p.EnsureRunning(t.Context(), spec(t, dockertest.Settings(nil), sdk.NetworkOpen))
	want := "cannot reach the Docker engine at unix://" + sock + ": dial unix " + sock + ": connect: no such file or directory — is Docker running?"
	if !errors.Is(err, sdk.ErrUnavailable) || err.Error() != want {
		t.Errorf("EnsureRunning with a dead DOCKER_HOST:\n got %v\nwant %s", err, want)
	}
}

// A stopped sandbox is reported stopped and listed, and EnsureRunning
// starts it again with its files.
func TestStoppedSandboxIsRestarted(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	s := spec(t, dockertest.Settings(nil), sdk.NetworkOpen)
	s.Labels["amelia.test-stop"] = s.Name
	sb := up(t, p, s)
	run(t, p, sb.Ref, "", "sh", "-c", "echo kept > /workspace/file")
	timeout := 0
	if _, err := cli.ContainerStop(t.Context(), sb.Ref.ID, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if h, err := p.HealthCheck(t.Context(), sb.Ref); err != nil || h.State != sdk.HealthStopped {
		t.Errorf("HealthCheck of a stopped sandbox: %+v %v, want stopped", h, err)
	}
	listed, err := p.List(t.Context(), sdk.ListRequest{Config: s.Config, Labels: map[string]string{"amelia.test-stop": s.Name}})
	if err != nil || len(listed) != 1 || listed[0].State != sdk.HealthStopped || listed[0].Ref.Name != s.Name {
		t.Errorf("List of a stopped sandbox: %+v %v", listed, err)
	}
	again, err := p.EnsureRunning(t.Context(), s)
	if err != nil || again.Created || again.Ref.ID != sb.Ref.ID {
		t.Fatalf("EnsureRunning of a stopped sandbox: %+v %v, want the same container restarted", again, err)
	}
	if got := run(t, p, sb.Ref, "", "cat", "/workspace/file"); got != "kept\n" {
		t.Errorf("after the restart the workspace holds %q", got)
	}
}

// A sandbox created for one network policy is not reused for another:
// reusing a bridged container for none would break the policy.
func TestNetworkChangeIsRefused(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	s := spec(t, dockertest.Settings(nil), sdk.NetworkOpen)
	up(t, p, s)
	s.Network.Mode = sdk.NetworkNone
	_, err := p.EnsureRunning(t.Context(), s)
	if !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "amelia sandbox down") {
		t.Errorf("EnsureRunning with network none over an open sandbox: %v", err)
	}
}

// Two sandboxes, two containers; Teardown removes the container and its
// anonymous volumes, and is idempotent.
func TestTeardownRemovesContainerAndVolumes(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	ready := volumeImage(t, cli, p)
	a := up(t, p, spec(t, dockertest.Settings(map[string]any{"image": ready}), sdk.NetworkOpen))
	b := up(t, p, spec(t, dockertest.Settings(nil), sdk.NetworkOpen))
	if a.Ref.ID == b.Ref.ID {
		t.Fatal("two sandboxes share a container")
	}
	ca := inspect(t, cli, a.Ref.ID)
	if len(ca.Mounts) != 1 || ca.Mounts[0].Type != "volume" {
		t.Fatalf("the image's VOLUME gave mounts %+v", ca.Mounts)
	}
	if ca.HostConfig.Init == nil || !*ca.HostConfig.Init {
		t.Error("a ready image's container runs without the engine's init")
	}
	run(t, p, a.Ref, "", "sh", "-c", "echo kept > /workspace/f")
	vol := ca.Mounts[0].Name
	for range 2 {
		if err := p.Teardown(t.Context(), a.Ref); err != nil {
			t.Fatalf("Teardown: %v", err)
		}
	}
	if _, err := cli.ContainerInspect(t.Context(), a.Ref.ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the container is still there: %v", err)
	}
	if _, err := cli.VolumeInspect(t.Context(), vol, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the anonymous volume %s is still there: %v", vol, err)
	}
	if h, err := p.HealthCheck(t.Context(), b.Ref); err != nil || h.State != sdk.HealthReady {
		t.Errorf("the other sandbox: %+v %v", h, err)
	}
}

// volumeImage builds a ready image, the sandbox image plus a VOLUME, and
// removes it when the test ends.
func volumeImage(t *testing.T, cli *client.Client, p interface {
	BuildImage(context.Context, []byte, bool, io.Writer) (string, error)
}) string {
	t.Helper()
	base, err := p.BuildImage(t.Context(), dockertest.Settings(nil), false, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tag := "amelia-dockertest-volume:" + strings.TrimPrefix(base, "amelia-sandbox:")
	dockertest.BuildImage(t, cli, tag, "FROM "+base+"\nVOLUME /workspace\n")
	return tag
}

// writeContext writes a docker context named name whose engine is host into
// the docker CLI configuration directory dir, as `docker context create`
// does.
func writeContext(t *testing.T, dir, name, host string) {
	t.Helper()
	meta, _ := json.Marshal(map[string]any{
		"Name":      name,
		"Metadata":  map[string]any{},
		"Endpoints": map[string]any{"docker": map[string]any{"Host": host, "SkipTLSVerify": false}},
	})
	sum := sha256.Sum256([]byte(name))
	writeFile(t, filepath.Join(dir, "contexts", "meta", hex.EncodeToString(sum[:]), "meta.json"), string(meta))
}

// The engine is found as the docker CLI finds it: a profile's host or
// context, DOCKER_CONTEXT, or the CLI's current context.
func TestEngineFromDockerContexts(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	cfg := t.TempDir()
	dead := "unix://" + filepath.Join(t.TempDir(), "elsewhere.sock")
	writeContext(t, cfg, "elsewhere", dead)
	writeContext(t, cfg, "here", cli.DaemonHost())
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DOCKER_HOST=") && !strings.HasPrefix(kv, "DOCKER_CONTEXT=") {
			env = append(env, kv)
		}
	}
	for _, c := range []struct {
		name     string
		env      []string
		settings map[string]any
		engine   string // the engine it must use
	}{
		{name: "DOCKER_CONTEXT", env: []string{"DOCKER_CONTEXT=elsewhere"}, engine: dead},
		{name: "current context", env: []string{}, engine: dead},
		// The profile's choice wins over the environment's.
		{name: "docker.context", env: []string{"DOCKER_CONTEXT=here"}, settings: map[string]any{"context": "elsewhere"}, engine: dead},
		{name: "docker.host", env: []string{"DOCKER_CONTEXT=here"}, settings: map[string]any{"host": dead}, engine: dead},
		{name: "context of the real engine", env: []string{"DOCKER_CONTEXT=here"}, engine: cli.DaemonHost()},
		{name: "unknown context", env: []string{"DOCKER_CONTEXT=nowhere"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			writeFile(t, filepath.Join(cfg, "config.json"), `{"currentContext": "elsewhere"}`)
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(append(env, "AMELIA_WORKER_DIR="+workerDir, "DOCKER_CONFIG="+cfg), c.env...)
			p, err := pluginclient.Launch(cmd, pluginclient.LaunchOptions{Name: "docker"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			s := spec(t, dockertest.Settings(c.settings), sdk.NetworkOpen)
			sb, err := p.EnsureRunning(t.Context(), s)
			switch {
			case c.engine == "":
				if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), `docker context "nowhere"`) {
					t.Errorf("EnsureRunning with an unknown context: %v", err)
				}
			case c.engine == dead:
				if !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "cannot reach the Docker engine at "+dead) {
					t.Errorf("EnsureRunning: %v, want it to have tried %s", err, dead)
				}
			default:
				if err != nil {
					t.Fatalf("EnsureRunning through the context of the real engine: %v", err)
				}
				p.Teardown(context.Background(), sb.Ref)
			}
		})
	}
}

// A user the image lacks is named in the error, and no container is left.
func TestUnknownUser(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	s := spec(t, dockertest.Settings(map[string]any{"user": "nobody2"}), sdk.NetworkOpen)
	_, err := p.EnsureRunning(t.Context(), s)
	if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), `docker.user "nobody2" is not a user of the sandbox image`) {
		t.Errorf("EnsureRunning as a user the image lacks: %v", err)
	}
	if _, err := cli.ContainerInspect(t.Context(), "amelia-sandbox-"+s.Name, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("the container that could not start is still there: %v", err)
	}
}
