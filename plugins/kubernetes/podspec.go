package kubernetes

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The sandbox pod. Commands run as uid and gid 1000, which the image need
// not know: HOME and the workdir are emptyDir volumes the pod's fsGroup
// can write.
const (
	containerName = "sandbox"
	// Workdir is where work happens: an emptyDir volume, or the claim of
	// kubernetes.workspace_volume.
	Workdir = "/workspace"
	// workspaceVolume is the pod's volume at Workdir: an emptyDir, or the
	// claim of kubernetes.workspace_volume.
	workspaceVolume = "workspace"
	// Home is the user's home, an emptyDir volume; the worker is
	// installed under it.
	Home = "/home/amelia"
	// UID and GID run every command.
	UID = 1000
	GID = 1000
)

// workerDir is where the worker goes (the default of sdk.WorkerPlace,
// $HOME/.amelia/bin, said outright).
const workerDir = Home + "/.amelia/bin"

// podSpec is the spec of a sandbox's pod: a sandbox, not a workload. No
// service-account token, no host namespace or path, not root, no
// capability, no privilege escalation, the runtime's default seccomp
// profile; tini as PID 1 reaps what the agent's commands leave (`sleep
// infinity` alone would leave zombies), and the sandbox's own
// environment variable names it.
func podSpec(c config, sandbox string) corev1.PodSpec {
	var pullSecrets []corev1.LocalObjectReference
	for _, s := range c.ImagePullSecrets {
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: s})
	}
	spec := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		ServiceAccountName:            c.ServiceAccount,
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		ImagePullSecrets:              pullSecrets,
		NodeSelector:                  c.NodeSelector,
		Tolerations:                   c.tolerations,
		// Sandboxes spread over the nodes where the scheduler can: a
		// preference, which never keeps one from starting.
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
			MaxSkew:           1,
			TopologyKey:       corev1.LabelHostname,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{labelManagedBy: managedBy}},
		}},
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			RunAsUser:      ptr.To[int64](UID),
			RunAsGroup:     ptr.To[int64](GID),
			FSGroup:        ptr.To[int64](GID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name:            containerName,
			Image:           c.Image,
			ImagePullPolicy: corev1.PullPolicy(c.ImagePullPolicy),
			Command:         []string{"tini", "--", "sleep", "infinity"},
			WorkingDir:      Workdir,
			Env:             []corev1.EnvVar{{Name: "HOME", Value: Home}},
			Resources:       c.resources,
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Privileged:               ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
			VolumeMounts: []corev1.VolumeMount{
				{Name: workspaceVolume, MountPath: Workdir},
				{Name: "home", MountPath: Home},
			},
		}},
		Volumes: []corev1.Volume{
			{Name: workspaceVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
	}
	if sandbox != "" {
		ct := &spec.Containers[0]
		ct.Env = append(ct.Env, corev1.EnvVar{Name: "AMELIA_SANDBOX", Value: sandbox})
	}
	if c.RuntimeClassName != "" {
		spec.RuntimeClassName = ptr.To(c.RuntimeClassName)
	}
	return spec
}

// TemplatePodSpec is the pod the provider makes for a sandbox of image,
// for a warm pool's SandboxTemplate: a pool of such pods gives sandboxes
// the provider's own guarantees, and what it needs (tini, uid 1000 with
// a writable /workspace and HOME).
func TemplatePodSpec(image string) corev1.PodSpec {
	return podSpec(config{Settings: Settings{Image: image, ImagePullPolicy: string(corev1.PullIfNotPresent)}}, "")
}

// networkPolicy is what keeps a sandbox of network none or allowlist from
// the network: no egress and no ingress for its pod. Amelia's tunnel runs
// over pods/exec, through the API server and the kubelet, which no
// NetworkPolicy touches. Only a network plugin that enforces
// NetworkPolicies makes it so: the run's egress check finds out.
func networkPolicy(ns, sandbox string, l, a map[string]string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(sandbox), Namespace: ns, Labels: l, Annotations: a},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				labelManagedBy: managedBy,
				labelSandbox:   l[labelSandbox],
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// isolated reports whether a network mode takes the sandbox off the
// network.
func isolated(m sdk.NetworkMode) bool { return m != sdk.NetworkOpen }
