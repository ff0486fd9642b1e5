package k8stest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

var (
	sandboxes  = schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}
	templates  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}
	warmPools  = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxwarmpools"}
	claims     = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxclaims"}
	waitLonger = 3 * time.Minute // the machine is often loaded: generous, and only a bound
)

// podSpec is a sandbox-like pod: the base image, no grace at deletion.
func podSpec(c *Cluster) corev1.PodSpec {
	zero := int64(0)
	return corev1.PodSpec{
		TerminationGracePeriodSeconds: &zero,
		AutomountServiceAccountToken:  new(bool),
		Containers: []corev1.Container{{
			Name:            "main",
			Image:           c.Image(),
			ImagePullPolicy: corev1.PullNever,
			Command:         []string{"sleep", "infinity"},
		}},
	}
}

// A pod runs on each node, and exec into it, through the apiserver, the
// kubelet and containerd's stream server, brings back both streams and
// the exit code.
func TestPodOnEachNodeExec(t *testing.T) {
	c := Start(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	if n := c.Nodes(); len(n) != 2 {
		t.Fatalf("Nodes() = %v, want two", n)
	}
	for _, node := range c.Nodes() {
		t.Run(node, func(t *testing.T) {
			spec := podSpec(c)
			spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "exec-"}, Spec: spec}
			ctx, cancel := context.WithTimeout(context.Background(), waitLonger)
			defer cancel()
			pod, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod = waitRunning(ctx, t, cs, ns, pod.Name)
			if pod.Spec.NodeName != node {
				t.Errorf("pod ran on %q, want %q", pod.Spec.NodeName, node)
			}
			stdout, stderr, code := execIn(ctx, t, c, ns, pod.Name, "echo out; echo err >&2; exit 3")
			if stdout != "out\n" || stderr != "err\n" || code != 3 {
				t.Errorf("exec: stdout %q, stderr %q, exit %d; want \"out\\n\", \"err\\n\", 3", stdout, stderr, code)
			}
		})
	}
}

// Another process on the host uses the kubeconfig, verifying the
// apiserver's certificate.
func TestKubeconfigFromAnotherProcess(t *testing.T) {
	c := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLonger)
	defer cancel()
	out, err := exec.CommandContext(ctx, c.Kubectl(), "--kubeconfig", c.Kubeconfig(), "get", "nodes", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodes: %v\n%s", err, out)
	}
	for _, n := range c.Nodes() {
		if !strings.Contains(string(out), "node/"+n+"\n") {
			t.Errorf("kubectl get nodes said %q; want node/%s among them", out, n)
		}
	}
}

// A Sandbox with a pod template becomes Ready under the controller.
func TestSandboxReady(t *testing.T) {
	c := Start(t)
	if !c.AgentSandbox() {
		t.Fatal("the cluster has no Agent Sandbox controller")
	}
	ns := c.Namespace(t)
	dyn := c.Dynamic(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLonger)
	defer cancel()
	sb := object("agents.x-k8s.io/v1beta1", "Sandbox", "sb", map[string]any{"podTemplate": podTemplate(t, c)})
	if _, err := dyn.Resource(sandboxes).Namespace(ns).Create(ctx, sb, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Sandbox: %v", err)
	}
	waitReady(ctx, t, func(ctx context.Context) (*unstructured.Unstructured, error) {
		return dyn.Resource(sandboxes).Namespace(ns).Get(ctx, "sb", metav1.GetOptions{})
	})
}

// A SandboxClaim against a SandboxWarmPool gives a Ready sandbox.
func TestWarmPoolClaimReady(t *testing.T) {
	c := Start(t)
	if !c.AgentSandbox() {
		t.Fatal("the cluster has no Agent Sandbox controller")
	}
	ns := c.Namespace(t)
	dyn := c.Dynamic(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitLonger)
	defer cancel()
	steps := []struct {
		gvr schema.GroupVersionResource
		obj *unstructured.Unstructured
	}{
		{templates, object("extensions.agents.x-k8s.io/v1beta1", "SandboxTemplate", "tpl", map[string]any{"podTemplate": podTemplate(t, c)})},
		{warmPools, object("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool", "pool", map[string]any{"replicas": int64(1), "sandboxTemplateRef": map[string]any{"name": "tpl"}})},
	}
	for _, s := range steps {
		if _, err := dyn.Resource(s.gvr).Namespace(ns).Create(ctx, s.obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", s.obj.GetKind(), err)
		}
	}
	// The pool is warm first, so the claim takes a sandbox from it.
	err := poll(ctx, func(ctx context.Context) error {
		p, err := dyn.Resource(warmPools).Namespace(ns).Get(ctx, "pool", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if n, _, _ := unstructured.NestedInt64(p.Object, "status", "readyReplicas"); n < 1 {
			return fmt.Errorf("warm pool has %d ready replicas", n)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wait for the warm pool: %v", err)
	}
	claim := object("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim", "claim", map[string]any{"warmPoolRef": map[string]any{"name": "pool"}})
	if _, err := dyn.Resource(claims).Namespace(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create SandboxClaim: %v", err)
	}
	got := waitReady(ctx, t, func(ctx context.Context) (*unstructured.Unstructured, error) {
		return dyn.Resource(claims).Namespace(ns).Get(ctx, "claim", metav1.GetOptions{})
	})
	if name, _, _ := unstructured.NestedString(got.Object, "status", "sandbox", "name"); name == "" {
		t.Errorf("the Ready claim names no sandbox: %v", got.Object["status"])
	}
}

func object(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

// podTemplate is podSpec as the Agent Sandbox objects take it.
func podTemplate(t *testing.T, c *Cluster) map[string]any {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.Pod{Spec: podSpec(c)})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{"spec": u["spec"]}
}

// waitReady waits until the object get returns has condition Ready True.
func waitReady(ctx context.Context, t *testing.T, get func(context.Context) (*unstructured.Unstructured, error)) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	err := poll(ctx, func(ctx context.Context) error {
		u, err := get(ctx)
		if err != nil {
			return err
		}
		got = u
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" && m["status"] == "True" {
				return nil
			}
		}
		return fmt.Errorf("%s %s not Ready: %v", u.GetKind(), u.GetName(), conds)
	})
	if err != nil {
		t.Fatalf("wait for Ready: %v", err)
	}
	return got
}

// waitRunning waits until the pod runs, failing with its phase and reason
// if it does not.
func waitRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := poll(ctx, func(ctx context.Context) error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if p.Status.Phase == corev1.PodRunning {
			return nil
		}
		return fmt.Errorf("pod %s is %s: %v", name, p.Status.Phase, p.Status.ContainerStatuses)
	})
	if err != nil {
		t.Fatalf("wait for pod %s to run: %v", name, err)
	}
	return pod
}

// execIn runs script with sh in the pod's container, over WebSocket
// (v5) with a fallback to SPDY, and returns its output and exit code.
func execIn(ctx context.Context, t *testing.T, c *Cluster, ns, pod, script string) (string, string, int) {
	t.Helper()
	cs := c.Client(t)
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "main", Command: []string{"sh", "-c", script}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	cfg := c.RESTConfig()
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	exe, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	code := 0
	var ee utilexec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitStatus()
	} else if err != nil {
		t.Fatalf("exec in %s: %v", pod, err)
	}
	return stdout.String(), stderr.String(), code
}
