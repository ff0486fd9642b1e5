// Package sandbox is a profile's sandbox as the host sees it: the profile's
// provider (a plugin started through the plugin host, or any sdk.Provider),
// and the sandbox it names.
// It checks the profile against what the provider can enforce before
// anything starts (fail closed).
package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Labels every sandbox is created with, where its provider keeps labels:
// they let `amelia sandbox ls` and `amelia stop` find sandboxes that a crash
// or a removed profile left behind. Never secrets.
const (
	LabelProfile = "amelia.profile" // the profile's name
	LabelConfig  = "amelia.config"  // the config file it is in (ConfigLabel)
	LabelOwner   = "amelia.owner"   // the host that created it (Owner)
	LabelCreated = "amelia.created" // when, RFC 3339 UTC
)

// ConfigLabel is the amelia.config label of a profile: its config file
// (absolute), or for the built-in default "built-in:" and the default file
// it stands in for (plain "built-in" without one; sandboxes of older
// versions carry that whatever the file), so that two homes' built-in
// defaults are two configs.
func ConfigLabel(p *config.Profile) string {
	file, label := p.Source(), ""
	if file == "" {
		file, label = p.DefaultFile(), LegacyBuiltin+":"
		if file == "" {
			return LegacyBuiltin
		}
	}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	return label + file
}

// LegacyBuiltin is the amelia.config label of the sandboxes that versions
// before sandbox names had a digest made from the built-in default.
const LegacyBuiltin = "built-in"

// nameDigest is how many hex digits of digest a sandbox's name ends with.
const nameDigest = 8

// Name is the name of the sandbox of profile p that owner (a host, see
// Owner) makes: the profile's name, a dash and 8 hex digits of a digest of
// the owner, the config file (see ConfigLabel) and the profile, as in
// dev-1a2b3c4d. So the sandboxes of profiles of the same name in two
// config files, or of two hosts sharing a Docker engine or an SSH
// machine, never share a name, and a command of one config never
// addresses another's. A profile name too long for a sandbox name
// (sdk.ValidName) is cut short: the digest, which covers it whole, tells
// the two apart.
func Name(p *config.Profile, owner string) string {
	sum := sha256.Sum256([]byte(owner + "\x00" + ConfigLabel(p) + "\x00" + p.Name))
	prefix := p.Name
	if most := 63 - 1 - nameDigest; len(prefix) > most {
		prefix = prefix[:most]
	}
	return prefix + "-" + hex.EncodeToString(sum[:nameDigest/2])
}

// Owner is this host's value of the amelia.owner label: its hostname.
func Owner() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "unknown-host"
}

// Sandbox is a profile's sandbox behind its provider: a plugin (Open), or
// any sdk.Provider (New). Close stops the provider (not the sandbox).
type Sandbox struct {
	Profile  *config.Profile
	Provider sdk.Provider
	Info     sdk.Info
	Ref      sdk.SandboxRef

	logger  *slog.Logger
	owner   string
	checked bool // Check passed: Up need not ask the provider again
	// owned: the provider listed the sandbox Ref names with this host's
	// and this config file's labels, or made it for Up; see checkOwned.
	owned bool
	// lastSetup is what the last Up did about the profile's setup.
	lastSetup setupOutcome
}

// Opener starts the provider of a profile and returns its sandbox, not
// started yet (see Up). Plugins is the one amelia uses; tests and programs
// that embed a provider give their own, with New.
type Opener interface {
	Open(ctx context.Context, p *config.Profile, logger *slog.Logger) (*Sandbox, error)
}

// Plugins opens each profile's provider as a plugin, through host.
func Plugins(host *pluginhost.Host) Opener { return plugins{host} }

type plugins struct{ host *pluginhost.Host }

func (o plugins) Open(ctx context.Context, p *config.Profile, logger *slog.Logger) (*Sandbox, error) {
	pl, err := o.host.Open(p.Sandbox.Provider, PluginProfile(p))
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, err)
	}
	sb, err := New(ctx, p, pl, logger)
	if err != nil {
		pl.Close()
		return nil, err
	}
	return sb, nil
}

// Open starts the profile's provider plugin through host.
func Open(ctx context.Context, host *pluginhost.Host, p *config.Profile, logger *slog.Logger) (*Sandbox, error) {
	return Plugins(host).Open(ctx, p, logger)
}

// New is profile p's sandbox behind prov, which it asks to describe
// itself. Close calls prov's Close when it has one (a plugin's ends its
// process).
func New(ctx context.Context, p *config.Profile, prov sdk.Provider, logger *slog.Logger) (*Sandbox, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	settings, err := Settings(p)
	if err != nil {
		return nil, err
	}
	info, err := prov.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("profile %s: describe provider %s: %w", p.Name, p.Sandbox.Provider, err)
	}
	owner := Owner()
	return &Sandbox{
		Profile:  p,
		Provider: prov,
		Info:     info,
		Ref:      sdk.SandboxRef{Name: Name(p, owner), Config: settings},
		logger:   logger,
		owner:    owner,
	}, nil
}

// Settings is profile p's settings block for its provider, as a provider
// gets it (SandboxRef.Config): JSON, or nil for none.
func Settings(p *config.Profile) (json.RawMessage, error) {
	settings, err := json.Marshal(p.Sandbox.ProviderSettings())
	if err != nil {
		return nil, fmt.Errorf("profile %s: encode %s settings: %w", p.Name, p.Sandbox.Provider, err)
	}
	if string(settings) == "null" {
		return nil, nil
	}
	return settings, nil
}

// PluginProfile is what profile p adds to its provider plugin's
// environment (sandbox.plugin_env, the provider's settings) and keeps out
// of it (the variables or values of its LLM keys and git token), and which
// plugin its runs share (sandbox.shared_plugin).
func PluginProfile(p *config.Profile) *pluginhost.Profile {
	const llmKey, gitToken = "the LLM key", "the git token"
	prof := &pluginhost.Profile{
		ID:        ConfigLabel(p) + "\x00" + p.Name,
		OwnPlugin: p.Sandbox.OwnPlugin,
		Settings:  p.Sandbox.ProviderSettings(),
		Grant:     p.Sandbox.PluginEnv,
	}
	add := func(key, envName, literal, what string) {
		switch {
		case envName != "":
			prof.Secrets = append(prof.Secrets, pluginhost.Secret{Key: key + "_env", Var: envName, What: what})
		case literal != "":
			prof.Secrets = append(prof.Secrets, pluginhost.Secret{Key: key, Value: literal, What: what})
		}
	}
	add("llm.api_key", p.LLM.APIKeyEnv, p.LLM.APIKey, llmKey)
	if a := p.LLM.Anthropic; a != nil {
		add("llm.anthropic.api_key", a.APIKeyEnv, a.APIKey, llmKey)
	}
	if g := p.LLM.Gemini; g != nil {
		add("llm.gemini.api_key", g.APIKeyEnv, g.APIKey, llmKey)
	}
	add("git.token", p.Git.TokenEnv, p.Git.Token, gitToken)
	return prof
}

// Close stops the provider: a plugin's process ends.
func (s *Sandbox) Close() { CloseProvider(s.Provider) }

// CloseProvider stops p, when it has a Close: a plugin's process ends, a
// provider in this process lets its connections go.
func CloseProvider(p sdk.Provider) {
	switch c := p.(type) {
	case interface{ Close() }:
		c.Close()
	case interface{ Close() error }:
		c.Close()
	}
}

// ProviderExited reports whether the provider has ended: a plugin whose
// process is gone. A provider in this process never ends on its own.
func (s *Sandbox) ProviderExited() bool {
	e, ok := s.Provider.(interface{ Exited() bool })
	return ok && e.Exited()
}

// Spec is what the sandbox is started with.
func (s *Sandbox) Spec() sdk.Spec {
	return sdk.Spec{
		SandboxRef: s.Ref,
		Network: sdk.NetworkPolicy{
			Mode:         s.Profile.Sandbox.Network,
			AllowedHosts: s.Profile.Sandbox.AllowedHosts,
		},
		Labels: map[string]string{
			LabelProfile: s.Profile.Name,
			LabelConfig:  ConfigLabel(s.Profile),
			LabelOwner:   s.owner,
			LabelCreated: time.Now().UTC().Format(time.RFC3339),
		},
		Setup: s.SetupCommands(),
		Lifetime: sdk.Lifetime{
			IdleTimeout: offIsNegative(s.Profile.Sandbox.Idle()),
			MaxLifetime: offIsNegative(s.Profile.Sandbox.Lifetime()),
		},
	}
}

// offIsNegative is a bound of the profile's as sdk.Lifetime has it: off
// (0) is negative there, where 0 is not said.
func offIsNegative(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// Owned lists the sandboxes this host created from the profile's config
// file, in the place the profile's provider settings say (a local root, a
// Docker engine...), this profile's own included; sandboxes of other hosts
// or other config files are not its business. A provider that cannot list
// gives an error matching sdk.ErrUnsupported.
func (s *Sandbox) Owned(ctx context.Context) ([]sdk.Listed, error) {
	return s.labelled(ctx, ConfigLabel(s.Profile))
}

// labelled lists the sandboxes this host created from config (a label).
func (s *Sandbox) labelled(ctx context.Context, config string) ([]sdk.Listed, error) {
	labels := map[string]string{LabelOwner: s.owner, LabelConfig: config}
	l, ok := s.Provider.(sdk.Lister)
	if !ok {
		return nil, fmt.Errorf("list the sandboxes of provider %s: %w", s.Info.Name, sdk.ErrUnsupported)
	}
	found, err := l.List(ctx, sdk.ListRequest{Config: s.Ref.Config, Labels: labels})
	if err != nil {
		return nil, fmt.Errorf("list the sandboxes of provider %s: %w", s.Info.Name, err)
	}
	return found, nil
}

// Other is the sandbox ref names, through the same plugin: a listed one,
// or a run's recorded one. Up, Health and Down check that it is this
// config file's before they act on it (see ErrNotOwned), unless a sweep
// found it so. Close it only once, on the original.
func (s *Sandbox) Other(ref sdk.SandboxRef) *Sandbox {
	o := *s
	o.Ref, o.checked, o.owned = ref, false, false
	return &o
}

// ErrNotOwned matches the error of Up, Health and Down on a sandbox that
// exists, is not the profile's own (see Name), and that the provider does
// not list as one this host made from the profile's config file (see
// Owned): another config file's, another host's, or one Amelia did not
// make, reached by a name from elsewhere (a run's record). They leave it
// as it is. Exec acts on the sandbox Up, Health or a Sweep found.
var ErrNotOwned = errors.New("not a sandbox of this config file")

// checkOwned is nil when the sandbox Ref names is this config's: the
// profile's own, whose name (see Name) holds the digest of this host and
// this config file, or one Owned lists (where the provider cannot list,
// it cannot tell, and takes it to be). It is an error matching
// ErrNotOwned for another name that Owned does not list (absent, or not
// this config's), any other when the provider failed to list. Names are
// trusted rather than listed for the profile's own because a provider's
// list may lag behind (Daytona's does): a sandbox just made may not be
// listed yet. A sandbox named for the profile alone (by a version before
// Name), from the built-in default, is this config's when it carries
// LegacyBuiltin: those versions could not tell two homes apart.
func (s *Sandbox) checkOwned(ctx context.Context) error {
	if s.owned || s.Ref.Name == Name(s.Profile, s.owner) {
		return nil
	}
	found, err := s.Owned(ctx)
	if errors.Is(err, sdk.ErrUnsupported) {
		return nil
	}
	if err != nil {
		return err
	}
	if s.Ref.Name == s.Profile.Name && strings.HasPrefix(ConfigLabel(s.Profile), LegacyBuiltin+":") {
		if legacy, err := s.labelled(ctx, LegacyBuiltin); err == nil {
			found = append(found, legacy...)
		}
	}
	for _, l := range found {
		if l.Ref.Name == s.Ref.Name {
			s.owned = true
			return nil
		}
	}
	return fmt.Errorf("sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, ErrNotOwned)
}

// notOwned is the error of acting on sandbox s, which exists and is not
// this config file's.
func (s *Sandbox) notOwned() error {
	return fmt.Errorf("sandbox %s (provider %s) exists, and is %w (the provider does not list it with %s=%s and %s=%s): amelia leaves it alone; act on it with the config file that made it",
		s.Ref.Name, s.Info.Name, ErrNotOwned, LabelConfig, ConfigLabel(s.Profile), LabelOwner, s.owner)
}

// ErrSettingsUnchecked matches the error of Problems when the provider
// cannot check its settings (it has no ValidateSettings): they are then
// checked only when its sandbox starts.
var ErrSettingsUnchecked = errors.New("cannot check its settings before its sandbox starts")

// Problems are what the provider can tell is wrong with the profile
// before anything starts, as problems of the config file: a network
// policy it cannot enforce (profiles.NAME.sandbox.network), and what its
// ValidateSettings finds in its settings block and the policy (each at
// its key, profiles.NAME.sandbox.docker.resources.memory). A provider
// that cannot check its settings gives the problems found without it and
// an error matching ErrSettingsUnchecked; any other error means the check
// failed.
func (s *Sandbox) Problems(ctx context.Context) ([]config.Problem, error) {
	var problems []config.Problem
	p := s.Profile
	mode := p.Sandbox.Network
	if !s.Info.Supports(mode) {
		can := make([]string, len(s.Info.EgressModes))
		for i, m := range s.Info.EgressModes {
			can[i] = string(m)
		}
		problems = append(problems, p.ProblemAt("sandbox.network", fmt.Sprintf("provider %s cannot enforce %q (it can enforce: %s); pick another provider or network mode",
			s.Info.Name, mode, strings.Join(can, ", "))))
	}
	v, ok := s.Provider.(sdk.SettingsValidator)
	if !ok {
		return problems, fmt.Errorf("provider %s %w", s.Info.Name, ErrSettingsUnchecked)
	}
	found, err := v.ValidateSettings(ctx, sdk.ValidateRequest{Config: s.Ref.Config, Network: s.Spec().Network})
	switch {
	case errors.Is(err, sdk.ErrUnsupported):
		return problems, fmt.Errorf("provider %s %w", s.Info.Name, ErrSettingsUnchecked)
	case err != nil:
		return problems, fmt.Errorf("check the settings of provider %s: %w", s.Info.Name, err)
	}
	for _, f := range found {
		key := p.SettingsKey()
		if f.Key != "" {
			key += "." + f.Key
		}
		problems = append(problems, p.ProblemAt(key, f.Message))
	}
	return problems, nil
}

// Check refuses a profile whose problems (see Problems) its provider can
// tell before anything starts, with a *config.ValidationError naming the
// file and every problem. A provider that cannot check its settings is
// left to refuse them when its sandbox starts.
func (s *Sandbox) Check(ctx context.Context) error {
	problems, err := s.Problems(ctx)
	if err != nil && !errors.Is(err, ErrSettingsUnchecked) {
		return err
	}
	if len(problems) > 0 {
		return &config.ValidationError{File: s.Profile.Source(), Problems: problems}
	}
	s.checked = true
	return nil
}

// Up starts the sandbox or reuses it, after the checks of Check (once:
// a sandbox Check passed is not checked again). Using an unisolated
// provider is logged as a warning.
func (s *Sandbox) Up(ctx context.Context) (sdk.Sandbox, error) {
	if !s.checked {
		if err := s.Check(ctx); err != nil {
			return sdk.Sandbox{}, err
		}
	}
	if !s.Info.Isolated {
		s.logger.Warn(fmt.Sprintf("provider %s isolates nothing: commands run directly on this machine as the current user", s.Info.Name))
	}
	// A sandbox of that name that is not this config's is not reused.
	absent := false
	if err := s.checkOwned(ctx); errors.Is(err, ErrNotOwned) {
		if err := s.mustBeAbsent(ctx); err != nil {
			return sdk.Sandbox{}, err
		}
		absent = true
	} else if err != nil {
		return sdk.Sandbox{}, fmt.Errorf("start sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	sb, err := s.Provider.EnsureRunning(ctx, s.Spec())
	if err != nil {
		return sdk.Sandbox{}, fmt.Errorf("start sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	if absent && !sb.Created {
		// Made meanwhile: by another run of this config, or not.
		if err := s.checkOwned(ctx); errors.Is(err, ErrNotOwned) {
			return sdk.Sandbox{}, s.notOwned()
		} else if err != nil {
			return sdk.Sandbox{}, fmt.Errorf("start sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
		}
	}
	s.Ref, s.owned = sb.Ref, true
	if err := s.setUp(ctx, sb); err != nil {
		return sdk.Sandbox{}, err
	}
	return sb, nil
}

// mustBeAbsent is nil when the sandbox that checkOwned did not find is
// not there at all, and the error of notOwned when it is.
func (s *Sandbox) mustBeAbsent(ctx context.Context) error {
	_, err := s.Provider.HealthCheck(ctx, s.Ref)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("check sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	return s.notOwned()
}

// Preflight asks the provider, without creating or changing anything,
// why Up would fail now (sdk.Preflighter); a provider that cannot tell
// gives an error matching sdk.ErrUnsupported.
func (s *Sandbox) Preflight(ctx context.Context) error {
	p, ok := s.Provider.(sdk.Preflighter)
	if !ok {
		return fmt.Errorf("provider %s: %w", s.Info.Name, sdk.ErrUnsupported)
	}
	if err := p.Preflight(ctx, s.Spec()); err != nil {
		return fmt.Errorf("sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	return nil
}

// SandboxRef is the sandbox Exec runs in: s is an sandboxexec.Execer.
func (s *Sandbox) SandboxRef() sdk.SandboxRef { return s.Ref }

// Exec runs req in the sandbox.
func (s *Sandbox) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	req.Sandbox = s.Ref
	st, err := s.Provider.Exec(ctx, req, eio)
	if err != nil {
		return st, fmt.Errorf("exec in sandbox %s: %w", s.Ref.Name, err)
	}
	return st, nil
}

// Down tears the sandbox down; a sandbox that is not there is fine, one
// that is not this config file's (ErrNotOwned) is refused.
func (s *Sandbox) Down(ctx context.Context) error {
	if err := s.checkOwned(ctx); errors.Is(err, ErrNotOwned) {
		return s.mustBeAbsent(ctx) // nothing to remove, or not ours to
	} else if err != nil {
		return fmt.Errorf("tear down sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	if err := s.Provider.Teardown(ctx, s.Ref); err != nil {
		return fmt.Errorf("tear down sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	return nil
}

// Health reports on the sandbox; a missing one matches sdk.ErrNotFound,
// one that is not this config file's ErrNotOwned.
func (s *Sandbox) Health(ctx context.Context) (sdk.Health, error) {
	h, err := s.Provider.HealthCheck(ctx, s.Ref)
	if err != nil {
		return sdk.Health{}, fmt.Errorf("check sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	if err := s.checkOwned(ctx); errors.Is(err, ErrNotOwned) {
		return sdk.Health{}, s.notOwned()
	} else if err != nil {
		return sdk.Health{}, fmt.Errorf("check sandbox %s (provider %s): %w", s.Ref.Name, s.Info.Name, err)
	}
	return h, nil
}
