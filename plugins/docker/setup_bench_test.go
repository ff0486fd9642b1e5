package docker_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// installScript stands in for a dependency install of ~200 MB, without a
// network: 4,000 files of 50 KiB in 200 packages under ~/node_modules,
// from data made in the container.
const installScript = `set -e; head -c 51200 /dev/urandom > /tmp/blob
for d in $(seq 200); do mkdir -p "$HOME/node_modules/p$d"; for f in $(seq 20); do cp /tmp/blob "$HOME/node_modules/p$d/f$f.js"; done; done
rm /tmp/blob; du -sm "$HOME/node_modules" | cut -f1 > "$HOME/node_modules/.size"`

// BenchmarkSetupStartReady: a sandbox whose profile's setup installs
// ~200 MB of dependencies, prepared once (the setup's image committed),
// from no container to its first command with the dependencies there,
// beside a sandbox of the same profile without a setup to its first
// command (target ratio ≤ 1.2). It also reports what the setup costs
// once (setup-once-s), which a sandbox without it kept would pay at
// every start.
func BenchmarkSetupStartReady(b *testing.B) {
	p := benchPlugin(b)
	cli := dockertest.Engine(b)
	dockertest.RemoveNewImages(b, cli, "amelia-setup")
	benchSandbox(b, p, "bench-setup-warmup") // builds the sandbox image if needed
	ready := benchSpec("bench-setup-ready")
	ready.Setup = []sdk.SetupCommand{{Name: "install", Argv: []string{"sh", "-c", installScript}}}
	plain := benchSpec("bench-setup-plain")

	start := time.Now()
	prep, err := p.Prepare(b.Context(), ready)
	if err != nil {
		b.Fatal(err)
	}
	once := time.Since(start)
	if prep.UpToDate {
		b.Logf("the setup was prepared already; setup-once-s is its check only")
	}
	// first is the sandbox's first command: in the prepared one, it finds
	// the dependencies.
	first := func(s sdk.Spec, argv ...string) time.Duration {
		start := time.Now()
		sb, err := p.EnsureRunning(b.Context(), s)
		if err != nil || !sb.Created {
			b.Fatalf("EnsureRunning(%s): %+v %v", s.Name, sb, err)
		}
		var out strings.Builder
		st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: argv}, sdk.ExecIO{Stdout: &out})
		took := time.Since(start)
		if err != nil || st.Code != 0 {
			b.Fatalf("first command in %s: %+v %v %s", s.Name, st, err, out.String())
		}
		if mb, _ := strconv.Atoi(strings.TrimSpace(out.String())); len(argv) > 1 && mb < 190 {
			b.Fatalf("the prepared sandbox's dependencies are %q MB, want ~200", out.String())
		}
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			b.Fatal(err)
		}
		return took
	}
	var ours, base []time.Duration
	for b.Loop() {
		ours = append(ours, first(ready, "cat", "/home/amelia/node_modules/.size"))
		base = append(base, first(plain, "true"))
	}
	benchtest.Latencies(b, ours, base, "prepared", "plain")
	b.ReportMetric(once.Seconds(), "setup-once-s")
}
