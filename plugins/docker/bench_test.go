package docker_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/pluginclient"
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
func benchPlugin(b *testing.B) *pluginclient.Plugin {
	b.Helper()
	cli := dockertest.Engine(b)
	dockertest.RemoveContainers(b, cli, testLabel+"=bench")
	if _, err := exec.LookPath("docker"); err != nil {
		b.Fatal("the baseline needs the docker CLI, and there is none on PATH")
	}
	p, err := pluginclient.Launch(pluginCommand(), pluginclient.LaunchOptions{Name: "docker"})
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
func benchSandbox(b *testing.B, p *pluginclient.Plugin, name string) sdk.Sandbox {
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

var (
	streamScript = []string{"sh", "-c", "cat /dev/zero | head -c 1073741824"}
	catScript    = []string{"sh", "-c", "cat >/dev/null"}
)

// BenchmarkStream: 1 GiB through the plugin beside the same through
// `docker exec` piping it to or from this process, in MB/s, and the CPU
// time this process, the plugin and the CLI took per GiB (the engine's is
// in neither). stdout: a command's output read by the host (target: the
// plugin at least 0.9× the CLI); stdin: zeros written by the host to `cat`
// (`docker exec -i`; target: at least 0.8×). extra-cpu-s/GiB is what the
// plugin path costs beyond the CLI. stdout is said to be bulk, as
// `amelia sandbox exec --bulk` says it; stdout-session is the same
// command without the hint, on the sandbox's command session, whose
// worker frames every byte once more.
func BenchmarkStream(b *testing.B) {
	p := benchPlugin(b)
	sb := benchSandbox(b, p, "bench-stream")
	name := sb.Details["container"]
	for _, tr := range []struct {
		name    string
		traffic sdk.Traffic
	}{{"stdout", sdk.TrafficBulk}, {"stdout-session", sdk.TrafficAny}} {
		b.Run(tr.name, func(b *testing.B) {
			t := benchtest.Transfer{N: streamBytes, Meter: benchtest.NewCPUMeter(p.Pid())}
			req := sdk.ExecRequest{Sandbox: sb.Ref, Argv: streamScript, Traffic: tr.traffic}
			for b.Loop() {
				t.Ours(b, func() {
					var out benchtest.Counter
					st, err := p.Exec(b.Context(), req, sdk.ExecIO{Stdout: &out})
					if err != nil || st.Code != 0 || out.N != streamBytes {
						b.Fatalf("exec: %+v %v, %d bytes", st, err, out.N)
					}
				})
				t.Base(b, func() {
					benchtest.Drain(b, exec.Command("docker", append([]string{"exec", name}, streamScript...)...), streamBytes)
				})
			}
			t.Report(b, "plugin", "cli")
		})
	}
	b.Run("stdin", func(b *testing.B) {
		t := benchtest.Transfer{N: streamBytes, Meter: benchtest.NewCPUMeter(p.Pid())}
		for b.Loop() {
			t.Ours(b, func() {
				in := benchtest.Zeros{N: streamBytes}
				st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: catScript}, sdk.ExecIO{Stdin: &in})
				if err != nil || st.Code != 0 || in.N != 0 {
					b.Fatalf("exec: %+v %v, %d bytes not read", st, err, in.N)
				}
			})
			t.Base(b, func() {
				benchtest.Feed(b, exec.Command("docker", append([]string{"exec", "-i", name}, catScript...)...), streamBytes)
			})
		}
		t.Report(b, "plugin", "cli")
	})
}
