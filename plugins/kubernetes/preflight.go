package kubernetes

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// access is one permission the provider needs in the sandboxes'
// namespace.
type access struct {
	group, resource, subresource string
	verbs                        []string
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	return r
}

// needs is what the provider does in the namespace with these settings
// and network mode.
func (r resolved) needs(agent bool, mode sdk.NetworkMode) []access {
	all := []string{"get", "list", "watch", "create", "delete"}
	need := []access{
		{resource: "pods", verbs: all},
		{resource: "pods", subresource: "exec", verbs: []string{"create", "get"}},
	}
	if isolated(mode) {
		need = append(need, access{group: "networking.k8s.io", resource: "networkpolicies", verbs: []string{"get", "create", "delete"}})
	}
	if agent {
		need = append(need, access{group: sandboxes.gvr.Group, resource: sandboxes.gvr.Resource, verbs: append(all, "patch")})
		if r.WarmPool != "" {
			need = append(need,
				access{group: claims.gvr.Group, resource: claims.gvr.Resource, verbs: append(all, "patch")},
				access{resource: "pods", verbs: []string{"patch"}})
		}
	}
	return need
}

// Preflight checks, changing nothing, that the cluster answers and that
// the provider's credentials may do what a sandbox needs in its
// namespace (SelfSubjectAccessReview, as `kubectl auth can-i` asks),
// naming every permission missing.
func (p *Provider) Preflight(ctx context.Context, spec sdk.Spec) error {
	r, err := p.resolve(spec.Config)
	if err != nil {
		return err
	}
	if _, err := r.c.client.Discovery().ServerVersion(); err != nil {
		return r.c.wrap(err, "ask the Kubernetes API server its version")
	}
	agent, err := r.useAgentAPI(ctx)
	if err != nil {
		return err
	}
	var missing []string
	for _, a := range r.needs(agent, spec.Network.Mode) {
		var denied []string
		for _, verb := range a.verbs {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: r.ns, Verb: verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
				},
			}}
			res, err := r.c.client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return r.c.wrap(err, "ask the API server what the provider may do (SelfSubjectAccessReview)")
			}
			if !res.Status.Allowed {
				denied = append(denied, verb)
			}
		}
		if len(denied) > 0 {
			missing = append(missing, fmt.Sprintf("%s: %s", a, strings.Join(denied, ", ")))
		}
	}
	if len(missing) > 0 {
		return sdk.Errorf(sdk.ErrInvalid, "the kubernetes provider's credentials (kubeconfig context %q) lack permissions in namespace %s — %s: grant them with a Role and RoleBinding (see docs/providers/kubernetes.md)",
			r.Context, r.ns, strings.Join(missing, "; "))
	}
	return nil
}
