package kubernetes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// paths runs a test on both ways of holding a sandbox.
func paths(t *testing.T, test func(t *testing.T, api string)) {
	for _, api := range []string{"pods", "agent-sandbox"} {
		t.Run(api, func(t *testing.T) {
			if api == "agent-sandbox" && !cluster(t).AgentSandbox() {
				t.Fatal("the test cluster has no Agent Sandbox controller")
			}
			test(t, api)
		})
	}
}

// A sandbox is reused by another process, with its files; a pod that
// ended (its PID 1 gone) is made again, without them, and a ref to the
// old one no longer reaches anything.
func TestReuseAndReplace(t *testing.T) {
	paths(t, func(t *testing.T, api string) {
		c := cluster(t)
		cfg, ns := settings(t, c, map[string]any{"api": api})
		first := up(t, newProvider(t, nil), spec("reuse", cfg, sdk.NetworkOpen))
		if !first.Created || first.Workdir != "/workspace" || first.Details["api"] != api {
			t.Fatalf("first EnsureRunning: %+v", first)
		}
		p := newProvider(t, nil) // another amelia process
		if out, _, err := run(t, p, first.Ref, "echo kept > kept.txt && pwd && id -u"); err != nil || out != "/workspace\n1000\n" {
			t.Fatalf("exec: %q, %v", out, err)
		}
		again, err := p.EnsureRunning(t.Context(), spec("reuse", cfg, sdk.NetworkOpen))
		if err != nil || again.Created || again.Ref.ID != first.Ref.ID {
			t.Fatalf("second EnsureRunning: %+v, %v (want the same sandbox, not created)", again, err)
		}
		// Its workspace is an emptyDir, which a pod that ended has lost:
		// it gets no watchdog, and says why it never stops.
		if stop := first.Details[sdk.DetailStop]; stop != "" {
			t.Errorf("a sandbox whose workspace is an emptyDir has Details[%q] = %q; want none: stopping it would lose its work", sdk.DetailStop, stop)
		}
		if h, err := p.HealthCheck(t.Context(), first.Ref); err != nil || h.State != sdk.HealthReady || !strings.Contains(h.NeverStops, "kubernetes.workspace_volume") {
			t.Errorf("health: %+v, %v; want ready, never stopping for want of kubernetes.workspace_volume", h, err)
		}

		// tini, PID 1, runs as the sandbox's user: a TERM ends the pod.
		run(t, p, first.Ref, "kill -TERM 1")
		client := c.Client(t)
		pod := first.Details["pod"]
		waitPod(t, client.CoreV1().Pods(ns), pod, func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
		})
		if h, err := p.HealthCheck(t.Context(), first.Ref); err != nil || h.State == sdk.HealthReady {
			t.Errorf("health of the ended sandbox: %+v, %v", h, err)
		}
		replaced, err := newProvider(t, nil).EnsureRunning(t.Context(), spec("reuse", cfg, sdk.NetworkOpen))
		if err != nil || replaced.Ref.ID == first.Ref.ID {
			t.Fatalf("EnsureRunning over the ended pod: %+v, %v (want a new pod)", replaced, err)
		}
		if out, _, err := run(t, p, replaced.Ref, "ls"); err != nil || out != "" {
			t.Errorf("the new sandbox's workdir: %q, %v; want it empty", out, err)
		}
		_, _, err = run(t, p, first.Ref, "true")
		expect(t, "exec by the ended pod's ref", err, sdk.ErrNotFound, "amelia sandbox up")
	})
}

// waitPod waits, with a watch, until the pod of that name satisfies ok.
func waitPod(t *testing.T, pods interface {
	Get(context.Context, string, metav1.GetOptions) (*corev1.Pod, error)
}, name string, ok func(*corev1.Pod) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err == nil && ok(p) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s: %v (last: %v %+v)", name, ctx.Err(), err, p.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// An image that cannot be pulled fails EnsureRunning with the reason,
// once the kubelet gives up on it, and leaves no pod behind; the wait
// said where the pod was as it went.
func TestImageCannotBePulled(t *testing.T) {
	paths(t, func(t *testing.T, api string) {
		c := cluster(t)
		cfg, ns := settings(t, c, map[string]any{"api": api, "image": "amelia-no-such-image:1"})
		var l logs
		_, err := newProvider(t, &l).EnsureRunning(t.Context(), spec("nopull", cfg, sdk.NetworkOpen))
		expect(t, "EnsureRunning of an image no node has", err, sdk.ErrUnavailable, "ImagePullBackOff")
		if !strings.Contains(l.String(), "Pending") {
			t.Errorf("no phase reported while waiting; log:\n%s", l.String())
		}
		pods, err := c.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				t.Errorf("pod %s left behind (%s)", p.Name, p.Status.Phase)
			}
		}
	})
}

// A pod no node can take is reported Unschedulable, with the scheduler's
// reason, while EnsureRunning waits for it.
func TestUnschedulableIsReported(t *testing.T) {
	c := cluster(t)
	cfg, _ := settings(t, c, map[string]any{"api": "pods", "node_selector": map[string]string{"amelia.test/no-such-node": "x"}})
	var l logs
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := newProvider(t, &l).EnsureRunning(ctx, spec("unschedulable", cfg, sdk.NetworkOpen))
		done <- err
	}()
	deadline := time.After(2 * time.Minute)
	for !strings.Contains(l.String(), "Unschedulable") {
		select {
		case err := <-done:
			t.Fatalf("EnsureRunning returned %v before reporting the pod unschedulable; log:\n%s", err, l.String())
		case <-deadline:
			t.Fatalf("no Unschedulable reported; log:\n%s", l.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !strings.Contains(l.String(), "node affinity/selector") {
		t.Errorf("the scheduler's reason is not in the report:\n%s", l.String())
	}
	cancel()
	if err := <-done; err == nil {
		t.Error("EnsureRunning of an unschedulable pod succeeded")
	}
}

// List finds a sandbox by each of its labels, values that no label can
// hold included, and reports them as they were given; not once it is
// torn down.
func TestListByLabels(t *testing.T) {
	paths(t, func(t *testing.T, api string) {
		c := cluster(t)
		cfg, _ := settings(t, c, map[string]any{"api": api})
		p := newProvider(t, nil)
		s := spec("listed_1", cfg, sdk.NetworkOpen)
		s.Labels["amelia.config"] = "/home/someone/.config/amelia/config.yaml"
		s.Labels["amelia.created"] = "2026-11-28T19:55:42Z"
		s.Labels["amelia.owner"] = "someone@host"
		sb, err := p.EnsureRunning(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Labels {
			got, err := p.List(t.Context(), sdk.ListRequest{Config: cfg, Labels: map[string]string{k: v}})
			if err != nil || len(got) != 1 || got[0].Ref.Name != s.Name || got[0].Labels[k] != v || got[0].State != sdk.HealthReady {
				t.Errorf("List by %s=%s: %+v, %v", k, v, got, err)
			}
		}
		if got, err := p.List(t.Context(), sdk.ListRequest{Config: cfg, Labels: map[string]string{"amelia.owner": "someone@other"}}); err != nil || len(got) != 0 {
			t.Errorf("List by another owner: %+v, %v", got, err)
		}
		if err := p.Teardown(t.Context(), sb.Ref); err != nil {
			t.Fatal(err)
		}
		if got, err := p.List(t.Context(), sdk.ListRequest{Config: cfg}); err != nil || len(got) != 0 {
			t.Errorf("List after Teardown: %+v, %v", got, err)
		}
	})
}

// Network none puts a NetworkPolicy denying all traffic on the pod,
// which Teardown removes; a sandbox made for one policy is not reused for
// another.
func TestNetworkPolicy(t *testing.T) {
	paths(t, func(t *testing.T, api string) {
		c := cluster(t)
		cfg, ns := settings(t, c, map[string]any{"api": api})
		p := newProvider(t, nil)
		sb := up(t, p, spec("isolated", cfg, sdk.NetworkNone))
		client := c.Client(t)
		nps, err := client.NetworkingV1().NetworkPolicies(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil || len(nps.Items) != 1 {
			t.Fatalf("NetworkPolicies: %v, %v", nps, err)
		}
		np := nps.Items[0]
		pod, err := client.CoreV1().Pods(ns).Get(t.Context(), sb.Details["pod"], metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(labels.Set(pod.Labels)) || len(np.Spec.Egress) != 0 || len(np.Spec.Ingress) != 0 || len(np.Spec.PolicyTypes) != 2 {
			t.Errorf("the policy %+v does not deny everything to pod %s (labels %v)", np.Spec, pod.Name, pod.Labels)
		}
		_, err = p.EnsureRunning(t.Context(), spec("isolated", cfg, sdk.NetworkOpen))
		expect(t, "EnsureRunning with network open", err, sdk.ErrConflict, `was created with network "none"`)
		if err := p.Teardown(t.Context(), sb.Ref); err != nil {
			t.Fatal(err)
		}
		if _, err := client.NetworkingV1().NetworkPolicies(ns).Get(t.Context(), np.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the NetworkPolicy after Teardown: %v", err)
		}
	})
}

// A pod of the sandbox's name that Amelia did not make is neither used
// nor removed.
func TestForeignPodIsLeftAlone(t *testing.T) {
	c := cluster(t)
	cfg, ns := settings(t, c, map[string]any{"api": "pods"})
	client := c.Client(t)
	foreign := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "amelia-foreign", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: c.Image(), ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{"sleep", "infinity"}}}},
	}
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, nil)
	s := spec("foreign", cfg, sdk.NetworkOpen)
	_, err := p.EnsureRunning(t.Context(), s)
	expect(t, "EnsureRunning over a foreign pod", err, sdk.ErrConflict, "is not sandbox foreign's")
	expect(t, "Teardown of a foreign pod", p.Teardown(t.Context(), s.SandboxRef), sdk.ErrConflict, "refusing to remove pod")
	if _, err := client.CoreV1().Pods(ns).Get(t.Context(), "amelia-foreign", metav1.GetOptions{}); err != nil {
		t.Errorf("the foreign pod: %v", err)
	}
}

// A sandbox of network none is fenced where the network plugin enforces
// NetworkPolicies (kube-router, on the test cluster's PolicyNode: its
// egress check finds nothing it can reach, once the plugin has programmed
// the policy) and reaches another pod where none is enforced
// (UnenforcedNode), which the run's egress check finds (amelia then
// refuses the run, naming what the sandbox's Details say is needed). The
// listener is git daemon in a sandbox of network open on the same node
// (the test cluster routes no pod traffic between its nodes): the image
// has no other TCP server.
func TestNetworkPolicyEnforcement(t *testing.T) {
	c := cluster(t)
	for _, tc := range []struct {
		name     string
		node     string
		enforced bool
	}{
		{"enforced", c.PolicyNode(), true},
		{"not enforced", c.UnenforcedNode(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ns := settings(t, c, map[string]any{"api": "pods", "node_selector": map[string]string{"kubernetes.io/hostname": tc.node}})
			p := newProvider(t, nil)
			target := gitDaemon(t, c, p, ns, up(t, p, spec("listener", cfg, sdk.NetworkOpen)))
			isolated := up(t, p, spec("isolated", cfg, sdk.NetworkNone))
			if d := isolated.Details[sdk.DetailEgress]; !strings.Contains(d, "enforces NetworkPolicies") {
				t.Errorf("Details[%s] = %q, want what the policy needs", sdk.DetailEgress, d)
			}
			if d := isolated.Details[sdk.DetailEgressSettle]; d != "30s" {
				t.Errorf("Details[%s] = %q, want 30s", sdk.DetailEgressSettle, d)
			}
			check := `exec "$HOME"/.amelia/bin/amelia-worker-* egress-check ` + target
			if !tc.enforced {
				out, st, err := run(t, p, isolated.Ref, check)
				if err != nil || st.Code != 3 || !strings.Contains(out, "reachable "+target) {
					t.Errorf("egress-check from the sandbox of network none: %q exit %d %v; want %s reachable (nothing enforces the policy)", out, st.Code, err, target)
				}
				return
			}
			// The plugin programs the policy when it sees the pod.
			for {
				out, st, err := run(t, p, isolated.Ref, check)
				if err != nil || st.Code != 0 && st.Code != 3 {
					t.Fatalf("egress-check: %q exit %d %v", out, st.Code, err)
				}
				if st.Code == 0 {
					break
				}
				select {
				case <-t.Context().Done():
					t.Fatalf("the sandbox of network none still reaches %s where kube-router enforces its policy", target)
				case <-time.After(200 * time.Millisecond):
				}
			}
		})
	}
}

// gitDaemon serves git daemon in the sandbox server of ns until the test
// ends and returns its address once it listens.
func gitDaemon(t *testing.T, c *k8stest.Cluster, p sdk.Provider, ns string, server sdk.Sandbox) string {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	var daemonErr logs
	go func() {
		_, err := p.Exec(ctx, sdk.ExecRequest{Sandbox: server.Ref, Argv: []string{"git", "daemon", "--listen=0.0.0.0", "--port=9418", "--base-path=/workspace", "--export-all"}}, sdk.ExecIO{Stderr: &daemonErr})
		served <- err
	}()
	t.Cleanup(func() { stop(); <-served })
	pod, err := c.Client(t).CoreV1().Pods(ns).Get(t.Context(), server.Details["pod"], metav1.GetOptions{})
	if err != nil || pod.Status.PodIP == "" {
		t.Fatalf("the listener's pod: %v %v", pod, err)
	}
	// Wait until it listens, from where it runs.
	if out, st, err := run(t, p, server.Ref, `exec bash -c 'for i in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/9418) 2>/dev/null && exit 0; sleep 0.1; done; exit 1'`); err != nil || st.Code != 0 {
		t.Fatalf("git daemon does not listen: %q %+v %v; its stderr: %s", out, st, err, daemonErr.String())
	}
	return pod.Status.PodIP + ":9418"
}

// The sandbox pod passes Pod Security Admission's restricted level, on
// both paths: a namespace that enforces it admits it.
func TestRestrictedPodSecurity(t *testing.T) {
	paths(t, func(t *testing.T, api string) {
		c := cluster(t)
		cfg, ns := settings(t, c, map[string]any{"api": api})
		patch := []byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`)
		if _, err := c.Client(t).CoreV1().Namespaces().Patch(t.Context(), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		p := newProvider(t, nil)
		sb := up(t, p, spec("restricted", cfg, sdk.NetworkOpen))
		if out, _, err := run(t, p, sb.Ref, "id -u"); err != nil || out != "1000\n" {
			t.Errorf("exec: %q %v", out, err)
		}
	})
}

// With a TTL, the Sandbox's shutdownTime is a TTL ahead, and moves ahead
// while the provider uses the sandbox.
func TestTTLMovesShutdownAhead(t *testing.T) {
	c := cluster(t)
	if !c.AgentSandbox() {
		t.Fatal("the test cluster has no Agent Sandbox controller")
	}
	cfg, ns := settings(t, c, map[string]any{"api": "agent-sandbox", "ttl": "1m"})
	start := time.Now()
	up(t, newProvider(t, nil), spec("ttl", cfg, sdk.NetworkOpen))
	sandboxes := c.Dynamic(t).Resource(schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}).Namespace(ns)
	shutdown := func() time.Time {
		t.Helper()
		o, err := sandboxes.Get(t.Context(), "amelia-ttl", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := unstructured.NestedString(o.Object, "spec", "shutdownTime")
		at, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatalf("shutdownTime %q: %v", s, err)
		}
		return at
	}
	first := shutdown()
	if first.Before(start.Add(50*time.Second)) || first.After(time.Now().Add(time.Minute+time.Second)) {
		t.Fatalf("shutdownTime %v, want a minute after %v", first, start)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for !shutdown().After(first) {
		select {
		case <-ctx.Done():
			t.Fatalf("shutdownTime stayed %v", first)
		case <-time.After(time.Second):
		}
	}
}
