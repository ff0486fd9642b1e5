package kubecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
	"time"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// startAgentSandbox installs the Agent Sandbox CRDs and starts its
// controller with the extensions (SandboxTemplate, SandboxWarmPool,
// SandboxClaim).
//
// The CRDs ask for a conversion webhook between v1alpha1 and v1beta1, which
// the controller serves behind a Service; this cluster has no kube-proxy,
// so the apiserver could not reach it. The CRDs go in with conversion None
// and the controller without its webhook: v1beta1, the storage version, is
// the one used, and a v1alpha1 read gets the stored object relabelled.
func (c *Cluster) startAgentSandbox(ctx context.Context, b Binaries, cs kubernetes.Interface) error {
	cfg, err := c.RESTConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(b.CRDs, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no Agent Sandbox CRDs in %s: run make kube-binaries", b.CRDs)
	}
	var names []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(raw, &obj); err != nil {
			return fmt.Errorf("read CRD %s: %w", f, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		if err := unstructured.SetNestedField(u.Object, map[string]any{"strategy": "None"}, "spec", "conversion"); err != nil {
			return fmt.Errorf("CRD %s: %w", f, err)
		}
		if _, err := dyn.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install CRD %s: %w", u.GetName(), err)
		}
		names = append(names, u.GetName())
	}
	for _, n := range names {
		err := c.poll(ctx, "CRD "+n+" Established", time.Minute, func(ctx context.Context) error {
			u, err := dyn.Resource(crdResource).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
			return fmt.Errorf("CRD %s not Established yet", n)
		})
		if err != nil {
			return err
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agent-sandbox-system"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns.Name, err)
	}
	return c.start("agent-sandbox-controller", b.Controller, "--kubeconfig="+c.Kubeconfig,
		"--leader-elect=false", "--enable-webhook=false", "--extensions",
		"--metrics-bind-address=127.0.0.1:18080", fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", controllerPort))
}
