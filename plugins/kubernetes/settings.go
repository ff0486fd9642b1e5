package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Settings is a profile's `sandbox.kubernetes` block.
type Settings struct {
	// Context is the kubeconfig context to use (default: the current
	// one). The kubeconfig is found as kubectl finds it: $KUBECONFIG,
	// else ~/.kube/config; inside a pod without either, the pod's own
	// service account.
	Context string `json:"context"`
	// Namespace holds the sandboxes (default: the context's, else
	// "default").
	Namespace string `json:"namespace"`
	// Image is the sandbox's image: sh, coreutils and tini in it, and
	// pullable by every node that may run it. Required.
	Image string `json:"image"`
	// ImagePullPolicy is Always, IfNotPresent or Never (default:
	// Kubernetes').
	ImagePullPolicy string `json:"image_pull_policy"`
	// ImagePullSecrets name secrets of the namespace that pull Image.
	ImagePullSecrets []string `json:"image_pull_secrets"`
	// Resources are the sandbox container's requests and limits, by
	// resource name (cpu, memory, ephemeral-storage...).
	Resources Resources `json:"resources"`
	// NodeSelector and Tolerations say where the sandbox may run.
	NodeSelector map[string]string `json:"node_selector"`
	Tolerations  []Toleration      `json:"tolerations"`
	// RuntimeClassName runs the sandbox under that RuntimeClass (gVisor,
	// Kata Containers) where the cluster has it.
	RuntimeClassName string `json:"runtime_class_name"`
	// ServiceAccount is the pod's service account; its token is never
	// mounted. Default: the namespace's default.
	ServiceAccount string `json:"service_account"`
	// Labels and Annotations go on the pod (and the Sandbox object);
	// keys starting amelia. are Amelia's own.
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	// API is how a sandbox is held: agent-sandbox (a Sandbox object of
	// the Agent Sandbox API, agents.x-k8s.io), pods (a plain Pod), or
	// auto (the default: agent-sandbox where its CRD is installed).
	API string `json:"api"`
	// WarmPool names a SandboxWarmPool of the namespace: a sandbox is
	// claimed from it (a SandboxClaim) instead of made from Image.
	WarmPool string `json:"warm_pool"`
	// TTL bounds, through the Sandbox's shutdownTime, how long a
	// sandbox outlives the last amelia process using it (a duration such
	// as 2h): while one uses it, the shutdown time keeps moving ahead.
	// Agent Sandbox API only.
	TTL string `json:"ttl"`
	// StartTimeout bounds waiting for a sandbox to start (default 5m).
	StartTimeout string `json:"start_timeout"`
	// WorkspaceVolume puts the workspace on a PersistentVolumeClaim the
	// Sandbox owns instead of an emptyDir, so that the work in it outlives
	// the pod: when the TTL passes for a sandbox whose host died, the
	// cluster removes the pod but keeps the claim with the Sandbox object,
	// and the next amelia to use the sandbox gets the workspace back in a
	// new pod. Agent Sandbox API only, without warm_pool.
	WorkspaceVolume *WorkspaceVolume `json:"workspace_volume"`
}

// WorkspaceVolume is the claim the workspace is on.
type WorkspaceVolume struct {
	// Size is the storage asked for, a quantity such as 20Gi. Required.
	Size string `json:"size"`
	// StorageClass names the claim's StorageClass (default: the
	// cluster's default class).
	StorageClass string `json:"storage_class"`
}

// Resources are a container's requests and limits, as quantities by
// resource name.
type Resources struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

// Toleration is a pod toleration (Kubernetes' fields, snake_case).
type Toleration struct {
	Key               string `json:"key"`
	Operator          string `json:"operator"`
	Value             string `json:"value"`
	Effect            string `json:"effect"`
	TolerationSeconds *int64 `json:"toleration_seconds"`
}

// The ways a sandbox is held (Settings.API).
const (
	APIAuto         = "auto"
	APIAgentSandbox = "agent-sandbox"
	APIPods         = "pods"
)

const defaultStartTimeout = 5 * time.Minute

// config is a settings block read and checked: the settings with their
// defaults, and the values parsed.
type config struct {
	Settings
	resources    corev1.ResourceRequirements
	tolerations  []corev1.Toleration
	ttl          time.Duration // zero: none
	startTimeout time.Duration
	volumeSize   resource.Quantity // workspace_volume.size
}

var (
	imageRule   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._/:@-]{0,254}$`)
	contextRule = regexp.MustCompile(`^[^\x00-\x1f]{1,253}$`)
)

func invalid(key, format string, args ...any) error {
	return sdk.InvalidSetting(Name, key, format, args...)
}

// ValidateSettings checks a profile's kubernetes block without reaching
// the cluster. Every network mode is asked of the cluster the same way (a
// NetworkPolicy); whether its network plugin enforces it is the run's
// egress check's to find out.
func (p *Provider) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	_, err := decodeSettings(req.Config)
	return sdk.SettingsProblems(err)
}

// decodeSettings reads a settings block strictly (a key it does not know
// is an error naming it) and checks every value.
func decodeSettings(raw json.RawMessage) (config, error) {
	var c config
	if err := sdk.DecodeSettings(raw, Name, &c.Settings); err != nil {
		return c, err
	}
	return c, c.check()
}

func (c *config) check() error {
	s := &c.Settings
	if s.Context != "" && !contextRule.MatchString(s.Context) {
		return invalid("context", "%q is not a kubeconfig context name", s.Context)
	}
	if s.Namespace != "" {
		if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
			return invalid("namespace", "%q is not a namespace name: %s", s.Namespace, errs[0])
		}
	}
	switch s.API {
	case "":
		s.API = APIAuto
	case APIAuto, APIAgentSandbox, APIPods:
	default:
		return invalid("api", "%q is not auto, agent-sandbox or pods", s.API)
	}
	if s.WarmPool != "" {
		if errs := validation.IsDNS1123Subdomain(s.WarmPool); len(errs) > 0 {
			return invalid("warm_pool", "%q is not a SandboxWarmPool name: %s", s.WarmPool, errs[0])
		}
		if s.API == APIPods {
			return invalid("warm_pool", "a warm pool is the Agent Sandbox API's, and api is pods: set api to agent-sandbox or auto")
		}
	}
	switch {
	case s.Image == "" && s.WarmPool == "":
		return invalid("image", "required: the sandbox's image (sh, coreutils and tini in it), which every node that may run it can pull")
	case s.Image != "" && !imageRule.MatchString(s.Image):
		return invalid("image", "%q is not an image reference (like registry.example.com/team/sandbox:1)", s.Image)
	case s.Image != "" && s.WarmPool != "":
		return invalid("image", "does not go with warm_pool: the pool's SandboxTemplate names the image")
	}
	switch corev1.PullPolicy(s.ImagePullPolicy) {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return invalid("image_pull_policy", "%q is not Always, IfNotPresent or Never", s.ImagePullPolicy)
	}
	for i, name := range s.ImagePullSecrets {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return invalid(fmt.Sprintf("image_pull_secrets[%d]", i), "%q is not a secret name: %s", name, errs[0])
		}
	}
	var err error
	if c.resources, err = s.Resources.requirements(); err != nil {
		return err
	}
	for k, v := range s.NodeSelector {
		if err := checkLabel(sdk.JoinKey("node_selector", k), k, v, false); err != nil {
			return err
		}
	}
	if c.tolerations, err = tolerations(s.Tolerations); err != nil {
		return err
	}
	if s.RuntimeClassName != "" {
		if errs := validation.IsDNS1123Subdomain(s.RuntimeClassName); len(errs) > 0 {
			return invalid("runtime_class_name", "%q is not a RuntimeClass name: %s", s.RuntimeClassName, errs[0])
		}
	}
	if s.ServiceAccount != "" {
		if errs := validation.IsDNS1123Subdomain(s.ServiceAccount); len(errs) > 0 {
			return invalid("service_account", "%q is not a service account name: %s", s.ServiceAccount, errs[0])
		}
	}
	for k, v := range s.Labels {
		if err := checkLabel(sdk.JoinKey("labels", k), k, v, true); err != nil {
			return err
		}
	}
	for k := range s.Annotations {
		key := sdk.JoinKey("annotations", k)
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return invalid(key, "is not an annotation key: %s", errs[0])
		}
		if ours(k) {
			return invalid(key, "keys starting with %s are Amelia's own", labelPrefix)
		}
	}
	if s.TTL != "" {
		if s.API == APIPods {
			return invalid("ttl", "needs the Agent Sandbox API (a Sandbox's shutdownTime), and api is pods")
		}
		d, err := time.ParseDuration(s.TTL)
		if err != nil || d < time.Minute {
			return invalid("ttl", "%q is not a duration of a minute or more, like 2h", s.TTL)
		}
		c.ttl = d
	}
	if v := s.WorkspaceVolume; v != nil {
		switch {
		case s.API == APIPods:
			return invalid("workspace_volume", "needs the Agent Sandbox API (a Sandbox's volumeClaimTemplates), and api is pods")
		case s.WarmPool != "":
			return invalid("workspace_volume", "does not go with warm_pool: the pool's SandboxTemplate says where the workspace is")
		}
		q, err := resource.ParseQuantity(v.Size)
		if err != nil || q.Sign() <= 0 {
			return invalid("workspace_volume.size", "%q is not a size like 20Gi", v.Size)
		}
		c.volumeSize = q
		if v.StorageClass != "" {
			if errs := validation.IsDNS1123Subdomain(v.StorageClass); len(errs) > 0 {
				return invalid("workspace_volume.storage_class", "%q is not a StorageClass name: %s", v.StorageClass, errs[0])
			}
		}
	}
	c.startTimeout = defaultStartTimeout
	if s.StartTimeout != "" {
		d, err := time.ParseDuration(s.StartTimeout)
		if err != nil || d <= 0 {
			return invalid("start_timeout", "%q is not a duration like 5m", s.StartTimeout)
		}
		c.startTimeout = d
	}
	return nil
}

// checkLabel checks a label of the settings' (of the pod, or a node's);
// own says whether keys starting amelia. are refused.
func checkLabel(key, k, v string, own bool) error {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return invalid(key, "is not a label key: %s", errs[0])
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return invalid(key, "%q is not a label value: %s", v, errs[0])
	}
	if own && ours(k) {
		return invalid(key, "keys starting with %s are Amelia's own", labelPrefix)
	}
	return nil
}

// requirements parses the quantities.
func (r Resources) requirements() (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	parse := func(what string, in map[string]string) (corev1.ResourceList, error) {
		if len(in) == 0 {
			return nil, nil
		}
		list := corev1.ResourceList{}
		for _, name := range slices.Sorted(maps.Keys(in)) {
			key := sdk.JoinKey("resources", what) + "." + name
			if errs := validation.IsQualifiedName(name); len(errs) > 0 {
				return nil, invalid(key, "is not a resource name (cpu, memory, ephemeral-storage...): %s", errs[0])
			}
			q, err := resource.ParseQuantity(in[name])
			if err != nil {
				return nil, invalid(key, "%q is not a quantity (like 500m, 2 or 4Gi)", in[name])
			}
			list[corev1.ResourceName(name)] = q
		}
		return list, nil
	}
	var err error
	if out.Requests, err = parse("requests", r.Requests); err != nil {
		return out, err
	}
	if out.Limits, err = parse("limits", r.Limits); err != nil {
		return out, err
	}
	for name, req := range out.Requests {
		if lim, ok := out.Limits[name]; ok && req.Cmp(lim) > 0 {
			return out, invalid("resources.requests."+string(name), "%s is more than its limit %s", req.String(), lim.String())
		}
	}
	return out, nil
}

// tolerations converts and checks the settings' tolerations.
func tolerations(in []Toleration) ([]corev1.Toleration, error) {
	var out []corev1.Toleration
	for i, t := range in {
		key := fmt.Sprintf("tolerations[%d]", i)
		op := corev1.TolerationOperator(t.Operator)
		switch op {
		case "":
			op = corev1.TolerationOpEqual
		case corev1.TolerationOpEqual, corev1.TolerationOpExists:
		default:
			return nil, invalid(key+".operator", "%q is not Equal or Exists", t.Operator)
		}
		if t.Key != "" {
			if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
				return nil, invalid(key+".key", "%q is not a taint key: %s", t.Key, errs[0])
			}
		} else if op != corev1.TolerationOpExists {
			return nil, invalid(key+".key", "required unless operator is Exists")
		}
		if op == corev1.TolerationOpExists && t.Value != "" {
			return nil, invalid(key+".value", "must be empty when operator is Exists")
		}
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return nil, invalid(key+".value", "%q is not a taint value: %s", t.Value, errs[0])
		}
		effect := corev1.TaintEffect(t.Effect)
		switch effect {
		case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, invalid(key+".effect", "%q is not NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
		}
		if t.TolerationSeconds != nil && effect != corev1.TaintEffectNoExecute {
			return nil, invalid(key+".toleration_seconds", "only goes with effect NoExecute")
		}
		out = append(out, corev1.Toleration{Key: t.Key, Operator: op, Value: t.Value, Effect: effect, TolerationSeconds: t.TolerationSeconds})
	}
	return out, nil
}

// ours reports whether a label or annotation key is Amelia's own.
func ours(k string) bool { return strings.HasPrefix(k, labelPrefix) }
