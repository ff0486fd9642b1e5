package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/reachtest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// End-to-end tests of amelia on the docker provider, against the real
// engine: the sandbox image built from the bootstrap base, the scripted LLM
// reached only through the tunnel and the proxy.

// dockerSandbox is the e2e profile's sandbox block on docker; the egress
// check, which runs before the agent with network allowlist and none,
// tries checkTargets.
func dockerSandbox(network string, checkTargets ...string) string {
	targets, _ := json.Marshal(checkTargets)
	return fmt.Sprintf("{provider: docker, network: %s, egress_check_targets: %s, docker: {base_image: %q}}", network, targets, image.TestBase)
}

// dockerOutside is the engine and a listener of the test's on the host's
// address on its default bridge: a sandbox with network open reaches it,
// one with allowlist or none must not.
func dockerOutside(t *testing.T) (*client.Client, *reachtest.Listener) {
	cli := dockertest.Engine(t)
	return cli, reachtest.Listen(t, dockertest.BridgeGateway(t, cli))
}

// newDockerHost is a host whose e2e profile has the docker sandbox block
// sandbox; every container of its config is removed when the test ends.
func newDockerHost(t *testing.T, cli *client.Client, sandbox string, turns ...llmtest.Turn) *host {
	t.Helper()
	h := newHostWith(t, sandbox, "", llmtest.Options{}, turns...)
	dockertest.RemoveContainers(t, cli, "amelia.config="+h.configPath())
	return h
}

// addDockerProfile adds the docker profile name to h's config and
// returns its name. Its sandbox is this test's alone, new, and no other
// test's, here or elsewhere on the engine: a sandbox's name holds a
// digest of its config file.
func (h *host) addDockerProfile(t *testing.T, name string) string {
	t.Helper()
	h.addProfileYAML(t, "  "+name+":\n    llm: {api_key_env: AMELIA_E2E_KEY}\n    sandbox: "+dockerSandbox("open")+"\n")
	return name
}

// probe is what the agent runs to look around the sandbox: its
// environment and every process's, and whether each target (HOST/PORT of
// a listener the test owns) answers a direct connection.
func probe(targets ...string) string {
	return `env; cat /proc/[0-9]*/environ | tr '\0' '\n'
for a in ` + strings.Join(targets, " ") + `; do
  if timeout 5 bash -c "exec 3<>/dev/tcp/$a" 2>/dev/null; then echo "REACHED $a"; else echo "UNREACHABLE $a"; fi
done`
}

// amelia run on docker brings the branch back with the LLM reached only
// through the tunnel; with network none nothing else is reachable. The key
// is nowhere in the container or its image.
func TestRunOnDocker(t *testing.T) {
	for _, network := range []string{"open", "none"} {
		t.Run(network, func(t *testing.T) {
			cli, outside := dockerOutside(t)
			h := newDockerHost(t, cli, dockerSandbox(network, outside.Addr()),
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("hello.txt", "hello from the container\n")}},
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(probe(outside.DevTCP()))}},
				llmtest.Turn{Text: "Added hello.txt.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
			)
			r := h.amelia(t, "run", "--json", "--sandbox", "docker", "--workflow", "hello-"+network, "Add a hello file.")
			if r.code != 0 {
				t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
			}
			if got := h.git(t, "show", "amelia/hello-"+network+":hello.txt"); got != "hello from the container" {
				t.Errorf("hello.txt on the branch: %q", got)
			}
			if n := len(h.up.Requests()); n != 3 {
				t.Errorf("the LLM got %d requests, want 3", n)
			}
			for i, req := range h.up.Requests() {
				if got := req.Header.Get("Authorization"); got != "Bearer "+upstreamKey {
					t.Errorf("LLM request %d: Authorization %q, want the host's key (added by the proxy)", i, got)
				}
			}
			probed := toolOutput(t, r.stdout, "AMELIA_PROXY_TOKEN=")
			if probed == "" {
				t.Fatalf("no tool output shows the sandbox's environment:\n%s", r.stdout)
			}
			// The canary ran before the agent with network none (and found
			// nothing), and not with open.
			if ran := strings.Contains(r.stdout, `{"type":"phase","content":"egress","status":"done"`); ran != (network == "none") {
				t.Errorf("network %s: egress check done = %v", network, ran)
			}
			// The sandbox reaches the test's listener on the bridge with
			// network open, and neither the egress check nor the agent
			// does with none.
			switch network {
			case "open":
				if !strings.Contains(probed, "REACHED "+outside.DevTCP()) {
					t.Errorf("with network open the sandbox did not reach the host's bridge address:\n%s", probed)
				}
				outside.Next(t)
			case "none":
				if !strings.Contains(probed, "UNREACHABLE "+outside.DevTCP()) || outside.Accepted() != 0 {
					t.Errorf("with network none the sandbox reached the host's bridge address directly (%d connections):\n%s", outside.Accepted(), probed)
				}
			}
			if network == "none" && !strings.Contains(probed, "HTTPS_PROXY=http://amelia:") {
				t.Errorf("with network none the agent has no egress proxy in its environment:\n%s", probed)
			}
			if strings.Contains(r.stdout+r.stderr, upstreamKey) {
				t.Error("the upstream key appears in amelia's output (the sandbox's environment or processes)")
			}
			assertKeyNotInContainer(t, h, cli)
		})
	}
}

// assertKeyNotInContainer looks for the upstream key everywhere the
// sandbox keeps things: its files, its processes' environments, the
// container's configuration and its image's history.
func assertKeyNotInContainer(t *testing.T, h *host, cli *client.Client) {
	t.Helper()
	r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c",
		`grep -rlF -- "$1" /workspace /tmp /opt /home /etc 2>/dev/null; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -F -- "$1"; echo searched`, "sh", upstreamKey)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "searched" {
		t.Errorf("the key is in the container (files or process environments), or the search failed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	ctx := context.Background()
	c, err := cli.ContainerInspect(ctx, "amelia-sandbox-"+h.sandboxName(t, "e2e"), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(c.Container.Config.Env, "\n"), upstreamKey) {
		t.Error("the key is in the container's environment")
	}
	hist, err := cli.ImageHistory(ctx, c.Container.Image)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range hist.Items {
		if strings.Contains(l.CreatedBy, upstreamKey) || strings.Contains(l.Comment, upstreamKey) {
			t.Errorf("the key is in the image's history: %s", l.CreatedBy)
		}
	}
	img, err := cli.ImageInspect(ctx, c.Container.Image)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(img.Config.Env, "\n"), upstreamKey) {
		t.Error("the key is in the image's environment")
	}
}

// Two profiles get two containers; sandbox exec runs its commands on the
// session unless they are bulk; sandbox ls shows them, and a profile
// removed from the config as an orphan; amelia stop leaves no container
// of the config behind.
func TestDockerProfilesAndStop(t *testing.T) {
	cli, outside := dockerOutside(t)
	h := newDockerHost(t, cli, dockerSandbox("none", outside.Addr()))
	h.addProfileYAML(t, "  second:\n    llm: {api_key_env: AMELIA_E2E_KEY}\n    sandbox: "+dockerSandbox("open")+"\n")
	for _, p := range []string{"e2e", "second"} {
		if r := h.amelia(t, "sandbox", "up", "-p", p); r.code != 0 {
			t.Fatalf("sandbox up -p %s: exit %d: %s", p, r.code, r.stderr)
		}
	}
	// The sandbox's user's commands run on its command session, under the
	// image's worker, but for one said to be bulk: an exec of its own.
	parent := []string{"sh", "-c", `tr '\0' ' ' </proc/$PPID/cmdline 2>/dev/null; echo`}
	if r := h.amelia(t, append([]string{"sandbox", "exec", "--"}, parent...)...); r.code != 0 || !strings.Contains(r.stdout, "amelia-worker mux") {
		t.Errorf("sandbox exec: exit %d, the command's parent %q, want the session's worker\n%s", r.code, r.stdout, r.stderr)
	}
	if r := h.amelia(t, append([]string{"sandbox", "exec", "--bulk", "--"}, parent...)...); r.code != 0 || strings.Contains(r.stdout, "amelia-worker") {
		t.Errorf("sandbox exec --bulk: exit %d, the command's parent %q, want an exec of its own\n%s", r.code, r.stdout, r.stderr)
	}

	mine := make(client.Filters).Add("label", "amelia.config="+h.configPath())
	list, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: mine})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list.Items {
		names = append(names, strings.Join(c.Names, ","))
	}
	e2e, second := "amelia-sandbox-"+h.sandboxName(t, "e2e"), "amelia-sandbox-"+h.sandboxName(t, "second")
	if len(list.Items) != 2 || !strings.Contains(strings.Join(names, " "), "/"+e2e) || !strings.Contains(strings.Join(names, " "), "/"+second) {
		t.Fatalf("containers of the config: %v, want %s and %s", names, e2e, second)
	}

	// Drop the second profile: its sandbox is now an orphan.
	cfg, _ := os.ReadFile(h.configPath())
	cut := strings.Index(string(cfg), "  second:")
	if err := os.WriteFile(h.configPath(), cfg[:cut], 0o600); err != nil {
		t.Fatal(err)
	}
	ls := h.amelia(t, "sandbox", "ls")
	if ls.code != 0 || !strings.Contains(ls.stdout, "second") || !strings.Contains(ls.stdout, "e2e") {
		t.Errorf("sandbox ls: exit %d\n%s%s", ls.code, ls.stdout, ls.stderr)
	}
	if r := h.amelia(t, "stop"); r.code != 0 {
		t.Fatalf("amelia stop: exit %d: %s", r.code, r.stderr)
	}
	list, err = cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: mine})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("after amelia stop, containers of the config remain: %v %v", list.Items, err)
	}
}

// Ten runs of a new docker profile started at once, each its own amelia
// process with its own plugin process, all get its sandbox: one
// container, created by one of them and reused by the others.
func TestDockerSandboxUpTogether(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"))
	profile := h.addDockerProfile(t, "together")
	// The image first: the race to look at is the container's.
	if r := h.amelia(t, "image", "build", "-p", profile); r.code != 0 {
		t.Fatalf("image build: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	const runs = 10
	name := h.sandboxName(t, profile)
	cmds := make([]*exec.Cmd, runs)
	outs := make([]bytes.Buffer, runs)
	for i := range cmds {
		cmds[i] = h.command("sandbox", "up", "-p", profile)
		cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
	}
	for _, cmd := range cmds {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	created := 0
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("sandbox up %d of %d: %v\n%s", i+1, runs, err, outs[i].String())
			continue
		}
		out := outs[i].String()
		if !strings.Contains(out, "container: amelia-sandbox-"+name+"\n") {
			t.Errorf("sandbox up %d of %d names no container amelia-sandbox-%s:\n%s", i+1, runs, name, out)
		}
		if strings.Contains(out, "sandbox "+name+" of profile "+profile+" created") {
			created++
		}
	}
	list, err := cli.ContainerList(t.Context(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", "amelia.profile="+profile).Add("label", "amelia.config="+h.configPath())})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].State != "running" {
		t.Errorf("containers of profile %s: %+v, want one, running", profile, list.Items)
	}
	if created != 1 {
		t.Errorf("%d of the %d runs created the sandbox, want 1 (the others reuse it)", created, runs)
	}
}

// No engine at DOCKER_HOST: one line that says where amelia looked.
func TestDockerEngineUnreachable(t *testing.T) {
	h := newHostWith(t, dockerSandbox("open"), "", llmtest.Options{})
	sock := filepath.Join(t.TempDir(), "dead.sock")
	h.env = append(h.env, "DOCKER_HOST=unix://"+sock)
	r := h.amelia(t, "sandbox", "up")
	want := "amelia: start sandbox " + h.sandboxName(t, "e2e") + " (provider docker): cannot reach the Docker engine at unix://" + sock + ": dial unix " + sock + ": connect: no such file or directory — is Docker running?\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("sandbox up with a dead DOCKER_HOST: exit %d\nstderr: %q\nwant:   %q", r.code, r.stderr, want)
	}
}

// amelia image build builds the profile's image once, says when it is up
// to date, and refuses a profile that is not docker's.
func TestImageBuildCommand(t *testing.T) {
	h := newDockerHost(t, dockertest.Engine(t), dockerSandbox("open"))
	h.addProfileYAML(t, "  plain:\n    sandbox: {provider: local}\n")
	first := h.amelia(t, "image", "build")
	if first.code != 0 || !strings.Contains(first.stdout, "image: amelia-sandbox:") {
		t.Fatalf("image build: exit %d\n%s%s", first.code, first.stdout, first.stderr)
	}
	tag := strings.TrimPrefix(strings.TrimSpace(first.stdout[strings.LastIndex(first.stdout, "image: "):]), "image: ")
	again := h.amelia(t, "image", "build")
	if again.code != 0 || again.stdout != tag+" is up to date\nimage: "+tag+"\n" {
		t.Errorf("second image build: exit %d\n%s%s", again.code, again.stdout, again.stderr)
	}
	r := h.amelia(t, "image", "build", "-p", "plain")
	if r.code != 2 || r.stderr != "amelia: profile plain uses provider local, which builds no image: amelia image build builds the image of a docker profile (pick one with --profile)\n" {
		t.Errorf("image build of a local profile: exit %d, stderr %q", r.code, r.stderr)
	}
}

// kill -9 of the host process mid-run on docker: amelia attach takes
// over; a crashed plugin mid-run is started again, the run carrying on;
// Ctrl-C stops the agent and all it started.
func TestDockerRunsOutliveTheirHost(t *testing.T) {
	cli := dockertest.Engine(t)
	t.Run("attach", func(t *testing.T) {
		g := newGate(t)
		h := newDockerHost(t, cli, dockerSandbox("open"), gatedTurns(g)...)
		h.attachAfterHostDied(t, g, "orphan")
	})
	t.Run("plugin crash", func(t *testing.T) {
		g := newGate(t)
		h := newDockerHost(t, cli, dockerSandbox("open"), gatedTurns(g)...)
		h.survivesFault(t, g, "crash", "starting it again", func(*running) { killPlugin(t, h) })
	})
	t.Run("Ctrl-C", func(t *testing.T) {
		g := newGate(t)
		h := newDockerHost(t, cli, dockerSandbox("open"), gatedTurns(g)...)
		h.interruptedKillsAll(t, g, "stop-me")
	})
}
