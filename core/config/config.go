// Package config loads Amelia's profiles: a YAML file (by default
// ~/.config/amelia/config.yaml) read with koanf, overridden by AMELIA_*
// environment variables, with ${VAR} interpolation, and validated so that
// every problem is reported with the file, the key and the allowed values.
//
// A profile selects where the agent runs (the sandbox provider and its
// settings), the model and LLM upstream, the credentials the host-side
// proxy hands out, and the network policy:
//
//	default_profile: dev
//	profiles:
//	  dev:
//	    model: gpt-4.1-mini
//	    llm: {base_url: https://api.openai.com/v1, api_key_env: OPENAI_API_KEY, timeout: 10m}
//	    git: {token_env: GITHUB_TOKEN}
//	    proxy: {max_request_bytes: 10MiB}
//	    sandbox:
//	      provider: docker
//	      network: allowlist
//	      allowed_hosts: [github.com, "*.pypi.org"]
//	      docker: {image: amelia-sandbox:latest}
//
// The variables that api_key_env and token_env name are not read at Load:
// the host reads them when a run starts (Profile.LLMKey, AnthropicKey,
// GeminiKey, GitToken), so a profile can be shown and validated without them.
//
// See configs/example.yaml for every key. Adding a key means adding a
// struct field and one entry in the schema tables in schema.go, which
// drive decoding, validation, defaults, unknown-key detection and ShowYAML.
package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/agents"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Defaults applied to profiles that do not set these keys.
const (
	DefaultModel     = "gpt-4.1-mini"
	DefaultBaseURL   = "https://api.openai.com/v1"
	DefaultAPIKeyEnv = "OPENAI_API_KEY"
	// DefaultLLMTimeout is llm.timeout: how long the proxy waits for an
	// upstream's response headers.
	DefaultLLMTimeout = 10 * time.Minute
	// DefaultAnthropicBaseURL and DefaultAnthropicKeyEnv apply inside an
	// llm.anthropic block.
	DefaultAnthropicBaseURL = "https://api.anthropic.com/v1"
	DefaultAnthropicKeyEnv  = "ANTHROPIC_API_KEY"
	// DefaultGeminiBaseURL and DefaultGeminiKeyEnv apply inside an
	// llm.gemini block: Google's Gemini API, whose paths (/v1beta/...)
	// the proxy's /gemini/* route appends to the base URL.
	DefaultGeminiBaseURL = "https://generativelanguage.googleapis.com"
	DefaultGeminiKeyEnv  = "GEMINI_API_KEY"
	// APIOpenAI and APIAnthropic are the values of llm.api: the wire
	// format the profile's upstream speaks.
	APIOpenAI    = "openai"
	APIAnthropic = "anthropic"
	// DefaultGitUsername is git.username, the username sent with a token
	// (GitHub's convention for tokens; GitLab and Gitea accept any).
	DefaultGitUsername = "x-access-token"
	// DefaultMaxRequestBytes is proxy.max_request_bytes: 10 MiB.
	DefaultMaxRequestBytes = 10 << 20
	// DefaultMaxTurns is max_turns: how many model calls a run's agent
	// may make.
	DefaultMaxTurns = 100
)

// DefaultRetention is retention: how long amelia gc leaves stale work.
const DefaultRetention = 14 * 24 * time.Hour

// MaxTurnsLimit is the largest max_turns (and amelia run --max-turns).
const MaxTurnsLimit = 10000

// Bounds of proxy.max_request_bytes.
const (
	minRequestBytes = 1 << 10 // 1 KiB
	maxRequestBytes = 1 << 30 // 1 GiB
)

// ProviderLocal is the provider that runs on the host itself; "none" is
// accepted as an alias and normalized to it.
const ProviderLocal = "local"

// Options says where to find the configuration. Nothing is read from the
// process environment except through these fields.
type Options struct {
	// Path is the file named by --config. "~/" is expanded with HomeDir.
	Path string
	// LookupEnv reads the environment (os.LookupEnv in production) for
	// AMELIA_CONFIG, XDG_CONFIG_HOME, ${VAR} interpolation and ShowYAML's
	// "is the key's variable set" comment. If nil, Environ is used.
	LookupEnv func(string) (string, bool)
	// Environ is the environment (os.Environ()) scanned for
	// AMELIA_DEFAULT_PROFILE and AMELIA_PROFILES__... overrides.
	Environ []string
	// HomeDir is the user's home directory, for "~" and the default path.
	HomeDir string
}

// Config is a loaded, validated configuration.
type Config struct {
	// Source is the file loaded, or "" for the built-in default.
	Source         string
	DefaultProfile string
	Profiles       map[string]*Profile

	hide *hiding
}

// Profile returns the named profile; "" means the default profile.
func (c *Config) Profile(name string) (*Profile, error) {
	if name == "" {
		name = c.DefaultProfile
	}
	if p, ok := c.Profiles[name]; ok {
		return p, nil
	}
	names := c.ProfileNames()
	if len(names) == 0 {
		return nil, fmt.Errorf("profile %q not found: %s defines no profiles", name, SourceName(c.Source))
	}
	return nil, fmt.Errorf("profile %q not found in %s (available: %s)", name, SourceName(c.Source), strings.Join(names, ", "))
}

// ProfileNames returns the profile names, sorted.
func (c *Config) ProfileNames() []string {
	names := make([]string, 0, len(c.Profiles))
	for n := range c.Profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Profile is one resolved profile: defaults filled, ${VAR}s expanded,
// environment overrides applied.
type Profile struct {
	Name  string
	Model string
	// MaxTurns bounds the model calls of a run's agent: from 1 to
	// MaxTurnsLimit, DefaultMaxTurns unless set.
	MaxTurns int
	// Retention is how long amelia gc leaves the profile's stale work
	// (kept checkouts, run records, logs, orphan sandboxes, caches)
	// before tidying it: DefaultRetention unless set.
	Retention time.Duration
	// CommitBuildOutputs lets well-known build and cache outputs
	// (workspace.BuildOutputs: __pycache__/, node_modules/...) onto a
	// run's branch; by default its checkout ignores them.
	CommitBuildOutputs bool
	// Agent is the agent a run has: the worker's own unless set.
	Agent   Agent
	LLM     LLM
	Git     Git
	Proxy   Proxy
	Sandbox Sandbox
	// MCP are the profile's MCP servers (mcp), sorted by name: the
	// host runs or reaches them, the sandbox reaches them through the
	// proxy.
	MCP []MCPServer

	source    string                      // file it came from, "" for the built-in default
	absent    string                      // for the built-in default: the default file, absent
	lookupEnv func(string) (string, bool) // for ShowYAML's "# set" comments; may be nil
	envKeys   map[string]string           // the overrides: lowercased key path → variable
	hide      *hiding                     // the values from ${VAR}s and overrides, of the whole config
}

// ProblemAt is a problem found in the profile once it is loaded (by its
// provider, checking its settings), as Load reports problems: key is a
// path inside the profile, as sdk.JoinKey writes paths ("sandbox.network",
// "sandbox.docker.resources.memory"; "" for the profile itself), and the
// problem's Key is its path from the top of the file
// ("profiles.dev.sandbox.network"); the message names the environment
// variables that set the value, if any did. Wherever message holds a
// value that came from a ${VAR} or an override, it is written as written
// (see Redact).
func (p *Profile) ProblemAt(key, message string) Problem {
	message = p.Redact(message)
	at := path{}.key("profiles").key(p.Name)
	rel, ok := parsePath(key)
	if !ok {
		// Not a path as written: shown as it is, with no variables.
		return Problem{Key: at.String() + "." + key, Message: message}
	}
	return problemAt(append(at, rel...), message, p.envKeys)
}

// SettingsKey is the path, inside the profile, of the settings block of
// its provider, as ProblemAt takes it: "sandbox.docker", or "sandbox.none"
// for the local provider's block written under its alias.
func (p *Profile) SettingsKey() string {
	block := p.Sandbox.Provider
	if _, ok := p.Sandbox.Settings[block]; !ok && block == ProviderLocal {
		if _, ok := p.Sandbox.Settings["none"]; ok {
			block = "none"
		}
	}
	return "sandbox." + block
}

// Source is the config file the profile came from, or "" for the built-in
// default.
func (p *Profile) Source() string { return p.source }

// DefaultFile is, for a profile of the built-in default, the config file
// it stands in for: the default path, where no file was found ("" when
// there is no home directory to look in, and for a profile of a file).
func (p *Profile) DefaultFile() string { return p.absent }

// WithProvider is a copy of p whose sandbox is provider's (amelia run
// --sandbox): the profile's block for that provider, if it has one, says
// where. The copy keeps p's name, so the sandbox it makes is p's.
func (p *Profile) WithProvider(provider string) *Profile {
	q := *p
	q.Sandbox.Provider = provider
	return &q
}

// LLM is the upstream the host-side proxy forwards model calls to. The key
// itself never enters the sandbox.
type LLM struct {
	// API is the wire format Upstream speaks: "" (unset) or APIOpenAI, or
	// APIAnthropic: with APIAnthropic, Upstream is the proxy's
	// /anthropic/v1/* route's, its defaults are Anthropic's URL and key
	// variable, and Anthropic is nil; the proxy translates chat
	// completions on /v1/* to it.
	API string
	// Upstream is the API of the proxy's /v1/* route (OpenAI-compatible),
	// or of its /anthropic/v1/* route when API is APIAnthropic.
	Upstream
	// Timeout is how long the proxy waits for an upstream's response
	// headers before answering 504; always > 0.
	Timeout time.Duration
	// Anthropic is the upstream of the proxy's /anthropic/v1/* route; nil
	// when the profile has no llm.anthropic block (the route is disabled).
	Anthropic *Upstream
	// Gemini is the upstream of the proxy's /gemini/* route (Google's
	// Gemini API, which the proxy does not translate); nil when the
	// profile has no llm.gemini block (the route is disabled).
	Gemini *Upstream
}

// Upstream is an LLM API and where its key comes from. At most one of
// APIKeyEnv and APIKey is set; with neither, there is no key (a keyless
// local server).
type Upstream struct {
	BaseURL   string
	APIKeyEnv string // name of the host environment variable holding the key
	APIKey    string // the key itself (usually written as ${VAR} in the file)
}

// WithAgent returns p with the agent name (and the API api) instead of
// its own; "" leaves either as it is.
func (p *Profile) WithAgent(name, api string) (*Profile, error) {
	if name == "" && api == "" {
		return p, nil
	}
	q := *p
	if name != "" && name != cmp.Or(p.Agent.Name, agents.Own) {
		q.Agent = Agent{Name: name}
		if name == agents.Own {
			q.Agent.Name = ""
		}
	}
	a, err := agents.Lookup(cmp.Or(q.Agent.Name, agents.Own))
	if err != nil {
		return nil, fmt.Errorf("--agent: %w", err)
	}
	if api != "" {
		if err := a.CheckAPI(api); err != nil {
			return nil, fmt.Errorf("--agent-api: %w", err)
		}
		q.Agent.API = api
	}
	return &q, nil
}

// Agent is the agent of a profile's runs (core/agents): `agent: NAME`,
// or a block with name, api and binary.
type Agent struct {
	// Name is the agent's; "" is the worker's own (agents.Own).
	Name string
	// API is the LLM API the agent speaks to the proxy; "" is the
	// agent's own (agents.Agent.API).
	API string
	// Binary is a host file the run uploads into the sandbox as the
	// agent's executable (an uploadable agent only); "" looks for the
	// agent on the host's PATH, then on the sandbox's.
	Binary string
}

// Git is where the proxy gets the credential it adds to the requests git
// in the sandbox makes through its git route (for the run's repositories
// only), never sending it in. At most one of TokenEnv and Token is set;
// with neither, the host's own credential store answers (git credential
// fill).
type Git struct {
	TokenEnv string // name of the host environment variable holding a token
	Token    string // the token itself (usually written as ${VAR} in the file)
	Username string // sent with the token; DefaultGitUsername unless set
}

// Proxy holds the host-side proxy's own settings for the profile's runs.
type Proxy struct {
	// AuditDir is where per-run audit logs go: an absolute, cleaned path
	// ("~/" already expanded), or "" for the caller's default
	// ($XDG_STATE_HOME/amelia/audit).
	AuditDir string
	// MaxRequestBytes is the largest request body the proxy forwards,
	// between 1 KiB and 1 GiB; DefaultMaxRequestBytes unless set.
	MaxRequestBytes int64
}

// networkModes lists the valid modes in the order they are documented.
func networkModes() []sdk.NetworkMode {
	return []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkAllowlist, sdk.NetworkNone}
}

// Sandbox selects the provider and its network policy.
type Sandbox struct {
	// Provider is local, docker, ssh, daytona, kubernetes or a plugin's name.
	Provider string
	Network  sdk.NetworkMode
	// AllowedHosts are lowercased hostnames, "*.domain" wildcards or IP
	// literals; they are enforced when Network is allowlist.
	AllowedHosts []string
	// EgressCheckTargets are the HOST:PORT addresses the egress check
	// tries to reach directly from inside the sandbox before a run with
	// network allowlist or none (lowercased); empty means the worker's
	// defaults, public resolvers over IPv4 and IPv6.
	EgressCheckTargets []string
	// PluginEnv are host environment variables the profile grants its
	// provider plugin, beyond the few every plugin gets and those its
	// provider declares (a third-party plugin's KUBECONFIG, say). Valid
	// names; the plugin host refuses the profile's key and token variables.
	PluginEnv []string
	// ConcurrentRuns lets runs of the profile share its sandbox at the
	// same time. Runs sharing a sandbox are not separated from each other
	// (same user: each can read the other's token and write its
	// worktree), so without it a run waits for no one: it is refused
	// while another holds the sandbox.
	ConcurrentRuns bool
	// OwnPlugin gives each of the profile's runs a provider plugin
	// process of its own (sandbox.shared_plugin: false) rather than one
	// that the profile's runs on this host share.
	OwnPlugin bool
	// ParkedCheckouts bounds the checkouts the sandbox keeps, once their
	// runs ended, for later workflows to reuse (where runs have uids of
	// their own: docker); 0 keeps none. Nil is the default,
	// DefaultParkedCheckouts.
	ParkedCheckouts *int
	// Setup are the commands that set the sandbox up once, before its
	// first run (sandbox.setup): their result is kept with the sandbox's
	// image or template, so later sandboxes start ready. In the form of a
	// devcontainer's postCreateCommand: a string (run by sh -c), an argv
	// (run as it is), or a map of those, run one after another in the
	// order of their names.
	Setup []SetupCommand
	// IdleTimeout stops the sandbox once no agent has run and no command
	// has been run in it for that long; MaxLifetime stops it that long
	// after it started, once no agent runs. Nil is the default
	// (DefaultIdleTimeout, DefaultMaxLifetime); 0 is off.
	IdleTimeout, MaxLifetime *time.Duration
	// Settings maps a provider name to its settings block, as written
	// (after ${VAR} expansion). Blocks for providers other than Provider
	// are kept so that overriding the provider keeps working.
	Settings map[string]map[string]any
}

// SetupCommand is one command of sandbox.setup.
type SetupCommand struct {
	// Name is its name in a map of commands; "" for the only one.
	Name string
	// Argv is the command; a string in the file is sh -c and it.
	Argv []string
}

// DefaultParkedCheckouts is Sandbox.ParkedCheckouts when a profile does
// not say.
const DefaultParkedCheckouts = 4

// The defaults of Sandbox.IdleTimeout and Sandbox.MaxLifetime.
const (
	DefaultIdleTimeout = 30 * time.Minute
	DefaultMaxLifetime = 24 * time.Hour
)

// MinLifetimeDuration is the shortest idle_timeout or max_lifetime.
const MinLifetimeDuration = time.Second

// Idle is how long the sandbox may stay idle before it stops
// (IdleTimeout, or its default); 0: it never stops for being idle.
func (s Sandbox) Idle() time.Duration {
	if s.IdleTimeout == nil {
		return DefaultIdleTimeout
	}
	return *s.IdleTimeout
}

// Lifetime is how long the sandbox may run before it stops, once no agent
// runs (MaxLifetime, or its default); 0: no bound.
func (s Sandbox) Lifetime() time.Duration {
	if s.MaxLifetime == nil {
		return DefaultMaxLifetime
	}
	return *s.MaxLifetime
}

// MaxParkedCheckouts bounds Sandbox.ParkedCheckouts.
const MaxParkedCheckouts = 64

// Parked is how many checkouts the sandbox keeps parked
// (ParkedCheckouts, or its default).
func (s Sandbox) Parked() int {
	if s.ParkedCheckouts == nil {
		return DefaultParkedCheckouts
	}
	return *s.ParkedCheckouts
}

// ProviderSettings returns the settings block of the selected provider, or
// nil if there is none. For the local provider a block named "none" (its
// alias) is accepted too.
func (s Sandbox) ProviderSettings() map[string]any {
	if m, ok := s.Settings[s.Provider]; ok {
		return m
	}
	if s.Provider == ProviderLocal {
		if m, ok := s.Settings["none"]; ok {
			return m
		}
	}
	return nil
}
