package main_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/agentbin/agentbintest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// firstArrival records when the first LLM request came after a mark.
type firstArrival struct {
	mu    sync.Mutex
	since time.Time
	first time.Time
}

func (f *firstArrival) mark() {
	f.mu.Lock()
	f.since, f.first = time.Now(), time.Time{}
	f.mu.Unlock()
}

func (f *firstArrival) script(int, *llmtest.Request) llmtest.Turn {
	f.mu.Lock()
	if f.first.IsZero() {
		f.first = time.Now()
	}
	f.mu.Unlock()
	return llmtest.Turn{Text: "done"}
}

// wait is how long after the mark the first request came.
func (f *firstArrival) wait(b *testing.B) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first.IsZero() {
		b.Fatal("no LLM request came")
	}
	return f.first.Sub(f.since)
}

// opencodeBenchSetup writes the baseline's opencode configuration in the
// container and prints the path of the opencode the run uploaded.
const opencodeBenchSetup = `set -e
bin=$(ls "$HOME"/.amelia/bin/opencode-* | head -n1)
mkdir -p /tmp/oc-bench/home /tmp/oc-bench/work
printf '%s\n' '{"data": {"directory": "/tmp/oc-bench/data"}, "providers": {"local": {"apiKey": "k"}}}' >/tmp/oc-bench/home/.opencode.json
echo "$bin"`

// BenchmarkOpencodeToFirstRequestOnDocker: from starting `amelia run
// --agent opencode` on a warm docker sandbox to opencode's first LLM
// request reaching the model (through the relay, the tunnel and the
// proxy), p50; the baseline is the same opencode started in the same
// container with `docker exec` (the engine's exec, as the docker CLI
// makes it), pointed straight at the model on the bridge, to its first
// request.
//
//	go test -run='^$' -bench=OpencodeToFirstRequestOnDocker -benchtime=5x ./cmd/amelia/
func BenchmarkOpencodeToFirstRequestOnDocker(b *testing.B) {
	opencode := agentbintest.Binaries(b).Opencode
	cli := dockertest.Engine(b)
	var ours, direct firstArrival
	h := newHostWith(b, dockerSandbox("open"), "", llmtest.Options{Script: ours.script, Forget: true, Light: true})
	h.addProfileYAML(b, fmt.Sprintf("    agent: {name: opencode, binary: %q}\n", opencode))
	label := "amelia.config=" + h.configPath()
	dockertest.RemoveContainers(b, cli, label)
	if r := h.amelia(b, "run", "--json", "--workflow", "warm-up", "warm up"); r.code != 0 {
		b.Fatalf("warm-up run: exit %d: %s", r.code, r.stderr)
	}
	list, err := cli.ContainerList(b.Context(), client.ContainerListOptions{Filters: make(client.Filters).Add("label", label)})
	if err != nil || len(list.Items) != 1 {
		b.Fatalf("find the sandbox's container: %v (%d found)", err, len(list.Items))
	}
	container := list.Items[0].ID
	// The baseline's model listens on the bridge, where the container
	// reaches it; its opencode is the one the run uploaded.
	model := llmtest.NewWithOptions(b, llmtest.Options{Script: direct.script, Forget: true, Light: true, Addr: dockertest.BridgeGateway(b, cli) + ":0"})
	bin := strings.TrimSpace(engineExec(b, cli, container, nil, "sh", "-c", opencodeBenchSetup))
	var ourFirst, directFirst []time.Duration
	i := 0
	for b.Loop() {
		ours.mark()
		if r := h.amelia(b, "run", "--json", "--workflow", fmt.Sprintf("bench-%d", i), "answer"); r.code != 0 {
			b.Fatalf("run: exit %d: %s", r.code, r.stderr)
		}
		ourFirst = append(ourFirst, ours.wait(b))
		direct.mark()
		engineExec(b, cli, container, []string{"HOME=/tmp/oc-bench/home", "LOCAL_ENDPOINT=" + model.URL() + "/v1"},
			bin, "-p", "answer", "-f", "json", "-q", "-c", "/tmp/oc-bench/work")
		directFirst = append(directFirst, direct.wait(b))
		i++
	}
	o, d := p50(ourFirst), p50(directFirst)
	b.ReportMetric(ms(o), "amelia-run-first-request-p50-ms")
	b.ReportMetric(ms(d), "docker-exec-first-request-p50-ms")
	b.ReportMetric(float64(o)/float64(d), "x-docker-exec")
	b.ReportMetric(0, "ns/op")
}

// engineExec runs argv in container through the Engine API with env, as
// `docker exec -e` does, to its end, and returns its output; it must exit
// 0.
func engineExec(b *testing.B, cli *client.Client, container string, env []string, argv ...string) string {
	x, err := cli.ExecCreate(b.Context(), container, client.ExecCreateOptions{Cmd: argv, Env: env, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Fatalf("docker exec: %v", err)
	}
	att, err := cli.ExecAttach(b.Context(), x.ID, client.ExecAttachOptions{})
	if err != nil {
		b.Fatalf("docker exec: %v", err)
	}
	var stdout, stderr bytes.Buffer
	_, _ = stdcopy.StdCopy(&stdout, &stderr, att.Reader)
	att.Close()
	res, err := cli.ExecInspect(b.Context(), x.ID, client.ExecInspectOptions{})
	for err == nil && res.Running {
		res, err = cli.ExecInspect(b.Context(), x.ID, client.ExecInspectOptions{})
	}
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("docker exec %v: exit %d, %v\n%s%s", argv, res.ExitCode, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String()
}
