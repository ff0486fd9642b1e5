package kubernetes_test

import (
	"context"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// volumeSandbox is the spec of sandbox name (Agent Sandbox API) whose
// workspace is on a claim of a storage class of the test's own, with
// more settings, in a namespace of the test's; it is torn down when the
// test ends.
func volumeSandbox(t *testing.T, name string, more map[string]any) (*k8stest.Cluster, string, sdk.Spec) {
	t.Helper()
	c := cluster(t)
	if !c.AgentSandbox() {
		t.Fatal("the test cluster has no Agent Sandbox controller")
	}
	set := map[string]any{"api": "agent-sandbox",
		"workspace_volume": map[string]any{"size": "1Gi", "storage_class": c.StorageClass(t)}}
	maps.Copy(set, more)
	cfg, ns := settings(t, c, set)
	s := spec(name, cfg, sdk.NetworkOpen)
	t.Cleanup(func() {
		if err := newProvider(t, nil).Teardown(context.Background(), s.SandboxRef); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})
	return c, ns, s
}

// With workspace_volume, the work in a sandbox whose host went away
// outlives its expiry: the TTL passes with nothing renewing it, the
// controller removes the pod and keeps the claim, and the next process to
// use the sandbox gets a new pod with the workspace as it was. So it
// outlives a pod that ended.
func TestWorkspaceVolumeOutlivesExpiry(t *testing.T) {
	c, ns, s := volumeSandbox(t, "kept", map[string]any{"ttl": "1m"})

	host := newProvider(t, nil)
	first, err := host.EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatalf("EnsureRunning: %v", err)
	}
	if out, _, err := run(t, host, first.Ref, "echo kept > work.txt && cat work.txt"); err != nil || out != "kept\n" {
		t.Fatalf("write the work: %q, %v", out, err)
	}
	host.Close() // the host is gone: nothing moves the shutdown time ahead

	// The TTL passes.
	sandboxes := c.Dynamic(t).Resource(schema.GroupVersionResource{Group: "agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxes"}).Namespace(ns)
	past := time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	if _, err := sandboxes.Patch(t.Context(), "amelia-kept", types.MergePatchType, []byte(`{"spec":{"shutdownTime":"`+past+`"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := c.Client(t).CoreV1().Pods(ns)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for {
		p, err := pods.Get(ctx, first.Details["pod"], metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && string(p.UID) != first.Ref.ID {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the expired sandbox's pod is still there: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}

	next := newProvider(t, nil)
	again, err := next.EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatalf("EnsureRunning after the expiry: %v", err)
	}
	if again.Ref.ID == first.Ref.ID {
		t.Fatalf("EnsureRunning after the expiry gave the old pod %s", again.Ref.ID)
	}
	if out, _, err := run(t, next, again.Ref, "cat work.txt"); err != nil || out != "kept\n" {
		t.Fatalf("the work after the expiry: %q, %v; want it kept", out, err)
	}

	// A pod that ended (its PID 1 gone) is replaced alone: the Sandbox,
	// and the claim with the work, stay.
	run(t, next, again.Ref, "kill -TERM 1")
	waitPod(t, pods, again.Details["pod"], func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})
	third, err := newProvider(t, nil).EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatalf("EnsureRunning after the pod ended: %v", err)
	}
	if third.Ref.ID == again.Ref.ID {
		t.Fatalf("EnsureRunning after the pod ended gave the ended pod %s", third.Ref.ID)
	}
	if out, _, err := run(t, next, third.Ref, "cat work.txt"); err != nil || out != "kept\n" {
		t.Errorf("the work after the pod ended: %q, %v; want it kept", out, err)
	}
}

// With workspace_volume, the lifetime watchdog may stop the sandbox
// (sdk.StopInit): ending its PID 1, as the watchdog does, ends the pod,
// which HealthCheck and List then call stopped; EnsureRunning starts a
// new pod on the same claim, with the work as it was, and stopping stays
// its way. The host that stopped it is gone meanwhile.
func TestStopKeepsWorkOnVolume(t *testing.T) {
	c, ns, s := volumeSandbox(t, "stops", nil)
	host := newProvider(t, nil)
	first, err := host.EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatalf("EnsureRunning: %v", err)
	}
	if got := first.Details[sdk.DetailStop]; got != sdk.StopInit {
		t.Fatalf("Details[%q] = %q, want %q: the workspace is on a claim", sdk.DetailStop, got, sdk.StopInit)
	}
	if h, err := host.HealthCheck(t.Context(), first.Ref); err != nil || h.State != sdk.HealthReady || h.NeverStops != "" {
		t.Fatalf("health: %+v, %v; want ready, and stopping", h, err)
	}
	if out, _, err := run(t, host, first.Ref, "echo kept > work.txt && cat work.txt"); err != nil || out != "kept\n" {
		t.Fatalf("write the work: %q, %v", out, err)
	}
	run(t, host, first.Ref, "kill -TERM 1") // the watchdog's stop
	host.Close()
	waitPod(t, c.Client(t).CoreV1().Pods(ns), first.Details["pod"], func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})

	other := newProvider(t, nil)
	if h, err := other.HealthCheck(t.Context(), first.Ref); err != nil || h.State != sdk.HealthStopped {
		t.Errorf("health of the stopped sandbox: %+v, %v; want stopped", h, err)
	}
	if got, err := other.List(t.Context(), sdk.ListRequest{Config: s.Config}); err != nil || len(got) != 1 || got[0].State != sdk.HealthStopped {
		t.Errorf("List of the stopped sandbox: %+v, %v; want it stopped", got, err)
	}
	again, err := other.EnsureRunning(t.Context(), s)
	if err != nil {
		t.Fatalf("EnsureRunning after the stop: %v", err)
	}
	if again.Ref.ID == first.Ref.ID || again.Created || again.Details[sdk.DetailStop] != sdk.StopInit {
		t.Errorf("EnsureRunning after the stop: %+v; want a new pod of the same sandbox, stopping as before", again)
	}
	if out, _, err := run(t, other, again.Ref, "cat work.txt"); err != nil || out != "kept\n" {
		t.Errorf("the work after the stop: %q, %v; want it kept", out, err)
	}
}
