package config

import (
	"cmp"
	"net/url"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/amelia-sandbox/amelia/core/agents"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The schema: one table per section. To add a key, add a field to the
// struct and an entry here; decoding, defaults, unknown-key detection and
// ShowYAML (in table order, secrets masked by key name) follow from it.

// root is the top level of the file.
type root struct {
	defaultProfile string
	defaultShown   string // default_profile as written, for messages
	defaultSet     bool
	profiles       map[string]*Profile
	names          []string // every profile name, valid or not, sorted
	profilesBad    bool
}

func rootSection() section[root] {
	return section[root]{
		fields: []field[root]{
			{
				key: "default_profile",
				decode: func(d *decoder, at path, v any, r *root) {
					if v == nil {
						return
					}
					if s, ok := d.str(at, v); ok && s.val != "" {
						r.defaultProfile, r.defaultShown, r.defaultSet = s.val, s.quote(), true
					}
				},
			},
			{
				key: "profiles",
				decode: func(d *decoder, at path, v any, r *root) {
					m, ok := d.mapping(at, v)
					if !ok {
						r.profilesBad = true
						return
					}
					r.profiles = make(map[string]*Profile, len(m))
					for _, name := range sortedKeys(m) {
						pat := at.key(name)
						r.names = append(r.names, name)
						if !sdk.ValidName(name) {
							d.problemf(pat, "invalid profile name: profile names become sandbox names, so use %s", nameRule)
						}
						p := &Profile{Name: name}
						if decodeSection(d, pat, m[name], profileSection(), p) {
							r.profiles[name] = p
						}
					}
				},
			},
		},
		check: func(d *decoder, at path, _ map[string]bool, r *root) {
			if r.profilesBad {
				return
			}
			dp := at.key("default_profile")
			if len(r.names) == 0 {
				d.problemf(at.key("profiles"), "no profiles defined")
				return
			}
			list := strings.Join(r.names, ", ")
			switch {
			case r.defaultSet:
				if !slices.Contains(r.names, r.defaultProfile) {
					d.problemf(dp, "%s is not a profile (profiles: %s)", r.defaultShown, list)
				}
			case d.failed(dp):
			case len(r.names) == 1:
				r.defaultProfile = r.names[0]
			default:
				d.problemf(dp, "required when there are several profiles (profiles: %s)", list)
			}
		},
	}
}

func profileSection() section[Profile] {
	return section[Profile]{
		fields: []field[Profile]{
			{
				key: "model",
				decode: func(d *decoder, at path, v any, p *Profile) {
					if v == nil {
						p.Model = DefaultModel
						return
					}
					if s, ok := d.str(at, v); ok {
						if strings.TrimSpace(s.val) == "" {
							d.problemf(at, "must not be empty")
						}
						p.Model = s.val
					}
				},
				show: func(_ *shower, _ path, p *Profile) any { return p.Model },
			},
			{
				key: "max_turns",
				decode: func(d *decoder, at path, v any, p *Profile) {
					if v == nil {
						p.MaxTurns = DefaultMaxTurns
						return
					}
					p.MaxTurns, _ = d.count(at, v, 1, MaxTurnsLimit)
				},
				show: func(_ *shower, _ path, p *Profile) any { return p.MaxTurns },
			},
			{
				key: "retention",
				decode: func(d *decoder, at path, v any, p *Profile) {
					if v == nil {
						p.Retention = DefaultRetention
						return
					}
					p.Retention, _ = d.duration(at, v)
				},
				show: func(_ *shower, _ path, p *Profile) any { return FormatDays(p.Retention) },
			},
			{
				key: "agent",
				decode: func(d *decoder, at path, v any, p *Profile) {
					switch v.(type) {
					case nil:
						return
					case map[string]any:
						decodeSection(d, at, v, agentSection(), &p.Agent)
						if p.Agent.Name == "" && !d.failed(at) {
							d.problemf(at.key("name"), "required: the agent (%s)", strings.Join(agents.Names(), ", "))
						}
					default:
						if s, ok := d.str(at, v); ok {
							p.Agent.Name = s.val
						}
					}
					if d.failed(at) {
						return
					}
					a, err := agents.Lookup(p.Agent.Name)
					if p.Agent.Name == agents.Own {
						p.Agent.Name = "" // the default, as when unset
					}
					if err != nil {
						d.problemf(at, "%v", err)
						return
					}
					if p.Agent.API != "" {
						if err := a.CheckAPI(p.Agent.API); err != nil {
							d.problemf(at.key("api"), "%v", err)
						}
					}
					if p.Agent.Binary != "" && !a.Uploadable {
						d.problemf(at.key("binary"), "the agent %s is not one executable amelia can upload: it must be on the sandbox image's PATH", a.Name)
					}
				},
				show: func(_ *shower, _ path, p *Profile) any {
					name := cmp.Or(p.Agent.Name, agents.Own)
					if p.Agent.API == "" && p.Agent.Binary == "" {
						return name
					}
					m := map[string]any{"name": name}
					if p.Agent.API != "" {
						m["api"] = p.Agent.API
					}
					if p.Agent.Binary != "" {
						m["binary"] = p.Agent.Binary
					}
					return m
				},
			},
			{
				key: "commit_build_outputs",
				decode: func(d *decoder, at path, v any, p *Profile) {
					if v == nil {
						return
					}
					p.CommitBuildOutputs, _ = d.boolean(at, v)
				},
				show: func(_ *shower, _ path, p *Profile) any { return p.CommitBuildOutputs },
			},
			{
				key: "llm",
				decode: func(d *decoder, at path, v any, p *Profile) {
					decodeSection(d, at, v, llmSection(), &p.LLM)
				},
				show: func(s *shower, at path, p *Profile) any { return showSection(s, at, llmSection(), &p.LLM) },
			},
			{
				key: "git",
				decode: func(d *decoder, at path, v any, p *Profile) {
					decodeSection(d, at, v, gitSection(), &p.Git)
				},
				show: func(s *shower, at path, p *Profile) any {
					if p.Git == (Git{Username: DefaultGitUsername}) {
						return nil // the host's credential store answers
					}
					return showSection(s, at, gitSection(), &p.Git)
				},
			},
			{
				key: "proxy",
				decode: func(d *decoder, at path, v any, p *Profile) {
					decodeSection(d, at, v, proxySection(), &p.Proxy)
				},
				show: func(s *shower, at path, p *Profile) any { return showSection(s, at, proxySection(), &p.Proxy) },
			},
			{
				key: "sandbox",
				decode: func(d *decoder, at path, v any, p *Profile) {
					decodeSection(d, at, v, sandboxSection(), &p.Sandbox)
				},
				show: func(s *shower, at path, p *Profile) any { return showSection(s, at, sandboxSection(), &p.Sandbox) },
			},
			mcpField(),
		},
	}
}

func llmSection() section[LLM] {
	up := upstreamSection(DefaultBaseURL, DefaultAPIKeyEnv)
	openai := func(l *LLM) *Upstream { return &l.Upstream }
	return section[LLM]{
		fields: append(append([]field[LLM]{{
			key: "api",
			decode: func(d *decoder, at path, v any, l *LLM) {
				if v == nil {
					return // "": OpenAI's
				}
				if s, ok := d.str(at, v); ok {
					switch s.val {
					case APIOpenAI, APIAnthropic:
						l.API = s.val
					case "gemini":
						d.problemf(at, "%s is not an API the proxy translates to: keep llm for an openai or anthropic upstream, and add an llm.gemini block for Google's Gemini API (the gemini agent's)", s.quote())
					default:
						d.problemf(at, "%s is not an API the proxy speaks: use openai (chat completions) or anthropic (messages)", s.quote())
					}
				}
			},
			// Shown only when set.
			show: func(_ *shower, _ path, l *LLM) any {
				if l.API == "" {
					return nil
				}
				return l.API
			},
		}}, liftFields(up.fields, openai)...),
			field[LLM]{
				key: "timeout",
				decode: func(d *decoder, at path, v any, l *LLM) {
					if v == nil {
						l.Timeout = DefaultLLMTimeout
						return
					}
					l.Timeout, _ = d.duration(at, v)
				},
				show: func(_ *shower, _ path, l *LLM) any { return formatDuration(l.Timeout) },
			},
			upstreamBlock("anthropic", anthropicSection, func(l *LLM) **Upstream { return &l.Anthropic }),
			upstreamBlock("gemini", geminiSection, func(l *LLM) **Upstream { return &l.Gemini }),
		),
		check: func(d *decoder, at path, set map[string]bool, l *LLM) {
			up.check(d, at, set, openai(l))
			if l.API != APIAnthropic {
				return
			}
			// An Anthropic upstream: Anthropic's defaults.
			if !set["base_url"] {
				l.BaseURL = DefaultAnthropicBaseURL
			}
			if !set["api_key"] && !set["api_key_env"] {
				l.APIKeyEnv = DefaultAnthropicKeyEnv
			}
			if l.Anthropic != nil {
				d.problemf(at.key("anthropic"), "is redundant with api: anthropic (the profile's upstream already speaks Anthropic's API); remove one")
				l.Anthropic = nil
			}
		},
	}
}

// upstreamBlock is llm's optional block key of another API's upstream
// (sec), whose absence disables its route.
func upstreamBlock(key string, sec func() section[Upstream], dst func(*LLM) **Upstream) field[LLM] {
	return field[LLM]{
		key:   key,
		block: true,
		decode: func(d *decoder, at path, v any, l *LLM) {
			if v == nil {
				return // no block: the route is disabled
			}
			u := &Upstream{}
			if decodeSection(d, at, v, sec(), u) {
				*dst(l) = u
			}
		},
		show: func(s *shower, at path, l *LLM) any {
			if *dst(l) == nil {
				return nil
			}
			return showSection(s, at, sec(), *dst(l))
		},
	}
}

// anthropicSection is llm.anthropic: an Anthropic-compatible upstream,
// with Anthropic's URL and key variable as defaults.
func anthropicSection() section[Upstream] {
	return upstreamSection(DefaultAnthropicBaseURL, DefaultAnthropicKeyEnv)
}

// geminiSection is llm.gemini: Google's Gemini API, with Google's URL
// and key variable as defaults.
func geminiSection() section[Upstream] {
	return upstreamSection(DefaultGeminiBaseURL, DefaultGeminiKeyEnv)
}

// upstreamSection is an LLM API: its URL and its key, given literally or
// by the name of a variable (defKeyEnv when neither is set).
func upstreamSection(defBaseURL, defKeyEnv string) section[Upstream] {
	return section[Upstream]{
		fields: []field[Upstream]{
			{
				key: "base_url",
				decode: func(d *decoder, at path, v any, u *Upstream) {
					if v == nil {
						u.BaseURL = defBaseURL
						return
					}
					s, ok := d.str(at, v)
					if !ok {
						return
					}
					if pu, err := url.Parse(s.val); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
						s.val, s.raw = redactURL(s.val), redactURL(s.raw)
						d.problemf(at, "%s is not an absolute http(s) URL", s.quote())
						return
					}
					u.BaseURL = s.val
				},
				show: func(_ *shower, _ path, u *Upstream) any { return u.BaseURL },
			},
			envNameField("api_key_env", defKeyEnv, func(u *Upstream) *string { return &u.APIKeyEnv }),
			func() field[Upstream] {
				f := secretField("api_key", "cannot be sent in an HTTP header", func(u *Upstream) *string { return &u.APIKey })
				// api_key: "" (a keyless upstream) is shown as set.
				f.show = func(_ *shower, _ path, u *Upstream) any {
					if u.APIKey == "" && u.APIKeyEnv != "" {
						return nil
					}
					return u.APIKey
				}
				return f
			}(),
		},
		check: func(d *decoder, at path, set map[string]bool, u *Upstream) {
			switch {
			case set["api_key"] && set["api_key_env"]:
				d.problemf(at, "api_key and api_key_env are both set; use one")
			case !set["api_key"] && !set["api_key_env"]:
				u.APIKeyEnv = defKeyEnv
			}
		},
	}
}

// gitTokenEnvExample is the variable named in token_env messages.
const gitTokenEnvExample = "GITHUB_TOKEN"

func gitSection() section[Git] {
	return section[Git]{
		fields: []field[Git]{
			envNameField("token_env", gitTokenEnvExample, func(g *Git) *string { return &g.TokenEnv }),
			secretField("token", "git's credential protocol cannot carry", func(g *Git) *string { return &g.Token }),
			{
				key: "username",
				decode: func(d *decoder, at path, v any, g *Git) {
					if v == nil {
						g.Username = DefaultGitUsername
						return
					}
					s, ok := d.str(at, v)
					switch {
					case !ok:
					case s.val == "":
						d.problemf(at, "must not be empty (default %s)", DefaultGitUsername)
					case hasLineBreak(s.val):
						d.problemf(at, "%s contains a line break or NUL, which git's credential protocol cannot carry", s.quote())
					default:
						g.Username = s.val
					}
				},
				show: func(_ *shower, _ path, g *Git) any { return g.Username },
			},
		},
		check: func(d *decoder, at path, set map[string]bool, _ *Git) {
			if set["token"] && set["token_env"] {
				d.problemf(at, "token and token_env are both set; use one")
			}
		},
	}
}

// defaultAuditDir is where the CLI puts audit logs when proxy.audit_dir
// is not set, for config show.
const defaultAuditDir = "$XDG_STATE_HOME/amelia/audit"

func proxySection() section[Proxy] {
	return section[Proxy]{
		fields: []field[Proxy]{
			{
				key: "audit_dir",
				decode: func(d *decoder, at path, v any, p *Proxy) {
					if v == nil {
						return
					}
					s, ok := d.str(at, v)
					if !ok || s.val == "" {
						return
					}
					if dir, ok := d.absPath(at, s); ok {
						p.AuditDir = dir
					}
				},
				show: func(_ *shower, _ path, p *Proxy) any {
					if p.AuditDir == "" {
						n := strNode("")
						n.Style = yaml.DoubleQuotedStyle
						n.LineComment = "default: " + defaultAuditDir
						return n
					}
					return p.AuditDir
				},
			},
			{
				key: "max_request_bytes",
				decode: func(d *decoder, at path, v any, p *Proxy) {
					if v == nil {
						p.MaxRequestBytes = DefaultMaxRequestBytes
						return
					}
					p.MaxRequestBytes, _ = d.size(at, v, minRequestBytes, maxRequestBytes)
				},
				show: func(_ *shower, _ path, p *Proxy) any {
					if s := formatSize(p.MaxRequestBytes); strings.Trim(s, "0123456789") != "" {
						return s // with a unit
					}
					return p.MaxRequestBytes // a YAML integer, not "1500"
				},
			},
		},
	}
}

// envNameField is a key naming the environment variable that holds a
// secret (api_key_env, token_env); example is the name its messages suggest.
func envNameField[T any](key, example string, name func(*T) *string) field[T] {
	return field[T]{
		key: key,
		decode: func(d *decoder, at path, v any, t *T) {
			if v == nil {
				return
			}
			if n, ok := d.envName(at, v, key, example); ok {
				*name(t) = n
			}
		},
		show: func(s *shower, _ path, t *T) any {
			if *name(t) == "" {
				return nil
			}
			return s.envNameNode(*name(t))
		},
	}
}

// secretField is a key holding a secret as written (api_key, token). A
// line break or NUL is refused, without echoing the value: carrier says
// what could not carry it.
func secretField[T any](key, carrier string, secret func(*T) *string) field[T] {
	return field[T]{
		key: key,
		decode: func(d *decoder, at path, v any, t *T) {
			if v == nil {
				return
			}
			s, ok := d.str(at, v)
			switch {
			case !ok:
			case hasLineBreak(s.val):
				d.problemf(at, "contains a line break or NUL, which %s", carrier)
			default:
				*secret(t) = s.val
			}
		},
		show: func(_ *shower, _ path, t *T) any {
			if *secret(t) == "" {
				return nil
			}
			return *secret(t)
		},
	}
}

// hasLineBreak reports whether s holds a byte that cannot be sent in a
// line-based protocol or an HTTP header: newline, carriage return or NUL.
func hasLineBreak(s string) bool { return strings.ContainsAny(s, "\n\r\x00") }

// builtinProviders are the providers that ship with amelia, for messages.
const builtinProviders = "local, docker, ssh, daytona, kubernetes"

func sandboxSection() section[Sandbox] {
	return section[Sandbox]{
		fields: []field[Sandbox]{
			{
				key: "provider",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						d.problemf(at, "required: where the profile runs (%s, or an installed plugin's name)", builtinProviders)
						return
					}
					s, ok := d.str(at, v)
					switch {
					case !ok:
					case s.val == "":
						d.problemf(at, "must not be empty: where the profile runs (%s, or an installed plugin's name)", builtinProviders)
					case s.val == "none":
						sb.Provider = ProviderLocal
					case !sdk.ValidName(s.val):
						d.problemf(at, "%s is not a valid provider name (built in: %s; a plugin's name uses %s)", s.quote(), builtinProviders, nameRule)
					default:
						sb.Provider = s.val
					}
				},
				show: func(_ *shower, _ path, sb *Sandbox) any { return sb.Provider },
			},
			{
				key: "network",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						sb.Network = sdk.NetworkOpen
						return
					}
					s, ok := d.str(at, v)
					if !ok {
						return
					}
					if !slices.Contains(networkModes(), sdk.NetworkMode(s.val)) {
						d.problemf(at, "%s is not one of %s", s.quote(), joinModes(networkModes()))
						return
					}
					sb.Network = sdk.NetworkMode(s.val)
				},
				show: func(_ *shower, _ path, sb *Sandbox) any { return string(sb.Network) },
			},
			{
				key: "allowed_hosts",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						return
					}
					sb.AllowedHosts, _ = d.strList(at, v, func(at path, s sval) (string, bool) {
						h := strings.ToLower(strings.TrimSpace(s.val))
						if !validHost(h) {
							d.problemf(at, "%s is not a hostname, *.wildcard or IP address (no scheme, port or path)", s.quote())
							return "", false
						}
						return h, true
					})
				},
				show: func(_ *shower, _ path, sb *Sandbox) any {
					if len(sb.AllowedHosts) == 0 && sb.Network != sdk.NetworkAllowlist {
						return nil
					}
					return append([]string{}, sb.AllowedHosts...)
				},
			},
			{
				key: "egress_check_targets",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						return
					}
					sb.EgressCheckTargets, _ = d.strList(at, v, func(at path, s sval) (string, bool) {
						t := strings.ToLower(strings.TrimSpace(s.val))
						if !validTarget(t) {
							d.problemf(at, "%s is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)", s.quote())
							return "", false
						}
						return t, true
					})
				},
				show: func(_ *shower, _ path, sb *Sandbox) any {
					if len(sb.EgressCheckTargets) == 0 {
						return nil
					}
					return append([]string{}, sb.EgressCheckTargets...)
				},
			},
			{
				key: "plugin_env",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						return
					}
					sb.PluginEnv, _ = d.strList(at, v, func(at path, s sval) (string, bool) {
						// envName expands the item as written again, to the same value.
						return d.envName(at, s.raw, "plugin_env", "KUBECONFIG")
					})
				},
				show: func(_ *shower, _ path, sb *Sandbox) any {
					if len(sb.PluginEnv) == 0 {
						return nil
					}
					return append([]string{}, sb.PluginEnv...)
				},
			},
			{
				key: "concurrent_runs",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						return
					}
					sb.ConcurrentRuns, _ = d.boolean(at, v)
				},
				show: func(_ *shower, _ path, sb *Sandbox) any { return sb.ConcurrentRuns },
			},
			{
				key: "shared_plugin",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						return
					}
					shared, ok := d.boolean(at, v)
					sb.OwnPlugin = ok && !shared
				},
				show: func(_ *shower, _ path, sb *Sandbox) any {
					if !sb.OwnPlugin {
						return nil
					}
					return false
				},
			},
			{
				key: "parked_checkouts",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						return
					}
					if n, ok := d.count(at, v, 0, MaxParkedCheckouts); ok {
						sb.ParkedCheckouts = &n
					}
				},
				show: func(_ *shower, _ path, sb *Sandbox) any {
					if sb.ParkedCheckouts == nil {
						return nil
					}
					return *sb.ParkedCheckouts
				},
			},
			{
				key: "setup",
				decode: func(d *decoder, at path, v any, sb *Sandbox) {
					if v == nil {
						return
					}
					sb.Setup = d.setup(at, v)
				},
				show: func(_ *shower, _ path, sb *Sandbox) any { return showSetup(sb.Setup) },
			},
			lifetimeKey("idle_timeout", idleTimeout),
			lifetimeKey("max_lifetime", maxLifetime),
		},
		// Any other key holding a map is a provider's settings block, kept
		// as written for the plugin.
		extra: func(d *decoder, at path, key string, v any, sb *Sandbox) bool {
			switch v.(type) {
			case nil, map[string]any:
			default:
				return false
			}
			if !sdk.ValidName(key) {
				d.problemf(at, "invalid provider settings block name: a block is named after its provider (%s)", nameRule)
				return true
			}
			if sb.Settings == nil {
				sb.Settings = map[string]map[string]any{}
			}
			block, _ := d.tree(at, v).(map[string]any)
			if block == nil {
				block = map[string]any{}
			}
			sb.Settings[key] = block
			return true
		},
		extraHint: "or a map of provider settings",
		check: func(d *decoder, at path, _ map[string]bool, sb *Sandbox) {
			_, hasLocal := sb.Settings[ProviderLocal]
			_, hasNone := sb.Settings["none"]
			if hasLocal && hasNone {
				d.problemf(at.key("none"), `"none" is an alias of "local": keep a single settings block`)
			}
		},
		showExtra: func(_ *shower, _ path, sb *Sandbox) []keyValue {
			var kvs []keyValue
			for _, name := range sortedKeys(sb.Settings) {
				kvs = append(kvs, keyValue{name, sb.Settings[name]})
			}
			return kvs
		},
	}
}

func joinModes(modes []sdk.NetworkMode) string {
	s := make([]string, len(modes))
	for i, m := range modes {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// agentSection is the block form of agent.
func agentSection() section[Agent] {
	// text is a key whose string is taken as written.
	text := func(key string, dst func(*Agent) *string) field[Agent] {
		return field[Agent]{key: key, decode: func(d *decoder, at path, v any, a *Agent) {
			if v == nil {
				return
			}
			if s, ok := d.str(at, v); ok {
				*dst(a) = s.val
			}
		}}
	}
	return section[Agent]{
		fields: []field[Agent]{
			text("name", func(a *Agent) *string { return &a.Name }),
			text("api", func(a *Agent) *string { return &a.API }),
			{
				key: "binary",
				decode: func(d *decoder, at path, v any, a *Agent) {
					if v == nil {
						return
					}
					if s, ok := d.str(at, v); ok && s.val != "" {
						if f, ok := d.absPath(at, s); ok {
							a.Binary = f
						}
					}
				},
			},
		},
	}
}
