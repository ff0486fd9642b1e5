package docker_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Side-by-side harnesses against the real engine: each reports our figure
// through the full plugin path (host → gRPC over go-plugin's mTLS socket →
// the Docker provider in its own process → the Engine API), the docker
// CLI's for the same work, and the ratio, in one line.
//
//	go test -run='^$' -bench=. -benchtime=20x ./plugins/docker/

// benchPlugin launches the provider as a plugin subprocess and checks that
// the docker CLI, the baseline, is there.
func benchPlugin(b *testing.B) *sdk.Plugin {
	b.Helper()
	cli := dockertest.Engine(b)
	dockertest.RemoveContainers(b, cli, testLabel+"=bench")
	if _, err := exec.LookPath("docker"); err != nil {
		b.Fatal("the baseline needs the docker CLI, and there is none on PATH")
	}
	p, err := sdk.Launch(pluginCommand(), sdk.LaunchOptions{Name: "docker"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// benchSpec is a sandbox for the benchmark, marked for cleanup.
func benchSpec(name string) sdk.Spec {
	return sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: name, Config: dockertest.Settings(nil)},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkOpen},
		Labels:     map[string]string{testLabel: "bench"},
	}
}

// benchSandbox starts a sandbox through the plugin; it is removed when the
// benchmark ends.
func benchSandbox(b *testing.B, p *sdk.Plugin, name string) sdk.Sandbox {
	b.Helper()
	sb, err := p.EnsureRunning(b.Context(), benchSpec(name))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Teardown(context.Background(), sb.Ref) })
	return sb
}

func dockerCLI(b *testing.B, args ...string) string {
	b.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		b.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// BenchmarkColdEnsureRunning: no container → a sandbox that runs commands,
// with the image present (target under 1.5 s), beside `docker run -d ...
// sleep infinity` and a first `docker exec` through the CLI.
func BenchmarkColdEnsureRunning(b *testing.B) {
	p := benchPlugin(b)
	img := benchSandbox(b, p, "bench-cold-warmup").Details["image"] // builds the image if needed
	var ours, cli []time.Duration
	for b.Loop() {
		start := time.Now()
		sb, err := p.EnsureRunning(b.Context(), benchSpec("bench-cold"))
		if err != nil || !sb.Created {
			b.Fatalf("EnsureRunning: %+v %v", sb, err)
		}
		ours = append(ours, time.Since(start))
		if err := p.Teardown(b.Context(), sb.Ref); err != nil {
			b.Fatal(err)
		}

		start = time.Now()
		dockerCLI(b, "run", "-d", "--name", "amelia-bench-cli", "--label", testLabel+"=bench", "--cap-drop", "ALL",
			"--security-opt", "no-new-privileges", "--pids-limit", "1024", img, "sleep", "infinity")
		dockerCLI(b, "exec", "amelia-bench-cli", "true")
		cli = append(cli, time.Since(start))
		dockerCLI(b, "rm", "-f", "amelia-bench-cli")
	}
	benchtest.Latencies(b, ours, cli, "plugin", "cli")
}

// BenchmarkWarmExecTrue: `true` in a running sandbox through the plugin
// beside `docker exec <c> true` (target ratio ≤ 1.0: the plugin has no
// CLI to start).
func BenchmarkWarmExecTrue(b *testing.B) {
	p := benchPlugin(b)
	sb := benchSandbox(b, p, "bench-warm")
	name := sb.Details["container"]
	benchtest.Compare(b, "plugin", "cli", func() {
		st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{})
		if err != nil || st.Code != 0 {
			b.Fatalf("exec true: %+v %v", st, err)
		}
	}, func() { dockerCLI(b, "exec", name, "true") })
}

// streamBytes is what BenchmarkStream moves per run: 1 GiB.
const streamBytes = 1 << 30

var streamScript = []string{"sh", "-c", "cat /dev/zero | head -c 1073741824"}

// BenchmarkStream: 1 GiB of output through the plugin beside `docker exec`
// piping it to this process, in MB/s (target: the plugin at least 0.8× the
// CLI).
func BenchmarkStream(b *testing.B) {
	p := benchPlugin(b)
	sb := benchSandbox(b, p, "bench-stream")
	name := sb.Details["container"]
	var ours, cli time.Duration
	for b.Loop() {
		var out benchtest.Counter
		start := time.Now()
		st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: streamScript}, sdk.ExecIO{Stdout: &out})
		if err != nil || st.Code != 0 || out.N != streamBytes {
			b.Fatalf("exec: %+v %v, %d bytes", st, err, out.N)
		}
		ours += time.Since(start)

		start = time.Now()
		cmd := exec.Command("docker", append([]string{"exec", name}, streamScript...)...)
		benchtest.Drain(b, cmd, streamBytes)
		cli += time.Since(start)
	}
	benchtest.Throughput(b, streamBytes, ours, cli, "plugin", "cli")
}
