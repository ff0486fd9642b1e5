package kubernetes_test

import (
	"os"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Preflight (doctor) names each permission a sandbox needs that the
// kubeconfig's credentials lack, and passes for credentials that have
// them all.
func TestPreflightNamesMissingPermissions(t *testing.T) {
	c := cluster(t)
	cfg, ns := settings(t, c, map[string]any{"api": "pods"})
	if err := newProvider(t, nil).Preflight(t.Context(), spec("pre", cfg, sdk.NetworkNone)); err != nil {
		t.Fatalf("Preflight as the admin: %v", err)
	}

	// A service account that may handle pods, but not exec in them nor
	// make NetworkPolicies.
	client := c.Client(t)
	ctx := t.Context()
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "limited"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pods-only"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "delete"}}}}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "limited"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "pods-only"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "limited", Namespace: ns}},
	}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "limited", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RESTConfig()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, CertificateAuthority: rc.CAFile}
	kc.AuthInfos["limited"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	kc.Contexts["limited"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "limited", Namespace: ns}
	kc.CurrentContext = "limited"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	err = newProvider(t, nil).Preflight(t.Context(), spec("pre", cfg, sdk.NetworkNone))
	expect(t, "Preflight with pods only", err, sdk.ErrInvalid, "pods/exec: create, get; networkpolicies.networking.k8s.io: get, create, delete")
}
