package daytona_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// installScript stands in for a dependency install of ~200 MB, without a
// network: 4,000 files of 50 KiB in 200 packages under ~/node_modules,
// from data made in the sandbox.
const installScript = `set -e; head -c 51200 /dev/urandom > /tmp/blob
for d in $(seq 200); do mkdir -p "$HOME/node_modules/p$d"; for f in $(seq 20); do cp /tmp/blob "$HOME/node_modules/p$d/f$f.js"; done; done
rm /tmp/blob; du -sm "$HOME/node_modules" | cut -f1 > "$HOME/node_modules/.size"`

// BenchmarkSetupStartReady: on the fake Daytona (container sandboxes), a
// sandbox whose setup installs ~200 MB, its snapshot prepared once, from
// nothing to its first command with the dependencies there, beside a
// sandbox of the same profile without setup (target ratio ≤ 1.2); and
// what the setup's snapshot took to build once (setup-once-s).
func BenchmarkSetupStartReady(b *testing.B) {
	_, cfg := start(b, daytonatest.Options{}, map[string]any{"image": image.TestBase})
	p := newProvider(b)
	setup := []sdk.SetupCommand{{Name: "install", Argv: []string{"sh", "-c", installScript}}}
	began := time.Now()
	s := spec("bench-setup", cfg, sdk.NetworkOpen)
	s.Setup = setup
	if _, err := p.Prepare(b.Context(), s); err != nil {
		b.Fatal(err)
	}
	once := time.Since(began)
	n := 0
	first := func(withSetup bool) time.Duration {
		n++
		s := spec(fmt.Sprintf("bench-setup-%d", n), cfg, sdk.NetworkOpen)
		argv := []string{"true"}
		if withSetup {
			s.Setup, argv = setup, []string{"cat", "/home/daytona/node_modules/.size"}
		}
		start := time.Now()
		sb, err := p.EnsureRunning(b.Context(), s)
		if err != nil || !sb.Created {
			b.Fatalf("EnsureRunning: %+v %v", sb, err)
		}
		var out strings.Builder
		st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: argv}, sdk.ExecIO{Stdout: &out})
		took := time.Since(start)
		if err != nil || st.Code != 0 {
			b.Fatalf("first command: %+v %v", st, err)
		}
		if mb, _ := strconv.Atoi(strings.TrimSpace(out.String())); withSetup && mb < 190 {
			b.Fatalf("the prepared sandbox's dependencies are %q MB, want ~200", out.String())
		}
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			b.Fatal(err)
		}
		return took
	}
	first(false) // the plain sandbox's image, once
	var ours, base []time.Duration
	for b.Loop() {
		ours = append(ours, first(true))
		base = append(base, first(false))
	}
	benchtest.Latencies(b, ours, base, "prepared", "plain")
	b.ReportMetric(once.Seconds(), "setup-once-s")
}
