package kubernetes_test

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	agentsv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/plugins/kubernetes"
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
		kubectlStart(b, c, ns, pod)
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

// kubectlStart is the baseline of a sandbox's start: `kubectl run` of a
// pod of the cluster's image, `kubectl wait` until it is ready and
// `kubectl exec true` in it.
func kubectlStart(b *testing.B, c *k8stest.Cluster, ns, pod string) {
	b.Helper()
	mustRun(b, kubectl(b, c.Kubectl(), ns, "run", pod, "--image="+c.Image(), "--image-pull-policy=IfNotPresent", "--restart=Never", "--command", "--", "tini", "--", "sleep", "infinity"))
	mustRun(b, kubectl(b, c.Kubectl(), ns, "wait", "--for=condition=Ready", "--timeout=5m", "pod/"+pod))
	mustRun(b, kubectl(b, c.Kubectl(), ns, "exec", pod, "--", "true"))
}

// BenchmarkWarmPoolClaim: a sandbox claimed from a warm pool to its first
// command (EnsureRunning with warm_pool, which includes the worker's
// upload, then `true`) beside the same baseline as
// BenchmarkColdEnsureRunning's: kubectl has no warm pool. Each round
// starts with a ready sandbox in the pool (the refill after the last
// claim is not timed, nor are the removals), so every claim adopts one.
func BenchmarkWarmPoolClaim(b *testing.B) {
	c := cluster(b)
	if !c.AgentSandbox() {
		b.Fatal("the test cluster has no Agent Sandbox controller")
	}
	cfg, ns := settings(b, c, map[string]any{"warm_pool": "pool", "image": nil, "image_pull_policy": nil})
	makeWarmPool(b, c, ns, "pool")
	p := newProvider(b, nil)
	i := 0
	var ours, base []time.Duration
	for b.Loop() {
		i++
		b.StopTimer()
		waitWarm(b, c, ns, "pool")
		b.StartTimer()
		name := fmt.Sprintf("warm-%d", i)
		start := time.Now()
		sb, err := p.EnsureRunning(b.Context(), spec(name, cfg, sdk.NetworkOpen))
		if err == nil {
			_, err = p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{})
		}
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		pod := fmt.Sprintf("kubectl-%d", i)
		start = time.Now()
		kubectlStart(b, c, ns, pod)
		base = append(base, time.Since(start))
		b.StopTimer()
		// A claim the pool could not serve starts its own pod, named
		// after the claim: that figure would be a cold start's.
		if sb.Details["pod"] == "amelia-"+name {
			b.Fatalf("claim %d was not served by the warm pool (pod %s)", i, sb.Details["pod"])
		}
		if err := p.Teardown(b.Context(), sb.Ref); err != nil {
			b.Fatal(err)
		}
		mustRun(b, kubectl(b, c.Kubectl(), ns, "delete", "pod", pod, "--wait=true"))
		b.StartTimer()
	}
	benchtest.Latencies(b, ours, base, "claim+exec", "kubectl-run+wait+exec")
}

// makeWarmPool makes a SandboxTemplate of the provider's pod and a
// SandboxWarmPool of one sandbox of it, named pool, in namespace ns.
func makeWarmPool(b *testing.B, c *k8stest.Cluster, ns, pool string) {
	b.Helper()
	tmpl := &extv1.SandboxTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: ns},
		Spec: extv1.SandboxTemplateSpec{
			SandboxBlueprint:        agentsv1.SandboxBlueprint{PodTemplate: agentsv1.PodTemplate{Spec: kubernetes.TemplatePodSpec(c.Image())}},
			NetworkPolicyManagement: extv1.NetworkPolicyManagementUnmanaged,
		},
	}
	wp := &extv1.SandboxWarmPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxWarmPool"},
		ObjectMeta: metav1.ObjectMeta{Name: pool, Namespace: ns},
		Spec:       extv1.SandboxWarmPoolSpec{Replicas: ptr.To[int32](1), TemplateRef: extv1.SandboxTemplateRef{Name: pool}},
	}
	dyn := c.Dynamic(b)
	for _, o := range []struct {
		res string
		obj any
	}{{"sandboxtemplates", tmpl}, {"sandboxwarmpools", wp}} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.obj)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := dyn.Resource(extv1.GroupVersion.WithResource(o.res)).Namespace(ns).Create(b.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
			b.Fatalf("create %s: %v", o.res, err)
		}
	}
}

// waitWarm watches the Sandboxes of namespace ns until one that the warm
// pool named pool holds (it is the pool's controller, not yet a claim's)
// is ready: what a claim adopts. Right after a claim the pool's own
// status may still count the sandbox just taken; its sandboxes do not.
func waitWarm(b *testing.B, c *k8stest.Cluster, ns, pool string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 3*time.Minute)
	defer cancel()
	ri := c.Dynamic(b).Resource(agentsv1.GroupVersion.WithResource("sandboxes")).Namespace(ns)
	warm := func(u *unstructured.Unstructured) bool {
		var sb agentsv1.Sandbox
		if u.GetDeletionTimestamp() != nil || runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sb) != nil {
			return false
		}
		owner := metav1.GetControllerOf(&sb)
		return owner != nil && owner.Kind == "SandboxWarmPool" && owner.Name == pool &&
			meta.IsStatusConditionTrue(sb.Status.Conditions, string(agentsv1.SandboxConditionReady))
	}
	for {
		list, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatalf("wait for a ready sandbox in warm pool %s/%s: %v", ns, pool, err)
		}
		if slices.ContainsFunc(list.Items, func(u unstructured.Unstructured) bool { return warm(&u) }) {
			return
		}
		w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
		if err != nil {
			b.Fatalf("wait for a ready sandbox in warm pool %s/%s: %v", ns, pool, err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break // list and watch again
			}
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type != watch.Deleted && warm(u) {
				w.Stop()
				return
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			b.Fatalf("wait for a ready sandbox in warm pool %s/%s: %v", ns, pool, ctx.Err())
		}
	}
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
