package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	agentsv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/kubernetes"
)

// End-to-end tests of amelia on the kubernetes provider, against the
// real two-node cluster of k8stest: the sandbox is a pod there, every
// command goes through pods/exec, and the scripted LLM is reached only
// through the tunnel over it.

// kubernetesSandbox is the e2e profile's sandbox block on the cluster,
// in namespace ns, with extra keys for the kubernetes block (nil removes
// one); the egress
// check tries checkTargets.
func kubernetesSandbox(c *k8stest.Cluster, ns, network string, extra map[string]any, checkTargets ...string) string {
	block := map[string]any{"namespace": ns, "image": c.Image(), "image_pull_policy": "IfNotPresent"}
	for k, v := range extra {
		if v == nil {
			delete(block, k)
		} else {
			block[k] = v
		}
	}
	b, _ := json.Marshal(block)
	targets, _ := json.Marshal(checkTargets)
	return fmt.Sprintf("{provider: kubernetes, network: %s, egress_check_targets: %s, kubernetes: %s}", network, targets, b)
}

// newKubernetesHost is a host whose e2e profile's sandbox is on the
// cluster; amelia reaches it through the admin kubeconfig.
func newKubernetesHost(t *testing.T, c *k8stest.Cluster, sandbox string, turns ...llmtest.Turn) *host {
	t.Helper()
	h := newHostWith(t, sandbox, "", llmtest.Options{}, turns...)
	h.env = append(h.env, "KUBECONFIG="+c.Kubeconfig())
	t.Cleanup(func() { h.amelia(t, "sandbox", "down") })
	return h
}

// amelia run on kubernetes, on both ways of holding a sandbox, brings
// the branch back; the agent ran as the sandbox's uid in its workdir,
// in a pod of the cluster.
func TestRunOnKubernetes(t *testing.T) {
	c := k8stest.Start(t)
	for _, api := range []string{"pods", "agent-sandbox"} {
		t.Run(api, func(t *testing.T) {
			ns := c.Namespace(t)
			h := newKubernetesHost(t, c, kubernetesSandbox(c, ns, "open", map[string]any{"api": api}),
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("pod.txt", "written in a pod\n")}},
				llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall("id -u; pwd; echo POD=$AMELIA_SANDBOX; echo PROBED")}},
				llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
			)
			r := h.amelia(t, "run", "--json", "--sandbox", "kubernetes", "--workflow", "pod-"+api, "Write pod.txt.")
			if r.code != 0 {
				t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
			}
			if got := h.git(t, "show", "amelia/pod-"+api+":pod.txt"); got != "written in a pod" {
				t.Errorf("pod.txt on the branch: %q", got)
			}
			probed := toolOutput(t, r.stdout, "PROBED")
			if !strings.HasPrefix(probed, "1000\n/workspace/") {
				t.Errorf("the agent did not run as uid 1000 in the sandbox's workspace:\n%s", probed)
			}
			pods, err := c.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=amelia"})
			if err != nil || len(pods.Items) != 1 {
				t.Fatalf("the sandbox's pods: %v, %v", pods, err)
			}
			if strings.Contains(r.stdout+r.stderr, upstreamKey) {
				t.Error("the upstream key appears in amelia's output")
			}
			if ls := h.amelia(t, "sandbox", "ls"); ls.code != 0 || !strings.Contains(ls.stdout, "kubernetes") {
				t.Errorf("amelia sandbox ls: exit %d\n%s%s", ls.code, ls.stdout, ls.stderr)
			}
			if down := h.amelia(t, "sandbox", "down"); down.code != 0 {
				t.Fatalf("amelia sandbox down: exit %d\n%s", down.code, down.stderr)
			}
			if pods, err := c.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=amelia"}); err != nil || len(pods.Items) != 0 {
				t.Errorf("pods left after amelia sandbox down: %d, %v", len(pods.Items), err)
			}
		})
	}
}

// gitDaemonPod runs git daemon, a TCP server the image has, in a pod of
// ns on node, and returns its address once it listens.
func gitDaemonPod(t *testing.T, c *k8stest.Cluster, ns, node string) string {
	t.Helper()
	client := c.Client(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "outside", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:    map[string]string{"kubernetes.io/hostname": node},
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsNonRoot: ptr.To(true)},
			Containers: []corev1.Container{{
				Name: "git", Image: c.Image(), ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"git", "daemon", "--listen=0.0.0.0", "--port=9418", "--base-path=/tmp", "--export-all"},
				// The kubelet reaches no pod here (the bridge has no address
				// of the node's): the probe runs in the container.
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9418"}}},
					PeriodSeconds: 1,
				},
			}},
		},
	}
	if _, err := client.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for {
		p, err := client.CoreV1().Pods(ns).Get(ctx, "outside", metav1.GetOptions{})
		if err == nil && p.Status.PodIP != "" {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					return p.Status.PodIP + ":9418"
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("git daemon pod not ready: %v (%v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// newFencedHost is a host whose profile's sandbox, of network none, is a
// plain pod on node in a new namespace, its egress check aimed at a pod of
// the test's on the same node; it returns the namespace and that pod's
// address too.
func newFencedHost(t *testing.T, c *k8stest.Cluster, node string, turns ...llmtest.Turn) (h *host, ns, target string) {
	ns = c.Namespace(t)
	target = gitDaemonPod(t, c, ns, node)
	sandbox := kubernetesSandbox(c, ns, "none", map[string]any{"api": "pods", "node_selector": map[string]string{"kubernetes.io/hostname": node}}, target)
	return newKubernetesHost(t, c, sandbox, turns...), ns, target
}

// On the test cluster's node without policy enforcement (plain bridge
// networking, as with a network plugin that ignores NetworkPolicies) a
// run with network none puts a policy on its pod, the egress check,
// aimed at a pod of the test's on the same node, still reaches it after
// the time the provider gives the plugin, and the run stops before the
// agent starts, saying what the policy needs. The LLM is never asked and
// no branch comes back.
func TestRunOnKubernetesRefusesUnenforcedPolicy(t *testing.T) {
	c := k8stest.Start(t)
	h, ns, target := newFencedHost(t, c, c.UnenforcedNode(), llmtest.Turn{Text: "never asked"})
	r := h.amelia(t, "run", "--workflow", "fenced", "Write nothing.")
	want := `profile e2e asks for network "none", but the sandbox reached ` + target + " directly (still, after 30s): provider kubernetes does not enforce it here (NetworkPolicy " + ns + "/amelia-"
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "only a network plugin that enforces NetworkPolicies") {
		t.Fatalf("amelia run on a cluster that does not enforce NetworkPolicies: exit %d, want a refusal saying %q and what is needed\nstderr: %s", r.code, want, r.stderr)
	}
	if n := len(h.up.Requests()); n != 0 {
		t.Errorf("the LLM got %d requests; the agent must not start", n)
	}
	if b := h.git(t, "branch", "--list", "amelia/fenced"); b != "" {
		t.Errorf("a refused run left a branch: %q", b)
	}
}

// On the node where kube-router enforces NetworkPolicies, a run with
// network none passes the egress check (aimed at a pod of the test's on
// the same node) and brings its branch back, its agent reaching the LLM
// only through the tunnel over pods/exec. The policy is what fenced it:
// once the test deletes it, the sandbox reaches the same pod; the next
// amelia command puts it back.
func TestRunOnKubernetesEnforcesPolicy(t *testing.T) {
	c := k8stest.Start(t)
	h, ns, target := newFencedHost(t, c, c.PolicyNode(),
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("fenced.txt", "written behind a policy\n")}},
		llmtest.Turn{Text: "Done."})
	r := h.amelia(t, "run", "--workflow", "fenced", "Write fenced.txt.")
	if r.code != 0 {
		t.Fatalf("amelia run with network none where the policy is enforced: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if got := h.git(t, "show", "amelia/fenced:fenced.txt"); got != "written behind a policy" {
		t.Errorf("fenced.txt on the branch: %q", got)
	}
	if n := len(h.up.Requests()); n != 2 {
		t.Errorf("the LLM got %d requests through the tunnel, want 2", n)
	}

	client := c.Client(t)
	managed := metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=amelia"}
	policies, err := client.NetworkingV1().NetworkPolicies(ns).List(t.Context(), managed)
	if err != nil || len(policies.Items) != 1 {
		t.Fatalf("the sandbox's NetworkPolicies: %v, %v", policies, err)
	}
	pods, err := client.CoreV1().Pods(ns).List(t.Context(), managed)
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the sandbox's pods: %v, %v", pods, err)
	}
	policy, pod := policies.Items[0].Name, pods.Items[0].Name
	if err := client.NetworkingV1().NetworkPolicies(ns).Delete(t.Context(), policy, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// From outside amelia (any amelia command would put the policy back).
	host, port, _ := strings.Cut(target, ":")
	probe := fmt.Sprintf("timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s' && echo REACHED", host, port)
	for {
		out, err := exec.CommandContext(t.Context(), c.Kubectl(), "--kubeconfig", c.Kubeconfig(), "exec", "-n", ns, pod, "--", "bash", "-c", probe).CombinedOutput()
		if strings.Contains(string(out), "REACHED") {
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("the sandbox never reached %s once its NetworkPolicy was gone: %s (%v)", target, out, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if r := h.amelia(t, "sandbox", "exec", "--", "true"); r.code != 0 {
		t.Fatalf("amelia sandbox exec: exit %d: %s", r.code, r.stderr)
	}
	if _, err := client.NetworkingV1().NetworkPolicies(ns).Get(t.Context(), policy, metav1.GetOptions{}); err != nil {
		t.Errorf("amelia did not put the sandbox's NetworkPolicy back: %v", err)
	}
}

// A run on kubernetes outlives its host: amelia killed with -9 mid-run,
// `amelia attach` picks the run up from the pod and brings its branch
// back; the shared plugin killed mid-run is started again; Ctrl-C stops
// the run and everything it started in the pod.
func TestKubernetesRunsOutliveTheirHost(t *testing.T) {
	c := k8stest.Start(t)
	block := func(t *testing.T) string {
		return kubernetesSandbox(c, c.Namespace(t), "open", map[string]any{"api": "pods"})
	}
	t.Run("attach", func(t *testing.T) {
		g := newGate(t)
		h := newKubernetesHost(t, c, block(t), gatedTurns(g)...)
		h.attachAfterHostDied(t, g, "orphan")
	})
	t.Run("plugin crash", func(t *testing.T) {
		g := newGate(t)
		h := newKubernetesHost(t, c, block(t), gatedTurns(g)...)
		h.survivesFault(t, g, "crash", "starting it again", func(*running) { killPlugin(t, h) })
	})
	t.Run("Ctrl-C", func(t *testing.T) {
		g := newGate(t)
		h := newKubernetesHost(t, c, block(t), gatedTurns(g)...)
		h.interruptedKillsAll(t, g, "stop-me")
	})
}

// warmPool makes a SandboxTemplate of the provider's own pod and a
// SandboxWarmPool "pool" of one in ns, and waits until it holds a ready
// sandbox.
func warmPool(t *testing.T, c *k8stest.Cluster, ns string) {
	t.Helper()
	dyn := c.Dynamic(t)
	tmpl := &extv1.SandboxTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: "agents", Namespace: ns},
		Spec: extv1.SandboxTemplateSpec{
			SandboxBlueprint:        agentsv1.SandboxBlueprint{PodTemplate: agentsv1.PodTemplate{Spec: kubernetes.TemplatePodSpec(c.Image())}},
			NetworkPolicyManagement: extv1.NetworkPolicyManagementUnmanaged,
		},
	}
	pool := &extv1.SandboxWarmPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxWarmPool"},
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec:       extv1.SandboxWarmPoolSpec{Replicas: ptr.To[int32](1), TemplateRef: extv1.SandboxTemplateRef{Name: "agents"}},
	}
	for _, o := range []struct {
		res string
		obj any
	}{{"sandboxtemplates", tmpl}, {"sandboxwarmpools", pool}} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(extv1.GroupVersion.WithResource(o.res)).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", o.res, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for {
		u, err := dyn.Resource(extv1.GroupVersion.WithResource("sandboxwarmpools")).Namespace(ns).Get(ctx, "pool", metav1.GetOptions{})
		var p extv1.SandboxWarmPool
		if err == nil {
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
		}
		if err == nil && p.Status.ReadyReplicas >= 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the warm pool has no ready sandbox: %v %+v", err, p.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// amelia run on a sandbox claimed from a warm pool: the run's pod is
// one the pool made, and its branch comes back.
func TestRunOnKubernetesWarmPool(t *testing.T) {
	c := k8stest.Start(t)
	ns := c.Namespace(t)
	warmPool(t, c, ns)
	h := newKubernetesHost(t, c, kubernetesSandbox(c, ns, "open", map[string]any{"warm_pool": "pool", "image": nil, "image_pull_policy": nil}),
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("warm.txt", "written in a warm pod\n")}},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
	)
	r := h.amelia(t, "run", "--sandbox", "kubernetes", "--workflow", "warm", "Write warm.txt.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	if got := h.git(t, "show", "amelia/warm:warm.txt"); got != "written in a warm pod" {
		t.Errorf("warm.txt on the branch: %q", got)
	}
	pods, err := c.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=amelia"})
	if err != nil || len(pods.Items) != 1 || strings.HasPrefix(pods.Items[0].Name, "amelia-") {
		t.Errorf("the sandbox's pod: %v, %v; want one pod of the pool's", pods, err)
	}
}

// Ten amelia runs at once, of ten profiles, each with its sandbox, on
// the two-node cluster: all succeed, and their pods spread over both
// nodes.
func TestTenKubernetesRunsAtOnce(t *testing.T) {
	const n = 10
	c := k8stest.Start(t)
	ns := c.Namespace(t)
	block := kubernetesSandbox(c, ns, "open", map[string]any{"api": "pods"})
	h := newHostWith(t, block, "", llmtest.Options{Script: func(int, *llmtest.Request) llmtest.Turn { return llmtest.Turn{Text: "done"} }})
	h.env = append(h.env, "KUBECONFIG="+c.Kubeconfig())
	for i := range n {
		h.addProfileYAML(t, fmt.Sprintf("  p%d:\n    model: test-model\n    llm: {base_url: %q, api_key_env: AMELIA_E2E_KEY}\n    sandbox: %s\n", i, h.up.URL()+"/v1", block))
	}
	t.Cleanup(func() {
		for i := range n {
			h.amelia(t, "--profile", fmt.Sprintf("p%d", i), "sandbox", "down")
		}
	})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if r := h.amelia(t, "--profile", fmt.Sprintf("p%d", i), "run", "--workflow", fmt.Sprintf("ten-%d", i), "answer"); r.code != 0 {
				t.Errorf("run %d: exit %d\n%s", i, r.code, r.stderr)
			}
		})
	}
	wg.Wait()
	pods, err := c.Client(t).CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=amelia"})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]int{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName]++
	}
	if len(pods.Items) != n || len(nodes) != 2 {
		t.Errorf("%d sandbox pods on nodes %v; want %d over both nodes", len(pods.Items), nodes, n)
	}
}
