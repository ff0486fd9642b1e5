package docker_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/reachtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// workerDir holds the amelia-worker-linux-GOARCH that goes into the
// sandbox image, built by TestMain.
var workerDir string

// The test binary doubles as the plugin: launched by go-plugin (which sets
// the handshake cookie), it serves the Docker provider instead of testing.
func TestMain(m *testing.M) {
	if sdktest.LaunchedAsPlugin() {
		sdk.Serve(docker.New(docker.Options{Version: "test", WorkerDirs: []string{os.Getenv("AMELIA_WORKER_DIR")}}))
		return
	}
	os.Exit(testbin.Main(m, func(dir string) error {
		workerDir = dir
		_, err := testbin.BuildSandboxWorker(dir)
		return err
	}))
}

// testLabel marks every container these tests create, with testRun as
// its value, so that a test that fails half-way leaves nothing behind —
// and removes nothing another test process (another clone's, CI's)
// created at the same time.
const testLabel = "amelia.dockertest"

// testRun is this test process's value of testLabel.
var testRun = "run-" + strconv.Itoa(os.Getpid())

// pluginCommand is this test binary as the provider plugin, with env
// added to its environment.
func pluginCommand(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "AMELIA_WORKER_DIR="+workerDir), env...)
	return cmd
}

// conformancePids is the process limit of the conformance kit's sandboxes,
// which its PidsLimit case checks: room for its 16 concurrent execs.
const conformancePids = 256

func TestConformance(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveNewImages(t, cli, "amelia-setup") // the Preparer group's
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	for _, mode := range []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkNone} {
		t.Run(string(mode), func(t *testing.T) {
			sdktest.Run(t, sdktest.Config{
				Command:   func() *exec.Cmd { return pluginCommand() },
				Settings:  dockertest.Settings(map[string]any{"resources": map[string]any{"pids": conformancePids}}),
				Network:   mode,
				PidsLimit: conformancePids,
				Labels:    map[string]string{testLabel: testRun},
			})
		})
	}
}

// newProvider is the provider in the test process, logging to the test.
func newProvider(t *testing.T) *docker.Provider {
	t.Helper()
	p := docker.New(docker.Options{
		Version:    "test",
		WorkerDirs: []string{workerDir},
		Logger:     slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	t.Cleanup(func() { p.Close() })
	return p
}

// spec is a sandbox of a fresh name, marked for cleanup.
func spec(t *testing.T, settings json.RawMessage, mode sdk.NetworkMode) sdk.Spec {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "t-" + regexp.MustCompile(`[^a-z0-9-]+`).ReplaceAllString(strings.ToLower(t.Name()), "-")
	name = name[:min(len(name), 40)] + "-" + hex.EncodeToString(b)
	return sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: name, Config: settings},
		Network:    sdk.NetworkPolicy{Mode: mode},
		Labels:     map[string]string{testLabel: testRun},
	}
}

// up starts a sandbox for the test and tears it down when the test ends.
func up(t *testing.T, p *docker.Provider, s sdk.Spec) sdk.Sandbox {
	t.Helper()
	sb, err := p.EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatalf("EnsureRunning(%s): %v", s.Name, err)
	}
	t.Cleanup(func() {
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			t.Errorf("Teardown(%s): %v", s.Name, err)
		}
	})
	return sb
}

// run runs argv in the sandbox and returns its stdout; it fails the test on
// an error or a non-zero exit.
func run(t *testing.T, p *docker.Provider, ref sdk.SandboxRef, user string, argv ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: argv, User: user}, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	if err != nil || st.Code != 0 {
		t.Fatalf("exec %q: %+v %v\nstderr: %s", argv, st, err, errb.String())
	}
	return out.String()
}

func inspect(t *testing.T, cli *client.Client, id string) container.InspectResponse {
	t.Helper()
	res, err := cli.ContainerInspect(t.Context(), id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return res.Container
}

// The container is what the issue promises: named and labelled, every
// capability dropped, no new privileges, limits, no mounts, tini as PID 1,
// commands as the unprivileged user, and a worker baked into the image.
func TestContainerIsLockedDown(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	s := spec(t, dockertest.Settings(map[string]any{"resources": map[string]any{"cpus": 0.5, "memory": "256m"}}), sdk.NetworkOpen)
	s.Labels["amelia.owner"] = "test-host"
	sb := up(t, p, s)
	c := inspect(t, cli, sb.Ref.ID)

	if c.Name != "/amelia-sandbox-"+s.Name {
		t.Errorf("container name %q, want amelia-sandbox-%s", c.Name, s.Name)
	}
	for _, k := range []string{"amelia.profile", "amelia.owner", "amelia.created", "amelia.image-hash", testLabel} {
		if c.Config.Labels[k] == "" {
			t.Errorf("label %s missing: %v", k, c.Config.Labels)
		}
	}
	if c.Config.Labels["amelia.profile"] != s.Name || c.Config.Labels["amelia.owner"] != "test-host" {
		t.Errorf("labels %v", c.Config.Labels)
	}
	h := c.HostConfig
	if strings.Join(h.CapDrop, ",") != "ALL" || len(h.CapAdd) != 0 {
		t.Errorf("CapDrop %v CapAdd %v, want ALL and nothing", h.CapDrop, h.CapAdd)
	}
	if strings.Join(h.SecurityOpt, ",") != "no-new-privileges" || h.Privileged {
		t.Errorf("SecurityOpt %v privileged %v", h.SecurityOpt, h.Privileged)
	}
	if h.NanoCPUs != 5e8 || h.Memory != 256<<20 || h.PidsLimit == nil || *h.PidsLimit != docker.DefaultPids {
		t.Errorf("limits: cpus %d memory %d pids %v", h.NanoCPUs, h.Memory, h.PidsLimit)
	}
	// Nothing of the host's: the one mount is the workdir's own
	// anonymous volume, made for this container alone.
	if len(h.Binds) != 0 || len(c.Mounts) != 1 || c.Mounts[0].Type != "volume" || c.Mounts[0].Destination != "/workspace" || c.Mounts[0].Driver != "local" {
		t.Errorf("mounts %+v binds %v, want only the workdir's volume", c.Mounts, h.Binds)
	}

	ps := run(t, p, sb.Ref, "", "ps", "-o", "pid=,user=,args=", "-p", "1")
	if f := strings.Fields(ps); len(f) < 3 || f[0] != "1" || f[2] != "tini" {
		t.Errorf("PID 1 is %q, want tini", ps)
	}
	if got := run(t, p, sb.Ref, "", "id", "-un"); got != "amelia\n" {
		t.Errorf("commands run as %q, want amelia", got)
	}
	if got := run(t, p, sb.Ref, "", "sh", "-c", "grep ^CapEff /proc/self/status; cat /proc/self/status | grep NoNewPrivs"); !strings.Contains(got, "0000000000000000") || !strings.Contains(got, "NoNewPrivs:\t1") {
		t.Errorf("capabilities and no-new-privs of a command:\n%s", got)
	}
	if got := run(t, p, sb.Ref, "root", "sh", "-c", "grep ^CapEff /proc/self/status"); !strings.Contains(got, "0000000000000000") {
		t.Errorf("root in the sandbox holds capabilities: %s", got)
	}
	if got := run(t, p, sb.Ref, "", "sh", "-c", "test -x "+image.WorkerPath+" && git config --system credential.helper && stat -c %U /workspace"); got != "/opt/amelia/bin/amelia-worker git-credential\namelia\n" {
		t.Errorf("worker, credential helper, /workspace owner: %q", got)
	}
	if out := run(t, p, sb.Ref, "", "sh", "-c", "ls -l /var/run/docker.sock /run/docker.sock 2>&1; true"); strings.Contains(out, "srw") {
		t.Errorf("a Docker socket is in the sandbox: %s", out)
	}
}

// Cancelling an exec kills its whole tree, including a process that left
// the group with setsid, as `ps` inside the container shows; nothing but
// tini and its sleep stays.
func TestCancelLeavesNoProcess(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	sb := up(t, p, spec(t, dockertest.Settings(nil), sdk.NetworkOpen))

	ctx, cancel := context.WithCancel(t.Context())
	outR, outW := io.Pipe()
	done := make(chan sdk.ExitStatus, 1)
	go func() {
		st, err := p.Exec(ctx, sdk.ExecRequest{Sandbox: sb.Ref, CancelGrace: time.Second, Argv: []string{"sh", "-c",
			`sleep 601 & (sleep 602 & wait) & setsid sleep 603 & trap '' TERM; echo started; while :; do sleep 0.1; done`}},
			sdk.ExecIO{Stdout: outW})
		if err != nil {
			t.Errorf("Exec after cancel: %v", err)
		}
		outW.Close()
		done <- st
	}()
	line := make([]byte, 8)
	if n, err := io.ReadAtLeast(outR, line, 8); err != nil || string(line[:n]) != "started\n" {
		t.Fatalf("first output %q, %v", line[:n], err)
	}
	if ps := run(t, p, sb.Ref, "root", "ps", "-eo", "args="); strings.Count(ps, "\nsleep 60") != 3 {
		t.Fatalf("before cancel, want the three sleeps:\n%s", ps)
	}
	cancel()
	go io.Copy(io.Discard, outR)
	st := <-done
	if !st.Canceled || st.Code != 137 || st.Signal != "KILL" {
		t.Errorf("exit %+v, want Canceled and KILL (the shell ignores TERM)", st)
	}
	ps := run(t, p, sb.Ref, "root", "ps", "-eo", "pid=,args=")
	var left []string
	for _, l := range strings.Split(strings.TrimSpace(ps), "\n") {
		f := strings.Fields(l)
		// The command session's worker (session.go) is the provider's
		// own, and stays.
		args := strings.Join(f[1:], " ")
		if len(f) < 2 || f[1] == "tini" || args == "sleep infinity" || f[1] == "ps" || args == image.WorkerPath+" mux" {
			continue
		}
		left = append(left, l)
	}
	if len(left) != 0 {
		t.Errorf("processes left after cancel:\n%s", strings.Join(left, "\n"))
	}
}

// Network open keeps the bridge: the sandbox reaches a listener of the
// test's on the host's bridge address. none and allowlist leave it only
// loopback: the same listener is out of reach.
func TestNetworkPolicy(t *testing.T) {
	cli := dockertest.Engine(t)
	dockertest.RemoveContainers(t, cli, testLabel+"="+testRun)
	p := newProvider(t)
	outside := reachtest.Listen(t, dockertest.BridgeGateway(t, cli))
	// send reports whether the sandbox could connect to the listener and
	// send a line, within 5 seconds.
	send := func(t *testing.T, sb sdk.Sandbox) (bool, string) {
		script := `exec 3<>/dev/tcp/` + outside.DevTCP() + ` && echo hello >&3`
		var out bytes.Buffer
		st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"timeout", "5", "bash", "-c", script}}, sdk.ExecIO{Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		return st.Code == 0, out.String()
	}

	open := up(t, p, spec(t, dockertest.Settings(nil), sdk.NetworkOpen))
	if ok, out := send(t, open); !ok || outside.Next(t) != "hello\n" {
		t.Errorf("open: the sandbox did not reach the host's bridge address %s: %s", outside.Addr(), out)
	}
	for _, mode := range []sdk.NetworkMode{sdk.NetworkNone, sdk.NetworkAllowlist} {
		t.Run(string(mode), func(t *testing.T) {
			sb := up(t, p, spec(t, dockertest.Settings(nil), mode))
			if nm := inspect(t, cli, sb.Ref.ID).HostConfig.NetworkMode; nm != "none" {
				t.Errorf("network mode %q, want none", nm)
			}
			if ok, out := send(t, sb); ok || outside.Accepted() != 1 {
				t.Errorf("%s: the sandbox reached the host's bridge address %s (%d connections, 1 of them the open sandbox's): %s", mode, outside.Addr(), outside.Accepted(), out)
			}
			if ifs := run(t, p, sb.Ref, "", "ls", "/sys/class/net"); strings.TrimSpace(ifs) != "lo" {
				t.Errorf("%s: network interfaces %q, want only lo", mode, ifs)
			}
		})
	}
}
