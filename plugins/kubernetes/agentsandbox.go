package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	// The Agent Sandbox API's types, and only them: its generated
	// clientsets import its v1alpha1 packages, which import
	// controller-runtime (and with it half of the ecosystem), while the
	// v1beta1 type packages import nothing but apimachinery and
	// k8s.io/api. So objects travel through client-go's dynamic client
	// and are converted to and from these types: typed code, no
	// controller-runtime in the plugin.
	agentsv1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// agentResource is a resource of the Agent Sandbox API.
type agentResource struct {
	gvr  schema.GroupVersionResource
	kind string
}

var (
	sandboxes = agentResource{agentsv1.GroupVersion.WithResource("sandboxes"), agentsv1.SandboxKind}
	claims    = agentResource{extv1.GroupVersion.WithResource("sandboxclaims"), "SandboxClaim"}
)

// agentAPIServed reports whether the cluster serves the Agent Sandbox
// API's Sandbox (its CRD is installed), asking once per process.
func (r resolved) agentAPIServed(ctx context.Context) (bool, error) {
	return r.c.served(ctx, sandboxes)
}

// served reports whether the cluster serves a resource, asking once per
// group version.
func (c *cluster) served(ctx context.Context, res agentResource) (bool, error) {
	gv := res.gvr.GroupVersion().String()
	c.mu.Lock()
	ok, known := c.agent[gv+"/"+res.gvr.Resource]
	c.mu.Unlock()
	if known {
		return ok, nil
	}
	list, err := c.client.Discovery().ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		ok = false
	case err != nil:
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, c.wrap(err, "ask the cluster whether it serves "+gv)
	default:
		for _, r := range list.APIResources {
			if r.Name == res.gvr.Resource {
				ok = true
			}
		}
	}
	c.mu.Lock()
	c.agent[gv+"/"+res.gvr.Resource] = ok
	c.mu.Unlock()
	return ok, nil
}

// useAgentAPI says how the settings hold a sandbox on this cluster: true
// for the Agent Sandbox API.
func (r resolved) useAgentAPI(ctx context.Context) (bool, error) {
	if r.API == APIPods {
		return false, nil
	}
	ok, err := r.agentAPIServed(ctx)
	if err != nil {
		return false, err
	}
	if !ok && (r.API == APIAgentSandbox || r.WarmPool != "" || r.WorkspaceVolume != nil) {
		return false, sdk.Errorf(sdk.ErrUnavailable, "the cluster at %s does not serve the Agent Sandbox API (%s): install its CRDs and controller (sigs.k8s.io/agent-sandbox), or set kubernetes.api: pods", r.c.host, sandboxes.gvr.GroupResource())
	}
	if ok && r.WarmPool != "" {
		if served, err := r.c.served(ctx, claims); err != nil {
			return false, err
		} else if !served {
			return false, sdk.Errorf(sdk.ErrUnavailable, "the cluster at %s serves Sandboxes but not SandboxClaims (%s), which kubernetes.warm_pool needs: install the Agent Sandbox extensions' CRDs", r.c.host, claims.gvr.GroupResource())
		}
	}
	return ok, nil
}

// ensureSandbox makes the sandbox's Sandbox object (or its SandboxClaim,
// with a warm pool), or reuses it, and waits until its pod runs. A
// Sandbox whose pod ended, or that expired, is made again, once; one whose
// workspace is on a claim of its own is kept, and gets a new pod on it.
func (r resolved) ensureSandbox(ctx context.Context, spec sdk.Spec, logger *slog.Logger) (*corev1.Pod, bool, error) {
	res := sandboxes
	if r.WarmPool != "" {
		res = claims
	}
	ri := r.c.dyn.Resource(res.gvr).Namespace(r.ns)
	name := objectName(spec.Name)
	replaced := false
	for {
		created := false
		obj, err := ri.Get(ctx, name, getOpts)
		if apierrors.IsNotFound(err) {
			var want *unstructured.Unstructured
			if want, err = r.agentObject(res, spec); err != nil {
				return nil, false, err
			}
			obj, err = ri.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			created = err == nil
		}
		if err != nil {
			return nil, false, r.c.wrap(err, fmt.Sprintf("%s %s/%s of sandbox %s", res.kind, r.ns, name, spec.Name))
		}
		if err := checkOwned(res.kind, obj, spec); err != nil {
			return nil, false, err
		}
		pod, err := r.sandboxPod(ctx, res, obj, spec, created, replaced, logger)
		var ended *endedError
		switch {
		case errors.As(err, &ended) && keepsWorkspace(obj):
			// Deleting the Sandbox would take its workspace claim, and
			// the work on it, along: only its pod goes, and the
			// controller starts another on the same claim.
			if created || replaced {
				return nil, false, sdk.Errorf(sdk.ErrUnavailable, "the pod %s/%s of sandbox %s ended as it started: %s", r.ns, ended.pod.Name, spec.Name, ended.state)
			}
			logger.Info("the sandbox's pod ended: starting another on its workspace volume", "sandbox", spec.Name, res.kind, name, "pod", ended.pod.Name, "state", ended.state)
			if err := r.deletePod(ctx, ended.pod); err != nil {
				return nil, false, err
			}
			replaced = true
			continue
		case errors.As(err, &ended):
			logger.Info("the sandbox ended: making it again", "sandbox", spec.Name, res.kind, name, "state", ended.state)
			if err := r.deleteAgentObject(ctx, res, spec.Name); err != nil {
				return nil, false, err
			}
			if err := r.waitAgentObjectGone(ctx, res, name); err != nil {
				return nil, false, err
			}
			replaced = true
			continue
		case errors.Is(err, errGone):
			continue
		case err != nil:
			return nil, false, err
		}
		return pod, created, nil
	}
}

// keepsWorkspace says whether obj is a Sandbox whose workspace is on a
// claim of its own (kubernetes.workspace_volume), which deleting it would
// delete.
func keepsWorkspace(obj *unstructured.Unstructured) bool {
	claims, _, _ := unstructured.NestedSlice(obj.Object, "spec", "volumeClaimTemplates")
	return obj.GetKind() == agentsv1.SandboxKind && len(claims) > 0
}

// agentObject is the object that holds spec's sandbox: a Sandbox with
// the sandbox pod as its template, or a SandboxClaim on the warm pool.
// Neither carries a secret: the run's token travels over exec, never in
// a claim's env (which would also force a cold start).
func (r resolved) agentObject(res agentResource, spec sdk.Spec) (*unstructured.Unstructured, error) {
	l, a := r.specMetadata(spec)
	meta := metav1.ObjectMeta{Name: objectName(spec.Name), Namespace: r.ns, Labels: l, Annotations: a}
	var shutdown *metav1.Time
	if r.ttl > 0 {
		shutdown = ptr.To(metav1.NewTime(time.Now().Add(r.ttl).Truncate(time.Second)))
	}
	var obj any
	if res == claims {
		claim := &extv1.SandboxClaim{
			TypeMeta:   metav1.TypeMeta{APIVersion: extv1.GroupVersion.String(), Kind: claims.kind},
			ObjectMeta: meta,
			// No additionalPodMetadata: the controller takes only label
			// keys with a domain prefix there (amelia.sandbox has none),
			// so labelPod puts Amelia's on the pod.
			Spec: extv1.SandboxClaimSpec{WarmPoolRef: extv1.SandboxWarmPoolRef{Name: r.WarmPool}},
		}
		if shutdown != nil {
			// Retain: the pod goes, the claim stays for List (and
			// Teardown) to find.
			claim.Spec.Lifecycle = &extv1.Lifecycle{ShutdownTime: shutdown, ShutdownPolicy: extv1.ShutdownPolicyRetain}
		}
		obj = claim
	} else {
		sb := &agentsv1.Sandbox{
			TypeMeta:   metav1.TypeMeta{APIVersion: agentsv1.GroupVersion.String(), Kind: agentsv1.SandboxKind},
			ObjectMeta: meta,
			Spec: agentsv1.SandboxSpec{
				SandboxBlueprint: agentsv1.SandboxBlueprint{
					PodTemplate: agentsv1.PodTemplate{
						ObjectMeta: agentsv1.PodMetadata{Labels: l, Annotations: a},
						Spec:       podSpec(r.config, spec.Name),
					},
					// No Service: nothing reaches the sandbox over the
					// network.
					Service: ptr.To(false),
				},
				OperatingMode: agentsv1.SandboxOperatingModeRunning,
			},
		}
		if v := r.WorkspaceVolume; v != nil {
			// The claim's volume takes the place of the pod's emptyDir of
			// the same name.
			claim := agentsv1.PersistentVolumeClaimTemplate{
				EmbeddedObjectMetadata: agentsv1.EmbeddedObjectMetadata{Name: workspaceVolume},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: r.volumeSize}},
				},
			}
			if v.StorageClass != "" {
				claim.Spec.StorageClassName = ptr.To(v.StorageClass)
			}
			sb.Spec.VolumeClaimTemplates = []agentsv1.PersistentVolumeClaimTemplate{claim}
		}
		if shutdown != nil {
			sb.Spec.ShutdownTime = shutdown
			sb.Spec.ShutdownPolicy = ptr.To(agentsv1.ShutdownPolicyRetain)
		}
		obj = sb
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: encode the %s: %w", res.kind, err)
	}
	return &unstructured.Unstructured{Object: u}, nil
}

// sandboxPod waits until the pod of a Sandbox or SandboxClaim runs and
// returns it. The controller names the pod: a Sandbox's pod has its name
// unless it adopted one from a warm pool (then the Sandbox's annotation
// says which), and a claim's Sandbox is one the pool made.
func (r resolved) sandboxPod(ctx context.Context, res agentResource, obj *unstructured.Unstructured, spec sdk.Spec, created, replaced bool, logger *slog.Logger) (*corev1.Pod, error) {
	if obj.GetDeletionTimestamp() != nil {
		return nil, r.waitAgentObjectGone(ctx, res, obj.GetName())
	}
	sbName := obj.GetName()
	if res == claims {
		var err error
		if sbName, err = r.claimedSandbox(ctx, obj, spec, created, replaced, logger); err != nil {
			return nil, err
		}
	}
	var sb agentsv1.Sandbox
	told := ""
	resumed := false
	err := r.untilObject(ctx, sandboxes, sbName, func(o *unstructured.Unstructured) (bool, error) {
		if o == nil {
			return false, nil // a claim's Sandbox may not be there yet
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &sb); err != nil {
			return false, fmt.Errorf("kubernetes: read Sandbox %s/%s: %w", r.ns, sbName, err)
		}
		if o.GetUID() != obj.GetUID() && res == sandboxes {
			return false, errGone
		}
		ready := meta.FindStatusCondition(sb.Status.Conditions, string(agentsv1.SandboxConditionReady))
		if ready != nil && ready.Reason == agentsv1.SandboxReasonExpired {
			if !keepsWorkspace(obj) {
				return false, r.endedSandbox(res, obj, "expired (its shutdownTime passed)", created, replaced)
			}
			// Its workspace is on a claim the expiry kept: move the
			// shutdown time ahead, and the controller makes a pod on it.
			if !resumed {
				if err := r.extend(ctx, res, sbName); err != nil {
					return false, err
				}
				sdk.Progress(logger, fmt.Sprintf("sandbox %s: Sandbox %s/%s had expired; its workspace volume is kept: starting a pod on it again", spec.Name, r.ns, sbName))
				resumed = true
			}
			return false, nil
		}
		// (A pod that ended under a workspace claim is found by
		// waitRunning below, with its UID, to be replaced alone.)
		if f := meta.FindStatusCondition(sb.Status.Conditions, string(agentsv1.SandboxConditionFinished)); f != nil && f.Status == metav1.ConditionTrue && !keepsWorkspace(obj) {
			return false, r.endedSandbox(res, obj, "its pod ended: "+f.Reason, created, replaced)
		}
		if sb.Spec.OperatingMode == agentsv1.SandboxOperatingModeSuspended {
			patch := []byte(`{"spec":{"operatingMode":"Running"}}`)
			if _, err := r.c.dyn.Resource(sandboxes.gvr).Namespace(r.ns).Patch(ctx, sbName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return false, r.c.wrap(err, "resume Sandbox "+r.ns+"/"+sbName)
			}
			logger.Info("resumed the suspended sandbox", "sandbox", spec.Name, "Sandbox", sbName)
			return false, nil
		}
		if ready != nil && ready.Status != metav1.ConditionTrue {
			if state := joinNonEmpty(": ", ready.Reason, ready.Message); state != told {
				sdk.Progress(logger, fmt.Sprintf("sandbox %s: Sandbox %s/%s %s", spec.Name, r.ns, sbName, state))
				told = state
			}
		}
		// Its pod, once the controller made it (under the Sandbox's
		// name, unless it adopted one of a warm pool's).
		name := sbName
		if n := sb.Annotations[agentsv1.SandboxPodNameAnnotation]; n != "" {
			name = n
		}
		_, err := r.c.client.CoreV1().Pods(r.ns).Get(ctx, name, getOpts)
		return err == nil, nil
	})
	if errors.Is(err, context.DeadlineExceeded) && told != "" {
		err = fmt.Errorf("the Sandbox %s/%s is still %s: %w", r.ns, sbName, told, err)
	}
	if err != nil {
		return nil, err
	}
	podName := sbName
	if n := sb.Annotations[agentsv1.SandboxPodNameAnnotation]; n != "" {
		podName = n
	}
	pod, err := r.c.client.CoreV1().Pods(r.ns).Get(ctx, podName, getOpts)
	if err != nil {
		return nil, r.c.wrap(err, fmt.Sprintf("find the pod %s of Sandbox %s/%s", podName, r.ns, sbName))
	}
	if res == claims {
		if pod, err = r.labelPod(ctx, pod, obj); err != nil {
			return nil, err
		}
	}
	pod, err = r.waitRunning(ctx, spec.Name, pod, created, replaced, logger)
	var ended *endedError
	if errors.As(err, &ended) {
		return nil, &endedError{pod: ended.pod, state: ended.state}
	}
	if errors.Is(err, errGone) {
		// The controller replaces a pod it lost: wait for its next.
		return nil, errGone
	}
	return pod, err
}

// endedSandbox is a Sandbox that will not run again: made again unless
// this process made it (or made it again) just now.
func (r resolved) endedSandbox(res agentResource, obj *unstructured.Unstructured, why string, created, replaced bool) error {
	if created || replaced {
		return sdk.Errorf(sdk.ErrUnavailable, "%s %s/%s ended as it started: %s", res.kind, r.ns, obj.GetName(), why)
	}
	return &endedError{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName()}}, state: why}
}

// claimedSandbox waits until the claim names its Sandbox, and returns
// that name.
func (r resolved) claimedSandbox(ctx context.Context, obj *unstructured.Unstructured, spec sdk.Spec, created, replaced bool, logger *slog.Logger) (string, error) {
	var name string
	told := ""
	err := r.untilObject(ctx, claims, obj.GetName(), func(o *unstructured.Unstructured) (bool, error) {
		if o == nil || o.GetUID() != obj.GetUID() {
			return false, errGone
		}
		var claim extv1.SandboxClaim
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &claim); err != nil {
			return false, fmt.Errorf("kubernetes: read SandboxClaim %s/%s: %w", r.ns, o.GetName(), err)
		}
		name = claim.Status.SandboxStatus.Name
		if name == "" {
			name = claim.Annotations[extv1.AssignedSandboxNameAnnotation]
		}
		for _, c := range claim.Status.Conditions {
			if c.Reason == extv1.ClaimExpiredReason {
				return false, r.endedSandbox(claims, obj, "the claim expired (its shutdownTime passed)", created, replaced)
			}
		}
		if name != "" {
			return true, nil
		}
		if c := meta.FindStatusCondition(claim.Status.Conditions, string(agentsv1.SandboxConditionReady)); c != nil {
			if claimFatal[c.Reason] {
				return false, sdk.Errorf(sdk.ErrUnavailable, "sandbox %s: SandboxClaim %s/%s on warm pool %s: %s", spec.Name, r.ns, o.GetName(), r.WarmPool, joinNonEmpty(": ", c.Reason, c.Message))
			}
			if state := joinNonEmpty(": ", c.Reason, c.Message); state != told {
				sdk.Progress(logger, fmt.Sprintf("sandbox %s: SandboxClaim %s/%s on warm pool %s: %s", spec.Name, r.ns, o.GetName(), r.WarmPool, state))
				told = state
			}
		}
		return false, nil
	})
	if errors.Is(err, context.DeadlineExceeded) && told != "" {
		err = fmt.Errorf("the SandboxClaim %s/%s is still %s: %w", r.ns, obj.GetName(), told, err)
	}
	return name, err
}

// claimFatal are the reasons of a claim's Ready condition that waiting
// does not cure (the claim controller's).
var claimFatal = map[string]bool{
	"InvalidMetadata":           true,
	"WarmPoolNotFound":          true,
	"TemplateNotFound":          true,
	"VolumeClaimTemplatesError": true,
	"AdoptionConflict":          true,
}

// labelPod puts the claim's labels and annotations on the pod a warm pool
// made: the NetworkPolicy selects the pod by them, and List and findPod
// find it by them.
func (r resolved) labelPod(ctx context.Context, pod *corev1.Pod, claim *unstructured.Unstructured) (*corev1.Pod, error) {
	if pod.Annotations[labelSandbox] == claim.GetAnnotations()[labelSandbox] && pod.Labels[labelSandbox] == claim.GetLabels()[labelSandbox] {
		return pod, nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": claim.GetLabels(), "annotations": claim.GetAnnotations(),
	}})
	p, err := r.c.client.CoreV1().Pods(r.ns).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return p, r.c.wrap(err, "label the claimed pod "+r.ns+"/"+pod.Name)
}

// deleteAgentObject deletes the sandbox's object of that resource; one
// of its name that Amelia did not make is refused.
func (r resolved) deleteAgentObject(ctx context.Context, res agentResource, sandbox string) error {
	ri := r.c.dyn.Resource(res.gvr).Namespace(r.ns)
	name := objectName(sandbox)
	obj, err := ri.Get(ctx, name, getOpts)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return r.c.wrap(err, fmt.Sprintf("find %s %s/%s", res.kind, r.ns, name))
	case obj.GetLabels()[labelManagedBy] != managedBy || obj.GetAnnotations()[labelSandbox] != sandbox:
		return sdk.Errorf(sdk.ErrConflict, "refusing to remove %s %s/%s: it is not sandbox %s's", res.kind, r.ns, name, sandbox)
	}
	uid := obj.GetUID()
	// Foreground: the object stays until what it owns (a claim's
	// Sandbox, a Sandbox's pod) is gone.
	err = ri.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return r.c.wrap(err, fmt.Sprintf("delete %s %s/%s", res.kind, r.ns, name))
	}
	return nil
}

// waitAgentObjectGone waits until the object of that name is gone.
func (r resolved) waitAgentObjectGone(ctx context.Context, res agentResource, name string) error {
	return r.untilObject(ctx, res, name, func(o *unstructured.Unstructured) (bool, error) { return o == nil, nil })
}

// untilObject calls check with the object of that name (nil when there
// is none), now and as it changes, until check says done or fails.
func (r resolved) untilObject(ctx context.Context, res agentResource, name string, check func(*unstructured.Unstructured) (bool, error)) error {
	ri := r.c.dyn.Resource(res.gvr).Namespace(r.ns)
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	var cur *unstructured.Unstructured
	return until(ctx,
		func(ctx context.Context) ([]runtime.Object, string, error) {
			list, err := ri.List(ctx, opts)
			if err != nil {
				return nil, "", r.c.wrap(err, fmt.Sprintf("watch %s %s/%s", res.kind, r.ns, name))
			}
			var objs []runtime.Object
			for i := range list.Items {
				objs = append(objs, &list.Items[i])
			}
			return objs, list.GetResourceVersion(), nil
		},
		func(ctx context.Context, rv string) (watch.Interface, error) {
			o := opts
			o.ResourceVersion = rv
			return ri.Watch(ctx, o)
		},
		func(ev watch.EventType, obj runtime.Object) (bool, error) {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				cur = u
				if ev == watch.Deleted {
					cur = nil
				}
			}
			return check(cur)
		},
		func() { cur = nil })
}

// renewFraction is how often a TTL's shutdown time is moved ahead: every
// TTL/renewFraction.
const renewFraction = 4

// renew keeps moving the shutdown time of the sandbox's Sandbox (or
// claim) to a TTL from now while this process uses it, so that the
// cluster removes the sandbox a TTL after the last amelia using it went
// away (its host died), and never under a running agent.
func (b *box) renew(r resolved, sandbox string, logger *slog.Logger) {
	b.renewMu.Lock()
	defer b.renewMu.Unlock()
	if b.renewStop != nil {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	b.renewStop = stop
	res := sandboxes
	if r.WarmPool != "" {
		res = claims
	}
	name := objectName(sandbox)
	go func() {
		t := time.NewTicker(r.ttl / renewFraction)
		defer t.Stop()
		for {
			if err := r.extend(ctx, res, name); err != nil && ctx.Err() == nil {
				logger.Warn("move the sandbox's shutdown time ahead (tried again later)", "sandbox", sandbox, res.kind, name, "error", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// extend moves the shutdown time of the Sandbox or claim name to a TTL
// from now; without a TTL (the profile dropped it) it takes it away.
func (r resolved) extend(ctx context.Context, res agentResource, name string) error {
	at := "null"
	if r.ttl > 0 {
		at = strconv.Quote(time.Now().Add(r.ttl).UTC().Format(time.RFC3339))
	}
	patch := `{"spec":{"shutdownTime":` + at + `}}`
	if res == claims {
		patch = `{"spec":{"lifecycle":{"shutdownTime":` + at + `}}}`
	}
	_, err := r.c.dyn.Resource(res.gvr).Namespace(r.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return r.c.wrap(err, fmt.Sprintf("move the shutdown time of %s %s/%s", res.kind, r.ns, name))
}
