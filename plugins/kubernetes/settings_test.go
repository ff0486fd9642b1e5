package kubernetes

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	ameliaconfig "github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func TestDecodeSettings(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		err      string
	}{
		{name: "image only", in: `{"image":"registry.example/sandbox:1"}`},
		{
			name: "everything",
			in: `{"context":"prod","namespace":"agents","image":"r.example/s:1","image_pull_policy":"IfNotPresent","image_pull_secrets":["pull"],
				"resources":{"requests":{"cpu":"500m","memory":"1Gi"},"limits":{"cpu":"2","memory":"4Gi"}},
				"node_selector":{"pool":"sandboxes"},"tolerations":[{"key":"dedicated","value":"agents","effect":"NoSchedule"},{"operator":"Exists","effect":"NoExecute","toleration_seconds":30}],
				"runtime_class_name":"gvisor","service_account":"sandbox","labels":{"team":"a"},"annotations":{"example.com/owner":"a"},
				"api":"agent-sandbox","ttl":"2h","start_timeout":"10m","workspace_volume":{"size":"20Gi","storage_class":"fast-ssd"}}`,
		},
		{name: "warm pool", in: `{"warm_pool":"agents"}`},
		{name: "no image", in: `{}`, err: "kubernetes.image: required"},
		{name: "unknown key", in: `{"image":"a","namespce":"x"}`, err: "kubernetes.namespce: unknown key, did you mean namespace?"},
		{name: "unknown nested key", in: `{"image":"a","resources":{"limit":{}}}`, err: "kubernetes.resources.limit: unknown key, did you mean limits?"},
		{name: "unknown toleration key", in: `{"image":"a","tolerations":[{"efect":"NoSchedule"}]}`, err: "kubernetes.tolerations[0].efect: unknown key"},
		{name: "bad namespace", in: `{"image":"a","namespace":"Agents"}`, err: `kubernetes.namespace: "Agents" is not a namespace name`},
		{name: "bad image", in: `{"image":"a b"}`, err: `kubernetes.image: "a b" is not an image reference`},
		{name: "bad pull policy", in: `{"image":"a","image_pull_policy":"Sometimes"}`, err: `kubernetes.image_pull_policy: "Sometimes" is not Always, IfNotPresent or Never`},
		{name: "bad quantity", in: `{"image":"a","resources":{"limits":{"memory":"4 GB"}}}`, err: `kubernetes.resources.limits.memory: "4 GB" is not a quantity`},
		{name: "request over limit", in: `{"image":"a","resources":{"requests":{"cpu":"3"},"limits":{"cpu":"2"}}}`, err: `kubernetes.resources.requests.cpu: 3 is more than its limit 2`},
		{name: "bad api", in: `{"image":"a","api":"crd"}`, err: `kubernetes.api: "crd" is not auto, agent-sandbox or pods`},
		{name: "warm pool on pods", in: `{"api":"pods","warm_pool":"p"}`, err: "kubernetes.warm_pool: a warm pool is the Agent Sandbox API's, and api is pods"},
		{name: "warm pool and image", in: `{"image":"a","warm_pool":"p"}`, err: "kubernetes.image: does not go with warm_pool"},
		{name: "volume on pods", in: `{"image":"a","api":"pods","workspace_volume":{"size":"1Gi"}}`, err: "kubernetes.workspace_volume: needs the Agent Sandbox API"},
		{name: "volume with a warm pool", in: `{"warm_pool":"p","workspace_volume":{"size":"1Gi"}}`, err: "kubernetes.workspace_volume: does not go with warm_pool"},
		{name: "volume without a size", in: `{"image":"a","workspace_volume":{}}`, err: `kubernetes.workspace_volume.size: "" is not a size like 20Gi`},
		{name: "bad volume size", in: `{"image":"a","workspace_volume":{"size":"lots"}}`, err: `kubernetes.workspace_volume.size: "lots" is not a size`},
		{name: "bad storage class", in: `{"image":"a","workspace_volume":{"size":"1Gi","storage_class":"Fast SSD"}}`, err: `kubernetes.workspace_volume.storage_class: "Fast SSD" is not a StorageClass name`},
		{name: "unknown volume key", in: `{"image":"a","workspace_volume":{"sise":"1Gi"}}`, err: "kubernetes.workspace_volume.sise: unknown key, did you mean size?"},
		{name: "ttl on pods", in: `{"image":"a","api":"pods","ttl":"1h"}`, err: "kubernetes.ttl: needs the Agent Sandbox API"},
		{name: "short ttl", in: `{"image":"a","ttl":"5s"}`, err: `kubernetes.ttl: "5s" is not a duration of a minute or more`},
		{name: "own label", in: `{"image":"a","labels":{"amelia.profile":"x"}}`, err: `kubernetes.labels."amelia.profile": keys starting with amelia. are Amelia's own`},
		{name: "bad label value", in: `{"image":"a","labels":{"team":"a b"}}`, err: `kubernetes.labels.team: "a b" is not a label value`},
		{name: "bad toleration", in: `{"image":"a","tolerations":[{"key":"k","operator":"Exists","value":"v"}]}`, err: "kubernetes.tolerations[0].value: must be empty when operator is Exists"},
		{name: "toleration seconds without NoExecute", in: `{"image":"a","tolerations":[{"key":"k","toleration_seconds":3}]}`, err: "kubernetes.tolerations[0].toleration_seconds: only goes with effect NoExecute"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeSettings(json.RawMessage(tt.in))
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("decodeSettings(%s): %v", tt.in, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, sdk.ErrInvalid)):
				t.Errorf("decodeSettings(%s): %v, want ErrInvalid with %q", tt.in, err, tt.err)
			}
		})
	}
}

func TestDecodedValues(t *testing.T) {
	c, err := decodeSettings(json.RawMessage(`{"image":"a","resources":{"limits":{"memory":"4Gi"}},"tolerations":[{"key":"k","value":"v"}],"ttl":"90m"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.resources.Limits.Memory().Value(); got != 4<<30 {
		t.Errorf("memory limit %d", got)
	}
	if len(c.tolerations) != 1 || c.tolerations[0].Operator != corev1.TolerationOpEqual {
		t.Errorf("tolerations %+v, want one with operator Equal", c.tolerations)
	}
	if c.API != APIAuto || c.ttl != 90*time.Minute || c.startTimeout != defaultStartTimeout {
		t.Errorf("api %q, ttl %v, start timeout %v", c.API, c.ttl, c.startTimeout)
	}
}

// Every object name is a DNS label no other sandbox name has, and every
// label value is one Kubernetes takes.
func TestNames(t *testing.T) {
	long := strings.Repeat("a", 63)
	names := []string{"dev", "a_b", "a-b", "ends-", "ends_", long, long[:62] + "b", "x"}
	seen := map[string]string{}
	for _, n := range names {
		o := objectName(n)
		if errs := validation.IsDNS1123Label(o); len(errs) > 0 {
			t.Errorf("objectName(%q) = %q: %v", n, o, errs)
		}
		if other, ok := seen[o]; ok {
			t.Errorf("objectName(%q) = objectName(%q) = %q", n, other, o)
		}
		seen[o] = n
	}
	if got := objectName("dev"); got != "amelia-dev" {
		t.Errorf("objectName(dev) = %q, want amelia-dev", got)
	}
	for _, v := range []string{"dev", "2026-11-28T19:55:42Z", "/home/u/.config/amelia/config.yaml", long + "b", "ends_", "sha256.x", ""} {
		l := labelValue(v)
		if errs := validation.IsValidLabelValue(l); len(errs) > 0 {
			t.Errorf("labelValue(%q) = %q: %v", v, l, errs)
		}
		if l != labelValue(v) {
			t.Errorf("labelValue(%q) is not stable", v)
		}
	}
	if labelValue("dev") != "dev" || labelValue("a:b") == "a:b" || labelValue("sha256.x") == "sha256.x" {
		t.Errorf("values that fit are kept as they are, others hashed: %q %q %q", labelValue("dev"), labelValue("a:b"), labelValue("sha256.x"))
	}
}

// The labels an object gets, read back from it, are the spec's; a
// selector for them matches the object.
func TestLabelsRoundTrip(t *testing.T) {
	c, _ := decodeSettings(json.RawMessage(`{"image":"a","labels":{"team":"x"}}`))
	spec := map[string]string{"amelia.profile": "dev", "amelia.created": "2026-11-28T19:55:42Z", "amelia.config": "/etc/a b.yaml"}
	l, a := metadata(c, "dev_1", spec)
	if got := specLabels(a); len(got) != len(spec) || got["amelia.created"] != spec["amelia.created"] {
		t.Errorf("labels read back %v, want %v", got, spec)
	}
	if l["team"] != "x" || a[labelSandbox] != "dev_1" {
		t.Errorf("labels %v annotations %v", l, a)
	}
	for _, want := range []map[string]string{{}, {"amelia.created": spec["amelia.created"]}, spec} {
		if s := selector(want); !s.Matches(labelSet(l)) {
			t.Errorf("selector %s does not match %v", s, l)
		}
	}
	if !sandboxSelector("dev_1").Matches(labelSet(l)) || sandboxSelector("dev-1").Matches(labelSet(l)) {
		t.Errorf("sandbox selector of dev_1 vs labels %v", l)
	}
}

type labelSet map[string]string

func (s labelSet) Has(k string) bool              { _, ok := s[k]; return ok }
func (s labelSet) Get(k string) string            { return s[k] }
func (s labelSet) Lookup(k string) (string, bool) { v, ok := s[k]; return v, ok }

// The pod is a sandbox: nothing of the node's, no token, no root, no
// capabilities.
func TestPodSpecIsLockedDown(t *testing.T) {
	c, _ := decodeSettings(json.RawMessage(`{"image":"a","runtime_class_name":"gvisor"}`))
	s := podSpec(c, "dev")
	ct := s.Containers[0]
	sc := ct.SecurityContext
	switch {
	case s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken:
		t.Error("the service-account token is mounted")
	case s.HostNetwork || s.HostPID || s.HostIPC:
		t.Error("a host namespace is shared")
	case s.SecurityContext.RunAsNonRoot == nil || !*s.SecurityContext.RunAsNonRoot || *s.SecurityContext.RunAsUser == 0:
		t.Error("may run as root")
	case s.SecurityContext.SeccompProfile == nil || s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("no RuntimeDefault seccomp profile")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL":
		t.Error("privileges left")
	case ct.Command[0] != "tini":
		t.Error("PID 1 does not reap zombies")
	case s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor":
		t.Error("runtime class not set")
	}
	for _, v := range s.Volumes {
		if v.HostPath != nil || v.EmptyDir == nil {
			t.Errorf("volume %s is not an emptyDir", v.Name)
		}
	}
}

// The kubernetes block of configs/kubernetes.yaml is one the provider
// accepts.
func TestConfigExample(t *testing.T) {
	cfg, err := ameliaconfig.Load(ameliaconfig.Options{
		Path:      filepath.Join("..", "..", "configs", "kubernetes.yaml"),
		LookupEnv: func(string) (string, bool) { return "", false },
		HomeDir:   "/home/u",
	})
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Profiles["kubernetes"]
	if p == nil || p.Sandbox.Provider != Name {
		t.Fatal("configs/kubernetes.yaml has no kubernetes profile")
	}
	b, _ := json.Marshal(p.Sandbox.ProviderSettings())
	if _, err := decodeSettings(b); err != nil {
		t.Fatalf("its kubernetes settings: %v", err)
	}
}
