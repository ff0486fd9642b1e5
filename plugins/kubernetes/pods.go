package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// ensurePod makes the sandbox's plain pod run, or reuses it: created
// when missing, waited for while it starts, and made again when it ended
// (evicted, its node lost: a pod that ran once never runs again).
func (r resolved) ensurePod(ctx context.Context, spec sdk.Spec, logger *slog.Logger) (*corev1.Pod, bool, error) {
	pods := r.c.client.CoreV1().Pods(r.ns)
	name := objectName(spec.Name)
	replaced := false
	for {
		created := false
		pod, err := pods.Get(ctx, name, getOpts)
		if apierrors.IsNotFound(err) {
			l, a := r.specMetadata(spec)
			pod, err = pods.Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.ns, Labels: l, Annotations: a},
				Spec:       podSpec(r.config, spec.Name),
			}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another process made it a moment ago
			}
			created = err == nil
		}
		if err != nil {
			return nil, false, r.c.wrap(err, fmt.Sprintf("pod %s/%s of sandbox %s", r.ns, name, spec.Name))
		}
		if err := checkOwned("pod", pod, spec); err != nil {
			return nil, false, err
		}
		pod, err = r.waitRunning(ctx, spec.Name, pod, created, replaced, logger)
		var ended *endedError
		switch {
		case errors.As(err, &ended):
			// Ended before this process looked: make it again, once.
			logger.Info("the sandbox's pod ended: making it again", "sandbox", spec.Name, "pod", name, "state", ended.state)
			if err := r.deletePod(ctx, ended.pod); err != nil {
				return nil, false, err
			}
			replaced = true
			continue
		case errors.Is(err, errGone):
			continue // deleted meanwhile: look again
		case err != nil:
			return nil, false, err
		}
		return pod, created, nil
	}
}

// errGone: the pod waited for was deleted.
var errGone = errors.New("the pod is gone")

// endedError is a pod that ran and ended, or failed before it ran: it
// never runs (again).
type endedError struct {
	pod   *corev1.Pod
	state string
}

func (e *endedError) Error() string { return "pod " + e.pod.Name + " ended: " + e.state }

// waitRunning waits until the pod runs, saying where it is as it goes
// (Pending: Unschedulable…, ContainerCreating…). A pod that will never
// run (its image cannot be pulled, its container cannot start) is an
// error saying why; when this process created it, it is deleted too:
// nothing of the user's is in it. A pod that ended is an *endedError
// unless this process created it, or already made it again (then it is
// an error with the reason). A pod that is deleted is errGone once it is
// gone.
func (r resolved) waitRunning(ctx context.Context, sandbox string, pod *corev1.Pod, created, replaced bool, logger *slog.Logger) (*corev1.Pod, error) {
	told := ""
	var last *corev1.Pod
	uid := pod.UID
	err := r.untilPod(ctx, pod.Name, pod, func(p *corev1.Pod) (bool, error) {
		if p == nil || p.UID != uid {
			return false, errGone
		}
		last = p
		if p.DeletionTimestamp != nil {
			return false, nil // wait for it to be gone
		}
		if p.Status.Phase == corev1.PodRunning && containerRunning(p) {
			return true, nil
		}
		state := describe(p)
		if state != told {
			sdk.Progress(logger, fmt.Sprintf("sandbox %s: pod %s/%s %s", sandbox, p.Namespace, p.Name, state), "node", p.Spec.NodeName)
			told = state
		}
		if reason := neverRuns(p); reason != "" {
			return false, sdk.Errorf(sdk.ErrUnavailable, "sandbox %s: pod %s/%s cannot run: %s", sandbox, p.Namespace, p.Name, reason)
		}
		if ended(p) {
			if created || replaced {
				return false, sdk.Errorf(sdk.ErrUnavailable, "sandbox %s: pod %s/%s ended as it started: %s", sandbox, p.Namespace, p.Name, state)
			}
			return false, &endedError{pod: p, state: state}
		}
		return false, nil
	})
	if err != nil && created && !errors.Is(err, errGone) && !errors.As(err, new(*endedError)) && last != nil && (neverRuns(last) != "" || ended(last)) {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
		defer cancel()
		if derr := r.deletePod(dctx, last); derr != nil {
			logger.Warn("delete the pod that cannot run", "pod", last.Name, "error", derr)
		}
	}
	return last, err
}

// deleteTimeout bounds the removal of what a failed start left.
const deleteTimeout = time.Minute

// deletePod deletes that pod (not another made since under its name) and
// waits until it is gone.
func (r resolved) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := r.c.client.CoreV1().Pods(r.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return r.c.wrap(err, "delete pod "+r.ns+"/"+pod.Name)
	}
	return r.untilPod(ctx, pod.Name, nil, func(p *corev1.Pod) (bool, error) { return p == nil || p.UID != pod.UID, nil })
}

// waitNoPods waits until the sandbox has no pod left.
func (r resolved) waitNoPods(ctx context.Context, sandbox string) error {
	list, watchFrom := r.podsFrom(metav1.ListOptions{LabelSelector: sandboxSelector(sandbox).String()}, "list the pods of sandbox "+sandbox)
	left := map[types.UID]bool{}
	return until(ctx, list, watchFrom,
		func(ev watch.EventType, obj runtime.Object) (bool, error) {
			if pod, ok := obj.(*corev1.Pod); ok {
				switch ev {
				case watch.Deleted:
					delete(left, pod.UID)
				default:
					left[pod.UID] = true
				}
			}
			return len(left) == 0, nil
		},
		func() { clear(left) })
}

// podsFrom are until's list and watch of the namespace's pods that opts
// select; a failed list is wrapped with what.
func (r resolved) podsFrom(opts metav1.ListOptions, what string) (func(context.Context) ([]runtime.Object, string, error), func(context.Context, string) (watch.Interface, error)) {
	pods := r.c.client.CoreV1().Pods(r.ns)
	list := func(ctx context.Context) ([]runtime.Object, string, error) {
		l, err := pods.List(ctx, opts)
		if err != nil {
			return nil, "", r.c.wrap(err, what)
		}
		objs := make([]runtime.Object, 0, len(l.Items))
		for i := range l.Items {
			objs = append(objs, &l.Items[i])
		}
		return objs, l.ResourceVersion, nil
	}
	watchFrom := func(ctx context.Context, rv string) (watch.Interface, error) {
		o := opts
		o.ResourceVersion = rv
		return pods.Watch(ctx, o)
	}
	return list, watchFrom
}

// untilPod calls check with the pod of that name (nil when there is
// none), first with have when it is not nil, then as it changes, until
// check says done or fails.
func (r resolved) untilPod(ctx context.Context, name string, have *corev1.Pod, check func(*corev1.Pod) (bool, error)) error {
	if have != nil {
		if done, err := check(have); done || err != nil {
			return err
		}
	}
	list, watchFrom := r.podsFrom(metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}, "watch pod "+r.ns+"/"+name)
	var cur *corev1.Pod
	return until(ctx, list, watchFrom,
		func(ev watch.EventType, obj runtime.Object) (bool, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				cur = p
				if ev == watch.Deleted {
					cur = nil
				}
			}
			return check(cur)
		},
		func() { cur = nil })
}

// until lists objects, feeds each to seen as Added, then watches from
// the list's version and feeds each event, until seen says done or
// fails. A watch that ends (the API server closes them now and then, or
// the version expired) is begun again with a new list, which reset
// prepares for. With no object listed, seen is called once with
// (Deleted, nil), so that "none" is an answer too.
func until(ctx context.Context, list func(context.Context) ([]runtime.Object, string, error), watchFrom func(context.Context, string) (watch.Interface, error),
	seen func(watch.EventType, runtime.Object) (bool, error), reset func()) error {
	for {
		reset()
		objs, rv, err := list(ctx)
		if err != nil {
			return err
		}
		if len(objs) == 0 {
			if done, err := seen(watch.Deleted, nil); done || err != nil {
				return err
			}
		}
		for _, o := range objs {
			if done, err := seen(watch.Added, o); done || err != nil {
				return err
			}
		}
		w, err := watchFrom(ctx, rv)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("watch: %w", err)
		}
		done, err := func() (bool, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return false, ctx.Err()
				case ev, ok := <-w.ResultChan():
					if !ok || ev.Type == watch.Error {
						return false, nil // list and watch again
					}
					if ev.Type == watch.Bookmark {
						continue
					}
					if done, err := seen(ev.Type, ev.Object); done || err != nil {
						return done, err
					}
				}
			}
		}()
		if done || err != nil {
			return err
		}
	}
}

// containerRunning reports whether the pod's first container runs (the
// sandbox's; a warm pool's pod may have others).
func containerRunning(p *corev1.Pod) bool {
	if len(p.Spec.Containers) == 0 {
		return false
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.Name == p.Spec.Containers[0].Name {
			return st.State.Running != nil
		}
	}
	return false
}

// ended reports whether the pod is done: it never runs again.
func ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

// waitingFatal are the reasons a container waits for that waiting does
// not cure.
var waitingFatal = map[string]bool{
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
	"ErrImageNeverPull":          true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"CrashLoopBackOff":           true,
}

// neverRuns says why a pod waiting to start never will, or "".
func neverRuns(p *corev1.Pod) string {
	for _, st := range p.Status.ContainerStatuses {
		if w := st.State.Waiting; w != nil && waitingFatal[w.Reason] {
			return joinNonEmpty(": ", w.Reason, w.Message)
		}
	}
	return ""
}

// describe says where a pod is, for a person: its phase and why
// ("Pending: Unschedulable: 0/2 nodes are available: …",
// "Pending: ContainerCreating", "Failed: Evicted: The node was low on
// resource: memory").
func describe(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil {
		return "Terminating"
	}
	parts := []string{string(p.Status.Phase)}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			parts = append(parts, joinNonEmpty(": ", c.Reason, c.Message))
		}
	}
	for _, st := range p.Status.ContainerStatuses {
		switch {
		case st.State.Waiting != nil:
			parts = append(parts, joinNonEmpty(": ", st.State.Waiting.Reason, st.State.Waiting.Message))
		case st.State.Terminated != nil:
			t := st.State.Terminated
			parts = append(parts, joinNonEmpty(": ", t.Reason, fmt.Sprintf("exit code %d", t.ExitCode), t.Message))
		}
	}
	if p.Status.Reason != "" || p.Status.Message != "" {
		parts = append(parts, joinNonEmpty(": ", p.Status.Reason, p.Status.Message))
	}
	if len(parts) == 1 && p.Status.Phase == corev1.PodPending && p.Spec.NodeName != "" {
		parts = append(parts, "ContainerCreating")
	}
	return joinNonEmpty(": ", parts...)
}

func joinNonEmpty(sep string, parts ...string) string {
	var kept []string
	for _, s := range parts {
		if s = strings.TrimSpace(s); s != "" {
			kept = append(kept, s)
		}
	}
	return strings.Join(kept, sep)
}
