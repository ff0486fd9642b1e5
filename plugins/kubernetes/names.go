package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Labels and annotations. Spec.Labels (amelia.profile, amelia.config,
// amelia.owner, amelia.created...) go on every object of a sandbox, each
// value as it is where Kubernetes' label syntax takes it, else as
// hashValue of it; the annotation labelsAnnotation holds them all as
// they are, which List reports.
const (
	labelPrefix = "amelia."
	// labelSandbox marks Amelia's objects: its value is the sandbox's
	// name (hashed when it does not fit), the annotation of the same key
	// the name itself.
	labelSandbox = "amelia.sandbox"
	labelProfile = "amelia.profile"
	labelCreated = "amelia.created"
	labelNetwork = "amelia.network" // the policy it was created for
	// labelsAnnotation holds Spec.Labels as JSON.
	labelsAnnotation = "amelia.labels"
	// labelManagedBy is Kubernetes' recommended label for the tool that
	// manages an object.
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "amelia"
)

// objectPrefix starts the name of every object of a sandbox.
const objectPrefix = "amelia-"

// objectName is the name of a sandbox's pod (or Sandbox, SandboxClaim,
// NetworkPolicy): amelia-NAME where that is a DNS label (a Service of
// the Agent Sandbox API may take the name, so it must be one), else a
// shortened, '_'-free form with a hash of the name, so that two sandbox
// names never share an object.
func objectName(sandbox string) string {
	n := objectPrefix + sandbox
	if len(validation.IsDNS1123Label(n)) == 0 {
		return n
	}
	sum := sha256.Sum256([]byte(sandbox))
	suffix := "-" + hex.EncodeToString(sum[:])[:10]
	s := strings.ReplaceAll(sandbox, "_", "-")
	s = s[:min(len(s), validation.DNS1123LabelMaxLength-len(objectPrefix)-len(suffix))]
	return objectPrefix + strings.TrimRight(s, "-") + suffix
}

// hashPrefix starts a label value that stands for one Kubernetes does
// not take (too long, or with characters a label value cannot hold).
const hashPrefix = "sha256."

// labelValue is v as a label value: itself when Kubernetes takes it, else
// its hash. A value is always encoded the same way, so a selector finds
// what was labelled.
func labelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 && !strings.HasPrefix(v, hashPrefix) {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	return hashPrefix + hex.EncodeToString(sum[:])[:40]
}

// labelKey reports whether k can be a label key; a key that cannot is
// kept only in labelsAnnotation.
func labelKey(k string) bool { return len(validation.IsQualifiedName(k)) == 0 }

// metadata is the labels and annotations of a sandbox's objects: the
// settings' own, then Amelia's.
func metadata(c config, sandbox string, spec map[string]string) (map[string]string, map[string]string) {
	l := maps.Clone(c.Labels)
	if l == nil {
		l = map[string]string{}
	}
	a := maps.Clone(c.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	for k, v := range spec {
		if labelKey(k) {
			l[k] = labelValue(v)
		}
	}
	l[labelSandbox] = labelValue(sandbox)
	l[labelManagedBy] = managedBy
	a[labelSandbox] = sandbox
	raw, _ := json.Marshal(spec)
	a[labelsAnnotation] = string(raw)
	return l, a
}

// selector finds a sandbox's objects that carry every label of want
// (Amelia's objects only when want is empty). Labels that cannot be
// label keys are not in it: the caller checks the annotation too.
func selector(want map[string]string) labels.Selector {
	set := labels.Set{labelManagedBy: managedBy}
	for k, v := range want {
		if labelKey(k) {
			set[k] = labelValue(v)
		}
	}
	return labels.SelectorFromSet(set)
}

// sandboxSelector finds the objects of one sandbox.
func sandboxSelector(sandbox string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{labelManagedBy: managedBy, labelSandbox: labelValue(sandbox)})
}

// specLabels reads the labels an object was created with from its
// annotations; nil when it is not Amelia's or they cannot be read.
func specLabels(annotations map[string]string) map[string]string {
	raw, ok := annotations[labelsAnnotation]
	if !ok {
		return nil
	}
	var l map[string]string
	if json.Unmarshal([]byte(raw), &l) != nil {
		return nil
	}
	if l == nil {
		l = map[string]string{}
	}
	return l
}
