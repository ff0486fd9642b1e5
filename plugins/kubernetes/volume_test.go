package kubernetes_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// hostPathVolume makes a PersistentVolume of a storage class of its own
// (named after the test) on a directory of the host (both nodes share
// it) that uid 1000 can write, removed when the test ends, and returns the
// class: the test cluster has no provisioner, so the PV is there before
// the claim that binds it.
func hostPathVolume(t *testing.T, c *k8stest.Cluster) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	class := strings.ToLower(t.Name())
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	pvs := c.Client(t).CoreV1().PersistentVolumes()
	if _, err := pvs.Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pvs.Delete(context.Background(), class, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete PersistentVolume %s: %v", class, err)
		}
	})
	return class
}

// With workspace_volume, the work in a sandbox whose host went away
// outlives its expiry: the TTL passes with nothing renewing it, the
// controller removes the pod and keeps the claim, and the next process to
// use the sandbox gets a new pod with the workspace as it was. So it
// outlives a pod that ended.
func TestWorkspaceVolumeOutlivesExpiry(t *testing.T) {
	c := cluster(t)
	if !c.AgentSandbox() {
		t.Fatal("the test cluster has no Agent Sandbox controller")
	}
	class := hostPathVolume(t, c)
	cfg, ns := settings(t, c, map[string]any{"api": "agent-sandbox", "ttl": "1m",
		"workspace_volume": map[string]any{"size": "1Gi", "storage_class": class}})
	s := spec("kept", cfg, sdk.NetworkOpen)
	t.Cleanup(func() {
		if err := newProvider(t, nil).Teardown(context.Background(), s.SandboxRef); err != nil {
			t.Errorf("Teardown: %v", err)
		}
	})

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
