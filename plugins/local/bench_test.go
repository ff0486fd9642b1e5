package local_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Side-by-side harnesses: each reports our figure (through the full plugin
// path: host → gRPC over go-plugin's mTLS socket → local provider in its own
// process → the command → Exit), the baseline's (os/exec in the benchmark
// process), and the ratio, in one line.
//
//	go test -run='^$' -bench=. -benchtime=300x ./plugins/local/

// benchSandbox launches the local provider as a plugin subprocess and starts
// a sandbox in it.
func benchSandbox(b *testing.B) (*pluginclient.Plugin, sdk.SandboxRef) {
	b.Helper()
	p, err := pluginclient.Launch(exec.Command(os.Args[0]), pluginclient.LaunchOptions{Name: "local"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	ref := sdk.SandboxRef{Name: "bench", Config: []byte(`{"root":"` + b.TempDir() + `"}`)}
	sb, err := p.EnsureRunning(b.Context(), sdk.Spec{SandboxRef: ref, Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}})
	if err != nil {
		b.Fatal(err)
	}
	return p, sb.Ref
}

// BenchmarkExecTrue: the round trip of `true`, p50 through the plugin and
// directly; overhead-ms is the difference (target: under 2 ms).
func BenchmarkExecTrue(b *testing.B) {
	p, ref := benchSandbox(b)
	truePath, err := exec.LookPath("true")
	if err != nil {
		b.Fatal(err)
	}
	var viaPlugin, direct []time.Duration
	for b.Loop() {
		start := time.Now()
		st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"true"}}, sdk.ExecIO{})
		if err != nil || st.Code != 0 {
			b.Fatalf("exec true: %+v %v", st, err)
		}
		mid := time.Now()
		if err := exec.Command(truePath).Run(); err != nil {
			b.Fatal(err)
		}
		viaPlugin, direct = append(viaPlugin, mid.Sub(start)), append(direct, time.Since(mid))
	}
	pp, dp := benchtest.Median(viaPlugin), benchtest.Median(direct)
	b.ReportMetric(float64(pp.Microseconds())/1000, "plugin-p50-ms")
	b.ReportMetric(float64(dp.Microseconds())/1000, "direct-p50-ms")
	b.ReportMetric(float64((pp-dp).Microseconds())/1000, "overhead-ms")
	b.ReportMetric(float64(pp)/float64(dp), "x-direct")
	b.ReportMetric(0, "ns/op")
}

// streamBytes is what BenchmarkStream moves per run: 1 GiB.
const streamBytes = 1 << 30

var (
	yesScript = []string{"sh", "-c", "yes | head -c 1073741824"}
	catScript = []string{"sh", "-c", "cat >/dev/null"}
)

// BenchmarkStream: 1 GiB through the plugin beside the same through a
// direct pipe, in MB/s, and the CPU time both took (this process, the
// plugin and the command) per GiB. stdout: `yes` output read by the host
// (target: the plugin at least 0.85× the pipe); stdin: zeros written by
// the host to `cat` (target: at least 0.8×). extra-cpu-s/GiB is what the
// plugin path costs beyond the pipe (target: at most 2 s).
func BenchmarkStream(b *testing.B) {
	p, ref := benchSandbox(b)
	b.Run("stdout", func(b *testing.B) {
		t := benchtest.Transfer{N: streamBytes, Meter: benchtest.NewCPUMeter(p.Pid())}
		for b.Loop() {
			t.Ours(b, func() {
				var out benchtest.Counter
				st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: ref, Argv: yesScript}, sdk.ExecIO{Stdout: &out})
				if err != nil || st.Code != 0 || out.N != streamBytes {
					b.Fatalf("exec: %+v %v, %d bytes", st, err, out.N)
				}
			})
			t.Base(b, func() { benchtest.Drain(b, exec.Command(yesScript[0], yesScript[1:]...), streamBytes) })
		}
		t.Report(b, "plugin", "pipe")
	})
	b.Run("stdin", func(b *testing.B) {
		t := benchtest.Transfer{N: streamBytes, Meter: benchtest.NewCPUMeter(p.Pid())}
		for b.Loop() {
			t.Ours(b, func() {
				in := benchtest.Zeros{N: streamBytes}
				st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: ref, Argv: catScript}, sdk.ExecIO{Stdin: &in})
				if err != nil || st.Code != 0 || in.N != 0 {
					b.Fatalf("exec: %+v %v, %d bytes not read", st, err, in.N)
				}
			})
			t.Base(b, func() { benchtest.Feed(b, exec.Command(catScript[0], catScript[1:]...), streamBytes) })
		}
		t.Report(b, "plugin", "pipe")
	})
}
