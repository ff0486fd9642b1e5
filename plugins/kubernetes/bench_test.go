package kubernetes_test

import (
	"fmt"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Side-by-side benchmarks against the test cluster, in-process, each
// beside what kubectl (of the cluster's version) does for the same:
//
//	go test -run='^$' -bench=. -benchtime=20x ./plugins/kubernetes/

// kubectl runs kubectl against the test cluster in namespace ns.
func kubectl(b *testing.B, kubectlPath, ns string, args ...string) *exec.Cmd {
	return exec.CommandContext(b.Context(), kubectlPath, append([]string{"--namespace", ns}, args...)...)
}

func mustRun(b *testing.B, cmd *exec.Cmd) {
	b.Helper()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd, err, out)
	}
}

// BenchmarkColdEnsureRunning: a new sandbox to its first command
// (EnsureRunning, which includes the worker's upload, then `true`) beside
// `kubectl run` + `kubectl wait` + `kubectl exec true` of a pod of the
// same image. The removals are not timed.
func BenchmarkColdEnsureRunning(b *testing.B) {
	c := cluster(b)
	cfg, ns := settings(b, c, map[string]any{"api": "pods"})
	p := newProvider(b, nil)
	i := 0
	var ours, base []time.Duration
	for b.Loop() {
		i++
		start := time.Now()
		sb, err := p.EnsureRunning(b.Context(), spec(fmt.Sprintf("cold-%d", i), cfg, sdk.NetworkOpen))
		if err == nil {
			_, err = p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{})
		}
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		pod := fmt.Sprintf("kubectl-%d", i)
		start = time.Now()
		mustRun(b, kubectl(b, c.Kubectl(), ns, "run", pod, "--image="+c.Image(), "--image-pull-policy=IfNotPresent", "--restart=Never", "--command", "--", "tini", "--", "sleep", "infinity"))
		mustRun(b, kubectl(b, c.Kubectl(), ns, "wait", "--for=condition=Ready", "--timeout=5m", "pod/"+pod))
		mustRun(b, kubectl(b, c.Kubectl(), ns, "exec", pod, "--", "true"))
		base = append(base, time.Since(start))
		b.StopTimer()
		if err := p.Teardown(b.Context(), sb.Ref); err != nil {
			b.Fatal(err)
		}
		mustRun(b, kubectl(b, c.Kubectl(), ns, "delete", "pod", pod, "--wait=true"))
		b.StartTimer()
	}
	benchtest.Latencies(b, ours, base, "ensure+exec", "kubectl-run+wait+exec")
}

// BenchmarkExecTrue: `true` in a running sandbox through the provider
// (the worker's envelope on its command session) beside `kubectl exec`.
func BenchmarkExecTrue(b *testing.B) {
	c := cluster(b)
	cfg, ns := settings(b, c, map[string]any{"api": "pods"})
	p := newProvider(b, nil)
	sb := up(b, p, spec("warm", cfg, sdk.NetworkOpen))
	exec := func() {
		if st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{}); err != nil || st.Code != 0 {
			b.Fatalf("exec: %+v %v", st, err)
		}
	}
	exec() // the session
	benchtest.Compare(b, "provider", "kubectl-exec", exec, func() {
		mustRun(b, kubectl(b, c.Kubectl(), ns, "exec", sb.Details["pod"], "--", "true"))
	})
}

// BenchmarkStream: 100 MiB of a command's stdout through the provider
// beside `kubectl exec … head -c`, both read to the end here.
func BenchmarkStream(b *testing.B) {
	const size = 100 << 20
	c := cluster(b)
	cfg, ns := settings(b, c, map[string]any{"api": "pods"})
	p := newProvider(b, nil)
	sb := up(b, p, spec("stream", cfg, sdk.NetworkOpen))
	argv := []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}
	var ours, base time.Duration
	for b.Loop() {
		var n benchtest.Counter
		start := time.Now()
		if st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: argv, Traffic: sdk.TrafficBulk}, sdk.ExecIO{Stdout: &n}); err != nil || st.Code != 0 || n.N != size {
			b.Fatalf("exec: %+v %v, %d bytes", st, err, n.N)
		}
		ours += time.Since(start)
		start = time.Now()
		benchtest.Drain(b, kubectl(b, c.Kubectl(), ns, append([]string{"exec", sb.Details["pod"], "--"}, argv...)...), size)
		base += time.Since(start)
	}
	benchtest.Throughput(b, size, ours, base, "provider", "kubectl-exec")
}

// BenchmarkTenSandboxes: ten sandboxes started at once, to their first
// command, and removed (not timed).
func BenchmarkTenSandboxes(b *testing.B) {
	c := cluster(b)
	cfg, _ := settings(b, c, map[string]any{"api": "pods"})
	p := newProvider(b, nil)
	round := 0
	for b.Loop() {
		round++
		var wg sync.WaitGroup
		refs := make([]sdk.SandboxRef, 10)
		errs := make([]error, 10)
		for i := range 10 {
			wg.Go(func() {
				sb, err := p.EnsureRunning(b.Context(), spec(fmt.Sprintf("ten-%d-%d", round, i), cfg, sdk.NetworkOpen))
				if err == nil {
					_, err = p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{})
				}
				refs[i], errs[i] = sb.Ref, err
			})
		}
		wg.Wait()
		b.StopTimer()
		for i := range 10 {
			if errs[i] != nil {
				b.Fatal(errs[i])
			}
			wg.Go(func() { _ = p.Teardown(b.Context(), refs[i]) })
		}
		wg.Wait()
		b.StartTimer()
	}
}
