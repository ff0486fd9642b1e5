package kubernetes_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	agentsv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/amelia-sandbox/amelia/plugins/kubernetes"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// templatePod is a warm pool's pod as a cluster's admin would write it
// for Amelia: the image with tini, uid 1000 with HOME and the workdir
// writable, nothing of the node's.
func templatePod(image string) corev1.PodSpec {
	return corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(false),
		RestartPolicy:                corev1.RestartPolicyNever,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](kubernetes.UID), RunAsGroup: ptr.To[int64](kubernetes.GID), FSGroup: ptr.To[int64](kubernetes.GID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name: "agent", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"tini", "--", "sleep", "infinity"},
			Env:     []corev1.EnvVar{{Name: "HOME", Value: kubernetes.Home}},
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: kubernetes.Workdir}, {Name: "home", MountPath: kubernetes.Home}},
		}},
		Volumes: []corev1.Volume{
			{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
}

// A sandbox with warm_pool is claimed from the pool: its pod is one the
// pool made (its name is not the sandbox's), commands run in it, List
// finds it, and Teardown removes the claim and the pod.
func TestWarmPoolClaim(t *testing.T) {
	c := cluster(t)
	if !c.AgentSandbox() {
		t.Fatal("the test cluster has no Agent Sandbox controller")
	}
	cfg, ns := settings(t, c, map[string]any{"warm_pool": "pool", "image": nil, "image_pull_policy": nil, "start_timeout": "90s"})
	dyn := c.Dynamic(t)
	tmpl := &extv1.SandboxTemplate{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxTemplate"},
		ObjectMeta: metav1.ObjectMeta{Name: "agents", Namespace: ns},
		Spec: extv1.SandboxTemplateSpec{
			SandboxBlueprint:        agentsv1.SandboxBlueprint{PodTemplate: agentsv1.PodTemplate{Spec: templatePod(c.Image())}},
			NetworkPolicyManagement: extv1.NetworkPolicyManagementUnmanaged,
		},
	}
	pool := &extv1.SandboxWarmPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: "SandboxWarmPool"},
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec:       extv1.SandboxWarmPoolSpec{Replicas: ptr.To[int32](1), TemplateRef: extv1.SandboxTemplateRef{Name: "agents"}},
	}
	for res, obj := range map[string]any{"sandboxtemplates": tmpl, "sandboxwarmpools": pool} {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(extv1.GroupVersion.WithResource(res)).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", res, err)
		}
	}
	// Wait until the pool holds a ready sandbox.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for {
		u, err := dyn.Resource(extv1.GroupVersion.WithResource("sandboxwarmpools")).Namespace(ns).Get(ctx, "pool", metav1.GetOptions{})
		var p extv1.SandboxWarmPool
		if err == nil {
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p)
		}
		if err == nil && p.Status.ReadyReplicas >= 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the warm pool has no ready sandbox: %v %+v", err, p.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}

	var l logs
	p := newProvider(t, &l)
	s := spec("claimed", cfg, sdk.NetworkOpen)
	start := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("provider log:\n%s", l.String())
			for _, res := range []schema.GroupVersionResource{extv1.GroupVersion.WithResource("sandboxclaims"), agentsv1.GroupVersion.WithResource("sandboxes")} {
				list, err := dyn.Resource(res).Namespace(ns).List(context.Background(), metav1.ListOptions{})
				if err != nil {
					t.Logf("list %s: %v", res.Resource, err)
					continue
				}
				for _, o := range list.Items {
					y, _ := json.MarshalIndent(o.Object, "", "  ")
					t.Logf("%s %s:\n%s", res.Resource, o.GetName(), y)
				}
			}
			pods, _ := c.Client(t).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
			for _, p := range pods.Items {
				t.Logf("pod %s labels %v annotations %v phase %s", p.Name, p.Labels, p.Annotations, p.Status.Phase)
			}
		}
	})
	sb := up(t, p, s)
	t.Logf("claimed sandbox ready in %v (pod %s)", time.Since(start), sb.Details["pod"])
	if !sb.Created || sb.Details["pod"] == "amelia-claimed" || sb.Details["api"] != "agent-sandbox" {
		t.Errorf("the claimed sandbox: %+v; want a created one on a pod of the pool's", sb)
	}
	if out, _, err := run(t, p, sb.Ref, "pwd; id -u; echo $AMELIA_SANDBOX"); err != nil || out != "/workspace\n1000\nclaimed\n" {
		t.Errorf("exec in the claimed pod: %q, %v", out, err)
	}
	if got, err := newProvider(t, nil).List(t.Context(), sdk.ListRequest{Config: cfg, Labels: map[string]string{"amelia.profile": "claimed"}}); err != nil || len(got) != 1 || got[0].Ref.Name != "claimed" {
		t.Errorf("List: %+v, %v", got, err)
	}
	again, err := newProvider(t, nil).EnsureRunning(t.Context(), s)
	if err != nil || again.Created || again.Ref.ID != sb.Ref.ID {
		t.Errorf("EnsureRunning again: %+v, %v; want the claimed sandbox", again, err)
	}
	if err := p.Teardown(t.Context(), sb.Ref); err != nil {
		t.Fatal(err)
	}
	// The pool may make a pod of the same name again: the one that was
	// claimed is gone.
	if pod, err := c.Client(t).CoreV1().Pods(ns).Get(t.Context(), sb.Details["pod"], metav1.GetOptions{}); err == nil && string(pod.UID) == sb.Ref.ID {
		t.Errorf("the claimed pod is still there after Teardown")
	}
}
