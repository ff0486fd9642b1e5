package daytona

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

// Settings is a profile's `sandbox.daytona` block.
type Settings struct {
	// APIURL is Daytona's API (default https://app.daytona.io/api).
	APIURL string `json:"api_url"`
	// APIKeyEnv names the host variable holding the API key (default
	// DAYTONA_API_KEY). The key stays on the host.
	APIKeyEnv string `json:"api_key_env"`
	// OrganizationID is sent as X-Daytona-Organization-ID when set.
	OrganizationID string `json:"organization_id"`
	// Target is the region sandboxes are created in (default: the
	// organisation's).
	Target string `json:"target"`
	// Snapshot is the snapshot sandboxes start from; Image, an image that
	// Daytona builds them from instead ("FROM <image>"). At most one.
	Snapshot string `json:"snapshot"`
	Image    string `json:"image"`
	// CPU (cores), Memory and Disk (GB) size a sandbox built from Image or
	// the default snapshot; a snapshot fixes its own.
	CPU    int `json:"cpu"`
	Memory int `json:"memory"`
	Disk   int `json:"disk"`
	// AutoStopInterval stops an idle sandbox after that many minutes (0
	// never; default Daytona's, 15).
	AutoStopInterval *int `json:"auto_stop_interval"`
	// OnTeardown is delete (default) or stop: what `amelia sandbox down`
	// and a run's cleanup do to the sandbox.
	OnTeardown string `json:"on_teardown"`
	// StartTimeout bounds waiting for a sandbox to start (a duration;
	// default 10m, as building an image can take that long).
	StartTimeout string `json:"start_timeout"`
	// SSHTokenMinutes is how long each SSH gateway token lives (default
	// 60); tokens are renewed before they expire.
	SSHTokenMinutes int `json:"ssh_token_minutes"`
	// KnownHosts holds the SSH gateway's host key (default
	// ~/.ssh/known_hosts); HostKeyPolicy is accept-new (default: recorded
	// on first use, a changed key refused) or strict.
	KnownHosts    string `json:"known_hosts"`
	HostKeyPolicy string `json:"host_key_policy"`
	// Env is set in the sandbox at creation; never a secret.
	Env map[string]string `json:"env"`
	// Labels are added to the sandbox's (keys starting amelia. are
	// Amelia's).
	Labels map[string]string `json:"labels"`
}

// Teardown actions.
const (
	TeardownDelete = "delete"
	TeardownStop   = "stop"
)

const (
	defaultKeyEnv       = "DAYTONA_API_KEY"
	defaultStartTimeout = 10 * time.Minute
	defaultTokenMinutes = 60
)

var (
	envNameRule  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	labelKeyRule = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)
	refRule      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$`)
	orgRule      = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
	// secretName matches variable names that hold secrets, which env
	// must not carry into a sandbox.
	secretName = regexp.MustCompile(`(?i)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)`)
)

func invalid(key, format string, args ...any) error {
	return sdk.InvalidSetting(Name, key, format, args...)
}

// ValidateSettings checks a profile's daytona block, without the API (or
// its key, which the environment holds). Every network mode is enforced
// whatever the settings (networkBlockAll), so the policy needs no check.
func (p *Provider) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	s, _, err := decodeSettings(req.Config)
	if err == nil {
		_, err = s.knownHostsFile()
	}
	return sdk.SettingsProblems(err)
}

// decodeSettings reads a settings block; unknown keys are errors.
func decodeSettings(raw json.RawMessage) (Settings, time.Duration, error) {
	var s Settings
	if err := sdk.DecodeSettings(raw, Name, &s); err != nil {
		return s, 0, err
	}
	if s.APIURL == "" {
		s.APIURL = api.DefaultURL
	}
	if s.APIKeyEnv == "" {
		s.APIKeyEnv = defaultKeyEnv
	}
	if !envNameRule.MatchString(s.APIKeyEnv) {
		return s, 0, invalid("api_key_env", "%q is not an environment variable name", s.APIKeyEnv)
	}
	if s.OrganizationID != "" && !orgRule.MatchString(s.OrganizationID) {
		return s, 0, invalid("organization_id", "%q is not an organization id", s.OrganizationID)
	}
	for key, v := range map[string]string{"snapshot": s.Snapshot, "image": s.Image, "target": s.Target} {
		if v != "" && !refRule.MatchString(v) {
			return s, 0, invalid(key, "%q is not a valid name", v)
		}
	}
	if s.Snapshot != "" && s.Image != "" {
		return s, 0, invalid("image", "set snapshot or image, not both")
	}
	if s.Snapshot != "" && (s.CPU != 0 || s.Memory != 0 || s.Disk != 0) {
		return s, 0, invalid("snapshot", "a snapshot fixes cpu, memory and disk (Daytona refuses both): drop cpu/memory/disk, or use image instead of snapshot")
	}
	for key, v := range map[string]int{"cpu": s.CPU, "memory": s.Memory, "disk": s.Disk, "ssh_token_minutes": s.SSHTokenMinutes} {
		if v < 0 {
			return s, 0, invalid(key, "%d is negative", v)
		}
	}
	if s.AutoStopInterval != nil && *s.AutoStopInterval < 0 {
		return s, 0, invalid("auto_stop_interval", "%d is negative (0 never stops the sandbox)", *s.AutoStopInterval)
	}
	switch s.OnTeardown {
	case "":
		s.OnTeardown = TeardownDelete
	case TeardownDelete, TeardownStop:
	default:
		return s, 0, invalid("on_teardown", "%q is not delete or stop", s.OnTeardown)
	}
	timeout := defaultStartTimeout
	if s.StartTimeout != "" {
		d, err := time.ParseDuration(s.StartTimeout)
		if err != nil || d <= 0 {
			return s, 0, invalid("start_timeout", "%q is not a duration like 5m", s.StartTimeout)
		}
		timeout = d
	}
	if s.SSHTokenMinutes == 0 {
		s.SSHTokenMinutes = defaultTokenMinutes
	}
	switch s.HostKeyPolicy {
	case "":
		s.HostKeyPolicy = string(sshtransport.AcceptNew)
	case string(sshtransport.Strict), string(sshtransport.AcceptNew):
	default:
		return s, 0, invalid("host_key_policy", "%q is not accept-new or strict (host keys are always checked)", s.HostKeyPolicy)
	}
	for k, v := range s.Env {
		switch {
		case !envNameRule.MatchString(k):
			return s, 0, invalid(sdk.JoinKey("env", k), "is not an environment variable name")
		case secretName.MatchString(k):
			return s, 0, invalid(sdk.JoinKey("env", k), "looks like a secret, and secrets never enter a sandbox: the LLM key and git token reach the sandbox only through Amelia's proxy")
		case strings.ContainsRune(v, 0):
			return s, 0, invalid(sdk.JoinKey("env", k), "the value holds a NUL byte")
		}
	}
	for k := range s.Labels {
		if !labelKeyRule.MatchString(k) {
			return s, 0, invalid(sdk.JoinKey("labels", k), "is not a label key")
		}
		if strings.HasPrefix(k, "amelia.") {
			return s, 0, invalid(sdk.JoinKey("labels", k), "keys starting with amelia. are Amelia's own")
		}
	}
	return s, timeout, nil
}

// knownHostsFile is the known_hosts file the settings name, ~ expanded.
func (s Settings) knownHostsFile() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("daytona: find the home directory: %w", err)
	}
	switch f := s.KnownHosts; {
	case f == "":
		return filepath.Join(home, ".ssh", "known_hosts"), nil
	case strings.HasPrefix(f, "~/"):
		return filepath.Join(home, f[2:]), nil
	case filepath.IsAbs(f):
		return f, nil
	default:
		return "", invalid("known_hosts", "%q must be an absolute path or start with ~/", f)
	}
}

// apiKey reads the API key from the variable the settings name.
func (s Settings) apiKey(getenv func(string) string) (string, error) {
	key := getenv(s.APIKeyEnv)
	if key == "" {
		return "", sdk.Errorf(sdk.ErrInvalid, "daytona: $%s is empty: set it to a Daytona API key (Dashboard → Keys), or name another variable with daytona.api_key_env", s.APIKeyEnv)
	}
	return key, nil
}
