// Package kubernetes is the "kubernetes" sandbox provider: each profile's
// sandbox is a pod on a Kubernetes cluster, reached through client-go, and
// every command in it runs through the pods/exec subresource inside
// amelia-worker's exec envelope (exec.go).
//
// A sandbox is held one of two ways (Settings.API): as a Sandbox object
// of the Agent Sandbox API (agents.x-k8s.io, agentsandbox.go) where the
// cluster has it, whose controller makes the pod, bounds its life with a
// shutdown time and can hand out pods from a warm pool (a SandboxClaim);
// or as a plain Pod (pods.go). Either way the pod is the same sandbox
// (podspec.go): no service-account token, not root, no capabilities, no
// privilege escalation, seccomp RuntimeDefault, no host namespace or
// path, emptyDir volumes for the workdir and home, tini as PID 1. Its
// objects carry the spec's labels (names.go), so List finds them.
//
// Network none and allowlist put a NetworkPolicy denying all ingress and
// egress on the pod; Amelia's tunnel runs over pods/exec, which no policy
// touches. Whether the cluster's network plugin enforces the policy is
// not something the API says: the run's egress check finds out, and
// refuses the run where it is not enforced.
package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Name is the provider's name.
const Name = "kubernetes"

// Options configure the provider.
type Options struct {
	Version string
	// WorkerDirs hold amelia-worker-linux-ARCH, which every command in a
	// sandbox runs through (workerbin.Dirs).
	WorkerDirs []string
	Logger     *slog.Logger
	// Getenv reads KUBECONFIG; default os.Getenv.
	Getenv func(string) string
}

// Provider is the Kubernetes provider.
type Provider struct {
	opts    Options
	workers *workers

	mu       sync.Mutex
	clusters map[string]*cluster // by kubeconfig and context
}

// New returns the Kubernetes provider; it reaches a cluster on first use.
func New(opts Options) *Provider {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	routeKlog(opts.Logger)
	return &Provider{opts: opts, workers: &workers{dirs: opts.WorkerDirs}, clusters: map[string]*cluster{}}
}

func (p *Provider) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name:        Name,
		Version:     p.opts.Version,
		Description: "a pod per profile on a Kubernetes cluster (an Agent Sandbox where the cluster has the API): not root, no capabilities, a NetworkPolicy for allowlist and none",
		Capabilities: sdk.Capabilities{
			// A NetworkPolicy, which the run's egress check proves
			// enforced before anything runs.
			EgressModes:    []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkAllowlist, sdk.NetworkNone},
			Isolated:       true,
			ResourceLimits: true,
		},
	}, nil
}

// cluster is one kubeconfig context (or the in-cluster config) and the
// sandboxes this process uses there.
type cluster struct {
	cfg     *rest.Config
	ns      string // the context's namespace, the default
	client  kubernetes.Interface
	dyn     dynamic.Interface
	host    string
	logger  *slog.Logger
	workers *workers

	mu    sync.Mutex
	boxes map[string]*box // by namespace/sandbox
	agent map[string]bool // whether the Agent Sandbox API is served, by group
}

// resolved is a request's settings and cluster.
type resolved struct {
	config
	c  *cluster
	ns string
}

// resolve reads the settings and returns the cluster they name, connected
// on first use. The kubeconfig is found as kubectl finds it.
func (p *Provider) resolve(raw json.RawMessage) (resolved, error) {
	cfg, err := decodeSettings(raw)
	if err != nil {
		return resolved{}, err
	}
	kubeconfig := p.opts.Getenv(clientcmd.RecommendedConfigPathEnvVar)
	key := kubeconfig + "\x00" + cfg.Context
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clusters[key]
	if !ok {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.Precedence = nil
		if kubeconfig != "" {
			rules.Precedence = strings.Split(kubeconfig, string(os.PathListSeparator))
		}
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
		rc, err := loader.ClientConfig()
		if err != nil {
			where := "$KUBECONFIG, ~/.kube/config or the pod's service account"
			if kubeconfig != "" {
				where = kubeconfig
			}
			return resolved{}, sdk.Errorf(sdk.ErrInvalid, "kubernetes: no usable cluster configuration in %s (context %q): %v", where, cfg.Context, err)
		}
		ns, _, err := loader.Namespace()
		if err != nil || ns == "" {
			ns = metav1.NamespaceDefault
		}
		// A run talks to the API server in bursts (a watch, execs,
		// installs): client-go's default of 5 requests a second would
		// queue them.
		rc.QPS, rc.Burst = 50, 100
		rc.UserAgent = "amelia/" + p.opts.Version
		client, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return resolved{}, fmt.Errorf("kubernetes: %w", err)
		}
		dyn, err := dynamic.NewForConfig(rc)
		if err != nil {
			return resolved{}, fmt.Errorf("kubernetes: %w", err)
		}
		c = &cluster{cfg: rc, ns: ns, client: client, dyn: dyn, host: rc.Host, logger: p.opts.Logger, workers: p.workers,
			boxes: map[string]*box{}, agent: map[string]bool{}}
		p.clusters[key] = c
	}
	ns := cfg.Namespace
	if ns == "" {
		ns = c.ns
	}
	return resolved{config: cfg, c: c, ns: ns}, nil
}

// getOpts are the options of every GET.
var getOpts = metav1.GetOptions{}

// wrap says what failed against the cluster, with the sentinel a host can
// tell apart.
func (c *cluster) wrap(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return sdk.Errorf(sdk.ErrInvalid, "%s: %v (see docs/providers/kubernetes.md for the RBAC the kubernetes provider needs)", what, err)
	case apierrors.IsNotFound(err):
		return sdk.Errorf(sdk.ErrNotFound, "%s: %v", what, err)
	case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err):
		return sdk.Errorf(sdk.ErrConflict, "%s: %v", what, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return sdk.Errorf(sdk.ErrInvalid, "%s: %v", what, err)
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err):
		return sdk.Errorf(sdk.ErrUnavailable, "%s: %v", what, err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// No answer from the API server at all.
		return sdk.Errorf(sdk.ErrUnavailable, "%s: cannot reach the Kubernetes API server at %s: %v", what, c.host, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// EnsureRunning makes the sandbox's pod run, or reuses it, and puts the
// worker in it. Runs started together make several processes ensure one
// sandbox: the API server creates an object of a name once, and the
// others find it and wait for it with the one that created it.
func (p *Provider) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	r, err := p.resolve(spec.Config)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	agent, err := r.useAgentAPI(ctx)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, r.startTimeout)
	defer cancel()
	if isolated(spec.Network.Mode) {
		if err := r.ensureNetworkPolicy(sctx, spec); err != nil {
			return sdk.Sandbox{}, err
		}
	}
	var pod *corev1.Pod
	var created bool
	if agent {
		pod, created, err = r.ensureSandbox(sctx, spec, p.opts.Logger)
	} else {
		pod, created, err = r.ensurePod(sctx, spec, p.opts.Logger)
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = sdk.Errorf(sdk.ErrTimeout, "sandbox %s did not start within %v (kubernetes.start_timeout): %v", spec.Name, r.startTimeout, err)
	}
	if err != nil {
		return sdk.Sandbox{}, err
	}
	b := r.c.adopt(spec.Name, pod)
	if _, err := b.ready(ctx); err != nil {
		return sdk.Sandbox{}, err
	}
	if agent && r.ttl > 0 {
		b.renew(r, spec.Name, p.opts.Logger)
	}
	if created {
		p.opts.Logger.Info("created sandbox pod", "sandbox", spec.Name, "namespace", pod.Namespace, "pod", pod.Name, "node", pod.Spec.NodeName)
	}
	ref := spec.SandboxRef
	ref.ID = string(pod.UID)
	held := APIPods
	if agent {
		held = APIAgentSandbox
	}
	details := map[string]string{"namespace": pod.Namespace, "pod": pod.Name, "node": pod.Spec.NodeName, "api": held}
	if agent && workspaceOnClaim(pod) {
		// The watchdog ends tini, PID 1: the pod ends (restartPolicy
		// Never) and the claim keeps the work; HealthCheck says stopped,
		// and EnsureRunning replaces the pod alone (ensureSandbox), on
		// the same claim. Where the workspace is an emptyDir, a pod that
		// ended has lost it: such a sandbox is not stopped (noStop).
		details[sdk.DetailStop] = sdk.StopInit
	}
	if isolated(spec.Network.Mode) {
		details[sdk.DetailEgress] = fmt.Sprintf("NetworkPolicy %s/%s denies the pod all traffic; only a network plugin that enforces NetworkPolicies, such as Calico, Cilium, Antrea or kube-router, makes that so: for network %s, use a cluster whose plugin does, or network open",
			pod.Namespace, objectName(spec.Name), spec.Network.Mode)
		details[sdk.DetailEgressSettle] = policySettle.String()
	}
	return sdk.Sandbox{
		Ref: ref, Created: created, Workdir: Workdir,
		Worker:  sdk.WorkerPlace{Dir: workerDir},
		Details: details,
	}, nil
}

// policySettle is how long a network plugin is given to enforce a
// sandbox's NetworkPolicy after its pod runs: plugins program policies
// when they see the pod, on their own schedule (kube-router at its next
// sync), so the host's egress check keeps trying that long before it
// refuses the run.
const policySettle = 30 * time.Second

// ensureNetworkPolicy makes the policy that takes the sandbox's pod off
// the network, before the pod exists; one there already is kept.
func (r resolved) ensureNetworkPolicy(ctx context.Context, spec sdk.Spec) error {
	l, a := r.specMetadata(spec)
	np := networkPolicy(r.ns, spec.Name, l, a)
	_, err := r.c.client.NetworkingV1().NetworkPolicies(r.ns).Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var have *networkingv1.NetworkPolicy
		have, err = r.c.client.NetworkingV1().NetworkPolicies(r.ns).Get(ctx, np.Name, getOpts)
		if err == nil && have.Annotations[labelSandbox] != spec.Name {
			return sdk.Errorf(sdk.ErrConflict, "a NetworkPolicy %s/%s exists that is not sandbox %s's: remove or rename it", r.ns, np.Name, spec.Name)
		}
	}
	return r.c.wrap(err, fmt.Sprintf("create NetworkPolicy %s/%s (network %s)", r.ns, np.Name, spec.Network.Mode))
}

// checkOwned refuses an object of the sandbox's name that is not this
// spec's sandbox: one Amelia did not make (left alone), one of the same
// profile name in another config file, or one made for another network
// policy.
func checkOwned(kind string, meta metav1.Object, spec sdk.Spec) error {
	ns, name := meta.GetNamespace(), meta.GetName()
	if meta.GetLabels()[labelManagedBy] != managedBy || meta.GetAnnotations()[labelSandbox] != spec.Name {
		return sdk.Errorf(sdk.ErrConflict, "a %s %s/%s exists that is not sandbox %s's; amelia leaves it alone: rename or remove it, or rename the profile", kind, ns, name, spec.Name)
	}
	have := specLabels(meta.GetAnnotations())
	if want, got := spec.Labels["amelia.config"], have["amelia.config"]; want != "" && got != "" && want != got {
		return sdk.Errorf(sdk.ErrConflict, "%s %s/%s is the sandbox of profile %s in %s, not of %s: rename one of the profiles, or remove it with `amelia --config %s sandbox down -p %s`",
			kind, ns, name, have[labelProfile], got, want, got, have[labelProfile])
	}
	if got := meta.GetLabels()[labelNetwork]; got != labelValue(string(spec.Network.Mode)) {
		return sdk.Errorf(sdk.ErrConflict, "sandbox %s was created with network %q; the profile asks for %q: remove it with `amelia sandbox down`, then start again", spec.Name, got, spec.Network.Mode)
	}
	return nil
}

// specMetadata is the labels and annotations of a sandbox's objects.
func (r resolved) specMetadata(spec sdk.Spec) (map[string]string, map[string]string) {
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	if labels[labelProfile] == "" {
		labels[labelProfile] = spec.Name
	}
	if labels[labelCreated] == "" {
		labels[labelCreated] = time.Now().UTC().Format(time.RFC3339)
	}
	l, a := metadata(r.config, spec.Name, labels)
	l[labelNetwork] = labelValue(string(spec.Network.Mode))
	return l, a
}

// adopt returns the box of a running pod, keeping the one already known
// for that pod.
func (c *cluster) adopt(name string, pod *corev1.Pod) *box {
	key := pod.Namespace + "/" + name
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.boxes[key]; ok && b.uid == pod.UID {
		return b
	} else if ok {
		go b.shut()
	}
	container := containerName
	if !slices.ContainsFunc(pod.Spec.Containers, func(ct corev1.Container) bool { return ct.Name == containerName }) {
		// A warm pool's template names its own.
		container = pod.Spec.Containers[0].Name
	}
	b := &box{c: c, name: name, ns: pod.Namespace, pod: pod.Name, container: container, uid: pod.UID}
	c.boxes[key] = b
	return b
}

// forget drops a box whose pod is gone.
func (c *cluster) forget(b *box) {
	c.mu.Lock()
	if c.boxes[b.ns+"/"+b.name] == b {
		delete(c.boxes, b.ns+"/"+b.name)
	}
	c.mu.Unlock()
	go b.shut()
}

// shut ends the box's command session and its TTL renewal.
func (b *box) shut() {
	b.closeSession()
	b.renewMu.Lock()
	if b.renewStop != nil {
		b.renewStop()
		b.renewStop = nil
	}
	b.renewMu.Unlock()
}

// box returns the box of the running sandbox a ref names, finding its
// pod by its labels when this process has not used it yet. A ref whose ID
// is not the pod's (the sandbox was made again since) is not found.
func (p *Provider) box(ctx context.Context, ref sdk.SandboxRef) (*box, error) {
	r, err := p.resolve(ref.Config)
	if err != nil {
		return nil, err
	}
	r.c.mu.Lock()
	b := r.c.boxes[r.ns+"/"+ref.Name]
	r.c.mu.Unlock()
	if b != nil && (ref.ID == "" || string(b.uid) == ref.ID) {
		return b, nil
	}
	pod, err := r.findPod(ctx, ref)
	if err != nil {
		return nil, err
	}
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return nil, sdk.Errorf(sdk.ErrUnavailable, "sandbox %s: its pod %s/%s is %s, not running: `amelia sandbox up` starts it again", ref.Name, pod.Namespace, pod.Name, describe(pod))
	}
	return r.c.adopt(ref.Name, pod), nil
}

// findPod finds the sandbox's pod by its labels (a pod of the Agent
// Sandbox API may have a name of its own: one adopted from a warm pool).
// Of several (one being replaced), a running one that is not being
// deleted comes first.
func (r resolved) findPod(ctx context.Context, ref sdk.SandboxRef) (*corev1.Pod, error) {
	list, err := r.c.client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: sandboxSelector(ref.Name).String()})
	if err != nil {
		return nil, r.c.wrap(err, fmt.Sprintf("find the pod of sandbox %s in namespace %s", ref.Name, r.ns))
	}
	pods := slices.DeleteFunc(list.Items, func(p corev1.Pod) bool {
		return p.Annotations[labelSandbox] != ref.Name || ref.ID != "" && string(p.UID) != ref.ID
	})
	rank := func(p corev1.Pod) int {
		switch {
		case p.DeletionTimestamp != nil:
			return 2
		case p.Status.Phase == corev1.PodRunning:
			return 0
		}
		return 1
	}
	slices.SortStableFunc(pods, func(a, b corev1.Pod) int { return rank(a) - rank(b) })
	if len(pods) == 0 {
		if ref.ID != "" {
			return nil, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist in namespace %s any more (its pod %s is gone): start it with `amelia sandbox up`", ref.Name, r.ns, ref.ID)
		}
		return nil, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist in namespace %s (no pod labelled %s): start it with `amelia sandbox up`", ref.Name, r.ns, sandboxSelector(ref.Name))
	}
	return &pods[0], nil
}

// Teardown removes the sandbox's objects (its claim, Sandbox, pod and
// NetworkPolicy) and waits until its pods are gone. Objects of the name
// that Amelia did not make are refused, never removed.
func (p *Provider) Teardown(ctx context.Context, ref sdk.SandboxRef) error {
	r, err := p.resolve(ref.Config)
	if err != nil {
		return err
	}
	r.c.mu.Lock()
	if b := r.c.boxes[r.ns+"/"+ref.Name]; b != nil {
		delete(r.c.boxes, r.ns+"/"+ref.Name)
		b.shut()
	}
	r.c.mu.Unlock()
	name := objectName(ref.Name)
	pods := r.c.client.CoreV1().Pods(r.ns)
	pod, err := pods.Get(ctx, name, getOpts)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return r.c.wrap(err, "find pod "+r.ns+"/"+name)
	case pod.Labels[labelManagedBy] != managedBy || pod.Annotations[labelSandbox] != ref.Name:
		return sdk.Errorf(sdk.ErrConflict, "refusing to remove pod %s/%s: it is not sandbox %s's", r.ns, name, ref.Name)
	}
	agent, err := r.agentAPIServed(ctx)
	if err != nil {
		return err
	}
	if agent {
		// The claim and the Sandbox first, and gone, so that no
		// controller makes their pod again once it is deleted.
		for _, res := range []agentResource{claims, sandboxes} {
			if served, err := r.c.served(ctx, res); err != nil || !served {
				continue
			}
			if err := r.deleteAgentObject(ctx, res, ref.Name); err != nil {
				return err
			}
			if err := r.waitAgentObjectGone(ctx, res, name); err != nil {
				return err
			}
		}
	}
	// Every pod of the sandbox: the one of its name, and one a warm pool
	// gave it.
	list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: sandboxSelector(ref.Name).String()})
	if err != nil {
		return r.c.wrap(err, "find the pods of sandbox "+ref.Name)
	}
	for _, pod := range list.Items {
		if pod.Annotations[labelSandbox] != ref.Name {
			continue
		}
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return r.c.wrap(err, "delete pod "+r.ns+"/"+pod.Name)
		}
	}
	np, err := r.c.client.NetworkingV1().NetworkPolicies(r.ns).Get(ctx, name, getOpts)
	if err == nil && np.Annotations[labelSandbox] == ref.Name {
		err = r.c.client.NetworkingV1().NetworkPolicies(r.ns).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &np.UID}})
	}
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return r.c.wrap(err, "delete NetworkPolicy "+r.ns+"/"+name)
	}
	if err := r.waitNoPods(ctx, ref.Name); err != nil {
		return err
	}
	p.opts.Logger.Info("removed sandbox", "sandbox", ref.Name, "namespace", r.ns)
	return nil
}

// workspaceOnClaim says whether the pod's workspace is a
// PersistentVolumeClaim (kubernetes.workspace_volume), which outlives the
// pod, rather than an emptyDir, which ends with it.
func workspaceOnClaim(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.Name == workspaceVolume {
			return v.PersistentVolumeClaim != nil
		}
	}
	return false
}

// noStop says why a sandbox whose workspace is an emptyDir never stops
// by itself (sandbox.idle_timeout, sandbox.max_lifetime): the kubelet
// removes an emptyDir with its pod's end, and a new pod starts with an
// empty one, so stopping it would lose its work.
const noStop = "the workspace is not on a volume (kubernetes.workspace_volume)"

// healthTimeout bounds HealthCheck's exec, inside sdk.HealthCheckTimeout.
const healthTimeout = 5 * time.Second

// HealthCheck: ready when the pod runs and `true` runs in it in time.
func (p *Provider) HealthCheck(ctx context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	r, err := p.resolve(ref.Config)
	if err != nil {
		return sdk.Health{}, err
	}
	pod, err := r.findPod(ctx, ref)
	if err != nil {
		return sdk.Health{}, err
	}
	if state := podHealth(pod); state != sdk.HealthReady {
		return sdk.Health{State: state, Message: fmt.Sprintf("pod %s/%s is %s", pod.Namespace, pod.Name, describe(pod))}, nil
	}
	b := r.c.adopt(ref.Name, pod)
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	// A bare shell, not the envelope: the check must not wait for the
	// worker's upload.
	out, code, err := b.script(hctx, nil, "true")
	if err != nil || code != 0 {
		return sdk.Health{State: sdk.HealthUnhealthy, Message: fmt.Sprintf("pod %s/%s runs, but `true` did not answer: %v (exit %d) %s", pod.Namespace, pod.Name, err, code, strings.TrimSpace(string(out)))}, nil
	}
	h := sdk.Health{State: sdk.HealthReady, Message: fmt.Sprintf("pod %s/%s on %s", pod.Namespace, pod.Name, pod.Spec.NodeName)}
	if !workspaceOnClaim(pod) {
		h.NeverStops = noStop
	}
	return h, nil
}

// podHealth maps a pod's state to a sandbox's.
func podHealth(pod *corev1.Pod) sdk.HealthState {
	switch {
	case pod.DeletionTimestamp != nil:
		return sdk.HealthUnhealthy
	case pod.Status.Phase == corev1.PodRunning && containerRunning(pod):
		return sdk.HealthReady
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return sdk.HealthStopped
	}
	return sdk.HealthUnhealthy
}

// List finds the sandboxes in the settings' namespace that carry every
// label asked for: their pods, and on the Agent Sandbox API their Sandbox
// and SandboxClaim objects too (one whose pod is gone, expired or
// suspended, is still a sandbox to remove).
func (p *Provider) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	r, err := p.resolve(req.Config)
	if err != nil {
		return nil, err
	}
	sel := selector(req.Labels).String()
	list, err := r.c.client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, r.c.wrap(err, "list the sandbox pods in namespace "+r.ns)
	}
	found := map[string]sdk.Listed{}
	add := func(meta metav1.Object, state sdk.HealthState, id types.UID) {
		name := meta.GetAnnotations()[labelSandbox]
		labels := specLabels(meta.GetAnnotations())
		if !sdk.ValidName(name) || labels == nil || !req.Matches(labels) {
			return
		}
		if have, ok := found[name]; ok && (have.State == sdk.HealthReady || state != sdk.HealthReady) {
			return
		}
		found[name] = sdk.Listed{
			Ref:     sdk.SandboxRef{Name: name, ID: string(id), Config: req.Config},
			Labels:  labels,
			State:   state,
			Created: meta.GetCreationTimestamp().Time,
		}
	}
	for i := range list.Items {
		pod := &list.Items[i]
		add(pod, podHealth(pod), pod.UID)
	}
	agent, err := r.agentAPIServed(ctx)
	if err != nil {
		return nil, err
	}
	if agent {
		for _, res := range []agentResource{sandboxes, claims} {
			objs, err := r.c.dyn.Resource(res.gvr).Namespace(r.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if apierrors.IsNotFound(err) {
				continue // the claims' CRD may not be installed
			}
			if err != nil {
				return nil, r.c.wrap(err, "list the "+res.kind+" objects in namespace "+r.ns)
			}
			for i := range objs.Items {
				// Without a pod, it holds nothing running; the ref has
				// no ID, as the pod it had is gone.
				add(&objs.Items[i], sdk.HealthStopped, "")
			}
		}
	}
	var out []sdk.Listed
	for _, name := range slices.Sorted(maps.Keys(found)) {
		out = append(out, found[name])
	}
	return out, nil
}

// Close ends every command session; the SDK calls it when the plugin
// stops.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clusters {
		c.mu.Lock()
		for k, b := range c.boxes {
			b.shut()
			delete(c.boxes, k)
		}
		c.mu.Unlock()
	}
	return nil
}
