package config

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func TestLoadFindsTheFile(t *testing.T) {
	const one = "profiles: {one: {sandbox: {provider: local}}}\n"
	tests := []struct {
		name string
		// files to create, relative to the home directory ("~") or to the
		// XDG directory ("xdg/") or elsewhere ("other/").
		files      []string
		path       string // Options.Path; "~/" and "HOME/" are expanded
		env        testEnv
		noHome     bool
		wantSource string // "" for the built-in default; "HOME/" expanded
		wantErr    []string
	}{
		{
			name:       "default path missing uses the built-in default",
			wantSource: "",
		},
		{
			name:       "no home directory and no XDG uses the built-in default",
			noHome:     true,
			wantSource: "",
		},
		{
			name:       "default path under the home directory",
			files:      []string{".config/amelia/config.yaml"},
			wantSource: "HOME/.config/amelia/config.yaml",
		},
		{
			name:       "XDG_CONFIG_HOME wins over ~/.config",
			files:      []string{".config/amelia/config.yaml", "xdg/amelia/config.yaml"},
			env:        testEnv{"XDG_CONFIG_HOME": "HOME/xdg"},
			wantSource: "HOME/xdg/amelia/config.yaml",
		},
		{
			name:       "XDG_CONFIG_HOME without the file uses the built-in default",
			files:      []string{".config/amelia/config.yaml"},
			env:        testEnv{"XDG_CONFIG_HOME": "HOME/xdg"},
			wantSource: "",
		},
		{
			name:       "a relative XDG_CONFIG_HOME is ignored",
			files:      []string{".config/amelia/config.yaml"},
			env:        testEnv{"XDG_CONFIG_HOME": "xdg"},
			wantSource: "HOME/.config/amelia/config.yaml",
		},
		{
			name:       "AMELIA_CONFIG wins over the default path",
			files:      []string{".config/amelia/config.yaml", "other/a.yaml"},
			env:        testEnv{"AMELIA_CONFIG": "HOME/other/a.yaml"},
			wantSource: "HOME/other/a.yaml",
		},
		{
			name:       "--config wins over AMELIA_CONFIG",
			files:      []string{"other/a.yaml", "other/b.yaml"},
			env:        testEnv{"AMELIA_CONFIG": "HOME/other/a.yaml"},
			path:       "HOME/other/b.yaml",
			wantSource: "HOME/other/b.yaml",
		},
		{
			name:       "--config expands ~",
			files:      []string{"other/b.yaml"},
			path:       "~/other/b.yaml",
			wantSource: "HOME/other/b.yaml",
		},
		{
			name:       "AMELIA_CONFIG expands ~",
			files:      []string{"other/a.yaml"},
			env:        testEnv{"AMELIA_CONFIG": "~/other/a.yaml"},
			wantSource: "HOME/other/a.yaml",
		},
		{
			name:    "--config naming a missing file is an error",
			files:   []string{".config/amelia/config.yaml"},
			path:    "HOME/missing.yaml",
			wantErr: []string{"--config", "HOME/missing.yaml", "no such file"},
		},
		{
			name:    "AMELIA_CONFIG naming a missing file is an error",
			files:   []string{".config/amelia/config.yaml"},
			env:     testEnv{"AMELIA_CONFIG": "HOME/missing.yaml"},
			wantErr: []string{"AMELIA_CONFIG", "HOME/missing.yaml", "no such file"},
		},
		{
			name:    "~ without a home directory is an error",
			path:    "~/x.yaml",
			noHome:  true,
			wantErr: []string{"--config", "no home directory"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			expand := func(s string) string { return strings.ReplaceAll(s, "HOME", home) }
			for _, f := range tt.files {
				writeFile(t, home, f, one)
			}
			env := testEnv{}
			for k, v := range tt.env {
				env[k] = expand(v)
			}
			opts := env.options(expand(tt.path), home)
			if tt.noHome {
				opts.HomeDir = ""
			}
			c, err := Load(opts)
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("Load succeeded with source %q, want an error", c.Source)
				}
				for _, w := range tt.wantErr {
					if w = expand(w); !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				if !errors.Is(err, fs.ErrNotExist) && strings.Contains(err.Error(), "no such file") {
					t.Errorf("error %v does not wrap fs.ErrNotExist", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := expand(tt.wantSource)
			if want != "" {
				want = filepath.Clean(want)
			}
			equal(t, "Source", c.Source, want)
			if want == "" {
				equal(t, "profiles of the built-in default", c.ProfileNames(), []string{"local"})
			} else {
				equal(t, "profiles", c.ProfileNames(), []string{"one"})
			}
		})
	}
}

func TestBuiltinDefault(t *testing.T) {
	home := t.TempDir()
	c, err := Load(testEnv{}.options("", home))
	if err != nil {
		t.Fatal(err)
	}
	local := &Profile{
		Name:      "local",
		Model:     "gpt-4.1-mini",
		MaxTurns:  DefaultMaxTurns,
		Retention: DefaultRetention,
		LLM:       LLM{Upstream: Upstream{BaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY"}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
		Sandbox: Sandbox{
			Provider: "local",
			Network:  sdk.NetworkOpen,
		},
	}
	equal(t, "Source", c.Source, "")
	equal(t, "DefaultProfile", c.DefaultProfile, "local")
	got := withoutEnv(*mustProfile(t, c, ""))
	// It stands in for the default file, absent.
	equal(t, "DefaultFile", got.DefaultFile(), filepath.Join(home, ".config", "amelia", "config.yaml"))
	got.absent = ""
	equal(t, "default profile", got, *local)

	// Environment overrides apply to the built-in default too.
	env := testEnv{"AMELIA_PROFILES__LOCAL__MODEL": "o3"}
	c, err = Load(env.options("", t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "overridden model", mustProfile(t, c, "").Model, "o3")

	// And problems they cause name the built-in default.
	env = testEnv{"AMELIA_PROFILES__LOCAL__SANDBOX__NETWORK": "nope"}
	_, err = Load(env.options("", t.TempDir()))
	equal(t, "error", errString(err), `built-in default config: profiles.local.sandbox.network: the value from AMELIA_PROFILES__LOCAL__SANDBOX__NETWORK is not one of open, allowlist, none`)
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

func TestDefaultsFilled(t *testing.T) {
	tests := []struct {
		name    string
		profile string
		want    Profile
	}{
		{
			name:    "only the provider",
			profile: `{sandbox: {provider: docker}}`,
			want: Profile{Model: DefaultModel, MaxTurns: DefaultMaxTurns, Retention: DefaultRetention, LLM: LLM{Upstream: Upstream{BaseURL: DefaultBaseURL, APIKeyEnv: DefaultAPIKeyEnv}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
				Sandbox: Sandbox{Provider: "docker", Network: sdk.NetworkOpen}},
		},
		{
			name:    "api_key set: no default api_key_env",
			profile: `{llm: {api_key: sk-1}, sandbox: {provider: docker}}`,
			want: Profile{Model: DefaultModel, MaxTurns: DefaultMaxTurns, Retention: DefaultRetention, LLM: LLM{Upstream: Upstream{BaseURL: DefaultBaseURL, APIKey: "sk-1"}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
				Sandbox: Sandbox{Provider: "docker", Network: sdk.NetworkOpen}},
		},
		{
			name:    "base_url set: the key variable still defaults",
			profile: `{llm: {base_url: "http://localhost:11434/v1"}, sandbox: {provider: docker}}`,
			want: Profile{Model: DefaultModel, MaxTurns: DefaultMaxTurns, Retention: DefaultRetention, LLM: LLM{Upstream: Upstream{BaseURL: "http://localhost:11434/v1", APIKeyEnv: DefaultAPIKeyEnv}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
				Sandbox: Sandbox{Provider: "docker", Network: sdk.NetworkOpen}},
		},
		{
			name:    "null values count as absent",
			profile: `{model: null, llm: null, sandbox: {provider: docker, network: null}}`,
			want: Profile{Model: DefaultModel, MaxTurns: DefaultMaxTurns, Retention: DefaultRetention, LLM: LLM{Upstream: Upstream{BaseURL: DefaultBaseURL, APIKeyEnv: DefaultAPIKeyEnv}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
				Sandbox: Sandbox{Provider: "docker", Network: sdk.NetworkOpen}},
		},
		{
			name:    "provider none is local",
			profile: `{sandbox: {provider: none}}`,
			want: Profile{Model: DefaultModel, MaxTurns: DefaultMaxTurns, Retention: DefaultRetention, LLM: LLM{Upstream: Upstream{BaseURL: DefaultBaseURL, APIKeyEnv: DefaultAPIKeyEnv}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
				Sandbox: Sandbox{Provider: "local", Network: sdk.NetworkOpen}},
		},
		{
			name:    "everything set",
			profile: `{model: o3, max_turns: 7, retention: 30d, llm: {base_url: "https://llm.example/v1", api_key_env: K}, sandbox: {provider: ssh, network: allowlist, allowed_hosts: [Example.COM]}}`,
			want: Profile{Model: "o3", MaxTurns: 7, Retention: 30 * 24 * time.Hour, LLM: LLM{Upstream: Upstream{BaseURL: "https://llm.example/v1", APIKeyEnv: "K"}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
				Sandbox: Sandbox{Provider: "ssh", Network: sdk.NetworkAllowlist, AllowedHosts: []string{"example.com"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, "profiles:\n  p: "+tt.profile+"\n", nil)
			equal(t, "DefaultProfile (the only profile)", c.DefaultProfile, "p")
			got := withoutEnv(*mustProfile(t, c, ""))
			got.source = ""
			tt.want.Name = "p"
			equal(t, "profile", got, tt.want)
		})
	}
}

func TestLLMTimeoutAndAnthropic(t *testing.T) {
	tests := []struct {
		name          string
		llm           string
		env           testEnv
		wantTimeout   time.Duration
		wantAnthropic *Upstream
	}{
		{
			name:        "no anthropic block: the route is disabled",
			llm:         `{}`,
			wantTimeout: DefaultLLMTimeout,
		},
		{
			name:          "an empty block gets Anthropic's URL and key variable",
			llm:           `{anthropic: {}}`,
			wantTimeout:   DefaultLLMTimeout,
			wantAnthropic: &Upstream{BaseURL: DefaultAnthropicBaseURL, APIKeyEnv: DefaultAnthropicKeyEnv},
		},
		{
			name:          "a block with nothing under it is an empty block",
			llm:           "\n  anthropic:\n  timeout: 90s",
			wantTimeout:   90 * time.Second,
			wantAnthropic: &Upstream{BaseURL: DefaultAnthropicBaseURL, APIKeyEnv: DefaultAnthropicKeyEnv},
		},
		{
			name:          "the block inherits nothing from llm",
			llm:           `{base_url: "http://localhost:1/v1", api_key: k, anthropic: {base_url: "http://localhost:2/v1"}}`,
			wantTimeout:   DefaultLLMTimeout,
			wantAnthropic: &Upstream{BaseURL: "http://localhost:2/v1", APIKeyEnv: DefaultAnthropicKeyEnv},
		},
		{
			name:          "a literal key",
			llm:           `{anthropic: {api_key: "${AK}"}}`,
			env:           testEnv{"AK": "sk-ant-1"},
			wantTimeout:   DefaultLLMTimeout,
			wantAnthropic: &Upstream{BaseURL: DefaultAnthropicBaseURL, APIKey: "sk-ant-1"},
		},
		{
			name:          "an explicitly empty key: no key",
			llm:           `{anthropic: {api_key: ""}}`,
			wantTimeout:   DefaultLLMTimeout,
			wantAnthropic: &Upstream{BaseURL: DefaultAnthropicBaseURL},
		},
		{
			name:          "every key",
			llm:           `{timeout: 1h30m, anthropic: {base_url: "https://llm.example/anthropic/v1", api_key_env: MY_ANTHROPIC_KEY}}`,
			wantTimeout:   90 * time.Minute,
			wantAnthropic: &Upstream{BaseURL: "https://llm.example/anthropic/v1", APIKeyEnv: "MY_ANTHROPIC_KEY"},
		},
		{
			name:        "timeout with spaces and fractions",
			llm:         `{timeout: " 1.5s "}`,
			wantTimeout: 1500 * time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, profileWith("llm: "+tt.llm+"\nsandbox: {provider: docker}\n"), tt.env)
			l := mustProfile(t, c, "dev").LLM
			equal(t, "timeout", l.Timeout, tt.wantTimeout)
			equal(t, "anthropic", l.Anthropic, tt.wantAnthropic)
		})
	}
}

func TestLLMGemini(t *testing.T) {
	tests := []struct {
		name string
		llm  string
		env  testEnv
		want *Upstream
	}{
		{"no gemini block: the route is disabled", `{}`, nil, nil},
		{"an empty block gets Google's URL and key variable", `{gemini: {}}`, nil,
			&Upstream{BaseURL: DefaultGeminiBaseURL, APIKeyEnv: DefaultGeminiKeyEnv}},
		{"a block with nothing under it is an empty block", "\n  gemini:\n  timeout: 90s", nil,
			&Upstream{BaseURL: DefaultGeminiBaseURL, APIKeyEnv: DefaultGeminiKeyEnv}},
		{"the block inherits nothing from llm", `{base_url: "http://localhost:1/v1", api_key: k, gemini: {base_url: "http://localhost:2"}}`, nil,
			&Upstream{BaseURL: "http://localhost:2", APIKeyEnv: DefaultGeminiKeyEnv}},
		{"beside api: anthropic", `{api: anthropic, gemini: {api_key_env: GK}}`, nil,
			&Upstream{BaseURL: DefaultGeminiBaseURL, APIKeyEnv: "GK"}},
		{"a literal key", `{gemini: {api_key: "${GK}"}}`, testEnv{"GK": "AIza-1"},
			&Upstream{BaseURL: DefaultGeminiBaseURL, APIKey: "AIza-1"}},
		{"an explicitly empty key: no key", `{gemini: {api_key: ""}}`, nil,
			&Upstream{BaseURL: DefaultGeminiBaseURL}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, profileWith("llm: "+tt.llm+"\nsandbox: {provider: docker}\n"), tt.env)
			equal(t, "gemini", mustProfile(t, c, "dev").LLM.Gemini, tt.want)
		})
	}
}

func TestGit(t *testing.T) {
	tests := []struct {
		name string
		git  string
		env  testEnv
		want Git
	}{
		{
			name: "no block: the host's credential store, and the default username",
			git:  `{}`,
			want: Git{Username: DefaultGitUsername},
		},
		{
			name: "null block",
			git:  `null`,
			want: Git{Username: DefaultGitUsername},
		},
		{
			name: "a variable",
			git:  `{token_env: GH_TOKEN}`,
			want: Git{TokenEnv: "GH_TOKEN", Username: DefaultGitUsername},
		},
		{
			name: "a literal token from the environment",
			git:  `{token: "${GH}", username: oauth2}`,
			env:  testEnv{"GH": "glpat-1"},
			want: Git{Token: "glpat-1", Username: "oauth2"},
		},
		{
			name: "an empty token is no token",
			git:  `{token: ""}`,
			want: Git{Username: DefaultGitUsername},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, profileWith("git: "+tt.git+"\nsandbox: {provider: docker}\n"), tt.env)
			equal(t, "git", mustProfile(t, c, "dev").Git, tt.want)
		})
	}
}

func TestProxy(t *testing.T) {
	tests := []struct {
		name  string
		proxy string
		env   testEnv
		want  Proxy
	}{
		{name: "no block", proxy: `{}`, want: Proxy{MaxRequestBytes: DefaultMaxRequestBytes}},
		{name: "null block", proxy: `null`, want: Proxy{MaxRequestBytes: DefaultMaxRequestBytes}},
		{name: "bytes as a number", proxy: `{max_request_bytes: 1048576}`, want: Proxy{MaxRequestBytes: 1 << 20}},
		{name: "the minimum", proxy: `{max_request_bytes: 1024}`, want: Proxy{MaxRequestBytes: 1 << 10}},
		{name: "the maximum", proxy: `{max_request_bytes: 1GiB}`, want: Proxy{MaxRequestBytes: 1 << 30}},
		{name: "bytes as a string", proxy: `{max_request_bytes: "2048"}`, want: Proxy{MaxRequestBytes: 2048}},
		{name: "KiB", proxy: `{max_request_bytes: 512KiB}`, want: Proxy{MaxRequestBytes: 512 << 10}},
		{name: "a space and any case", proxy: `{max_request_bytes: 10 mib}`, want: Proxy{MaxRequestBytes: 10 << 20}},
		{name: "decimal units", proxy: `{max_request_bytes: 10MB}`, want: Proxy{MaxRequestBytes: 10e6}},
		{name: "B", proxy: `{max_request_bytes: 4096B}`, want: Proxy{MaxRequestBytes: 4096}},
		{name: "YAML exponent", proxy: `{max_request_bytes: 1e6}`, want: Proxy{MaxRequestBytes: 1e6}},
		{name: "from a variable", proxy: `{max_request_bytes: "${MAXB:-1MiB}"}`, want: Proxy{MaxRequestBytes: 1 << 20}},
		{
			name:  "absolute audit_dir, cleaned",
			proxy: `{audit_dir: /var/log/amelia/../audit/}`,
			want:  Proxy{AuditDir: "/var/log/audit", MaxRequestBytes: DefaultMaxRequestBytes},
		},
		{
			name:  "audit_dir under ~",
			proxy: `{audit_dir: ~/.local/state/amelia/audit}`,
			want:  Proxy{AuditDir: "/home/u/.local/state/amelia/audit", MaxRequestBytes: DefaultMaxRequestBytes},
		},
		{
			name:  "audit_dir ~",
			proxy: `{audit_dir: "~"}`,
			want:  Proxy{AuditDir: "/home/u", MaxRequestBytes: DefaultMaxRequestBytes},
		},
		{
			name:  "audit_dir from a variable",
			proxy: `{audit_dir: "${XDG_STATE_HOME}/amelia/audit"}`,
			env:   testEnv{"XDG_STATE_HOME": "/state"},
			want:  Proxy{AuditDir: "/state/amelia/audit", MaxRequestBytes: DefaultMaxRequestBytes},
		},
		{
			name:  "empty audit_dir: the caller's default",
			proxy: `{audit_dir: ""}`,
			want:  Proxy{MaxRequestBytes: DefaultMaxRequestBytes},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "config.yaml", profileWith("proxy: "+tt.proxy+"\nsandbox: {provider: docker}\n"))
			c, err := Load(tt.env.options(p, "/home/u"))
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "proxy", mustProfile(t, c, "dev").Proxy, tt.want)
		})
	}
}

func TestEnvOverrides(t *testing.T) {
	const file = `
default_profile: dev
profiles:
  dev:
    llm: {api_key_env: FILE_KEY}
    proxy: {max_request_bytes: 2097152}
    sandbox:
      provider: docker
      docker: {image: "img:1", cpus: 2}
      daytona: {autoStopInterval: 10}
  prod:
    llm: {anthropic: {api_key_env: FILE_ANTHROPIC_KEY}}
    sandbox: {provider: daytona, network: none}
`
	tests := []struct {
		name  string
		env   testEnv
		check func(t *testing.T, c *Config)
	}{
		{
			name: "llm timeout",
			env:  testEnv{"AMELIA_PROFILES__DEV__LLM__TIMEOUT": "30s"},
			check: func(t *testing.T, c *Config) {
				equal(t, "timeout", c.Profiles["dev"].LLM.Timeout, 30*time.Second)
				equal(t, "prod untouched", c.Profiles["prod"].LLM.Timeout, DefaultLLMTimeout)
			},
		},
		{
			name: "a key of a new anthropic block",
			env:  testEnv{"AMELIA_PROFILES__DEV__LLM__ANTHROPIC__API_KEY_ENV": "X"},
			check: func(t *testing.T, c *Config) {
				equal(t, "anthropic", c.Profiles["dev"].LLM.Anthropic, &Upstream{BaseURL: DefaultAnthropicBaseURL, APIKeyEnv: "X"})
			},
		},
		{
			name: "a key of the file's anthropic block",
			env:  testEnv{"AMELIA_PROFILES__PROD__LLM__ANTHROPIC__BASE_URL": "http://127.0.0.1:9/v1"},
			check: func(t *testing.T, c *Config) {
				equal(t, "anthropic", c.Profiles["prod"].LLM.Anthropic, &Upstream{BaseURL: "http://127.0.0.1:9/v1", APIKeyEnv: "FILE_ANTHROPIC_KEY"})
			},
		},
		{
			name: "git",
			env:  testEnv{"AMELIA_PROFILES__DEV__GIT__TOKEN_ENV": "GH_TOKEN", "AMELIA_PROFILES__DEV__GIT__USERNAME": "oauth2"},
			check: func(t *testing.T, c *Config) {
				equal(t, "git", c.Profiles["dev"].Git, Git{TokenEnv: "GH_TOKEN", Username: "oauth2"})
			},
		},
		{
			name: "max_request_bytes with a unit over the file's number",
			env:  testEnv{"AMELIA_PROFILES__DEV__PROXY__MAX_REQUEST_BYTES": "1MiB"},
			check: func(t *testing.T, c *Config) {
				equal(t, "max_request_bytes", c.Profiles["dev"].Proxy.MaxRequestBytes, int64(1<<20))
			},
		},
		{
			name: "max_request_bytes as digits, which arrive as a string",
			env:  testEnv{"AMELIA_PROFILES__PROD__PROXY__MAX_REQUEST_BYTES": "4096"},
			check: func(t *testing.T, c *Config) {
				equal(t, "max_request_bytes", c.Profiles["prod"].Proxy.MaxRequestBytes, int64(4096))
				equal(t, "dev untouched", c.Profiles["dev"].Proxy.MaxRequestBytes, int64(2<<20))
			},
		},
		{
			name: "an empty max_request_bytes restores the default",
			env:  testEnv{"AMELIA_PROFILES__DEV__PROXY__MAX_REQUEST_BYTES": ""},
			check: func(t *testing.T, c *Config) {
				equal(t, "max_request_bytes", c.Profiles["dev"].Proxy.MaxRequestBytes, int64(DefaultMaxRequestBytes))
			},
		},
		{
			name: "audit_dir",
			env:  testEnv{"AMELIA_PROFILES__DEV__PROXY__AUDIT_DIR": "/tmp/audit"},
			check: func(t *testing.T, c *Config) {
				equal(t, "proxy", c.Profiles["dev"].Proxy, Proxy{AuditDir: "/tmp/audit", MaxRequestBytes: 2 << 20})
			},
		},
		{
			name: "an empty value removes the anthropic block",
			env:  testEnv{"AMELIA_PROFILES__PROD__LLM__ANTHROPIC": ""},
			check: func(t *testing.T, c *Config) {
				equal(t, "anthropic", c.Profiles["prod"].LLM.Anthropic, (*Upstream)(nil))
			},
		},
		{
			name: "default profile",
			env:  testEnv{"AMELIA_DEFAULT_PROFILE": "prod"},
			check: func(t *testing.T, c *Config) {
				equal(t, "DefaultProfile", c.DefaultProfile, "prod")
			},
		},
		{
			name: "nested scalar",
			env:  testEnv{"AMELIA_PROFILES__DEV__SANDBOX__NETWORK": "none"},
			check: func(t *testing.T, c *Config) {
				equal(t, "network", c.Profiles["dev"].Sandbox.Network, sdk.NetworkNone)
				equal(t, "prod untouched", c.Profiles["prod"].Sandbox.Network, sdk.NetworkNone)
			},
		},
		{
			name: "key with underscores",
			env:  testEnv{"AMELIA_PROFILES__DEV__LLM__API_KEY_ENV": "MY_KEY"},
			check: func(t *testing.T, c *Config) {
				equal(t, "api_key_env", c.Profiles["dev"].LLM.APIKeyEnv, "MY_KEY")
			},
		},
		{
			name: "comma-separated list",
			env: testEnv{
				"AMELIA_PROFILES__DEV__SANDBOX__NETWORK":       "allowlist",
				"AMELIA_PROFILES__DEV__SANDBOX__ALLOWED_HOSTS": "github.com, *.PyPI.org,,192.0.2.1",
			},
			check: func(t *testing.T, c *Config) {
				equal(t, "allowed_hosts", c.Profiles["dev"].Sandbox.AllowedHosts, []string{"github.com", "*.pypi.org", "192.0.2.1"})
			},
		},
		{
			name: "plugin_env from the environment",
			env:  testEnv{"AMELIA_PROFILES__DEV__SANDBOX__PLUGIN_ENV": "KUBECONFIG, AWS_PROFILE,,"},
			check: func(t *testing.T, c *Config) {
				equal(t, "plugin_env", c.Profiles["dev"].Sandbox.PluginEnv, []string{"KUBECONFIG", "AWS_PROFILE"})
			},
		},
		{
			name: "shared_plugin from the environment",
			env:  testEnv{"AMELIA_PROFILES__DEV__SANDBOX__SHARED_PLUGIN": "false"},
			check: func(t *testing.T, c *Config) {
				equal(t, "own plugin", c.Profiles["dev"].Sandbox.OwnPlugin, true)
				equal(t, "prod's", c.Profiles["prod"].Sandbox.OwnPlugin, false)
			},
		},
		{
			name: "egress check targets from the environment",
			env: testEnv{
				"AMELIA_PROFILES__DEV__SANDBOX__NETWORK":              "none",
				"AMELIA_PROFILES__DEV__SANDBOX__EGRESS_CHECK_TARGETS": "192.0.2.1:80, [2001:DB8::1]:443,Canary.Test:53",
			},
			check: func(t *testing.T, c *Config) {
				equal(t, "egress_check_targets", c.Profiles["dev"].Sandbox.EgressCheckTargets, []string{"192.0.2.1:80", "[2001:db8::1]:443", "canary.test:53"})
			},
		},
		{
			name: "provider settings merge into the block",
			env:  testEnv{"AMELIA_PROFILES__DEV__SANDBOX__DOCKER__IMAGE": "img:2"},
			check: func(t *testing.T, c *Config) {
				equal(t, "docker block", c.Profiles["dev"].Sandbox.Settings["docker"], map[string]any{"image": "img:2", "cpus": 2})
			},
		},
		{
			name: "keys match the file's case-insensitively",
			env:  testEnv{"AMELIA_PROFILES__DEV__SANDBOX__DAYTONA__AUTOSTOPINTERVAL": "30"},
			check: func(t *testing.T, c *Config) {
				equal(t, "daytona block", c.Profiles["dev"].Sandbox.Settings["daytona"], map[string]any{"autoStopInterval": "30"})
			},
		},
		{
			name: "an empty value for a profile the file lacks changes nothing",
			env:  testEnv{"AMELIA_PROFILES__CI__MODEL": ""},
			check: func(t *testing.T, c *Config) {
				equal(t, "names", c.ProfileNames(), []string{"dev", "prod"})
			},
		},
		{
			name: "an empty value unsets the key",
			env:  testEnv{"AMELIA_PROFILES__DEV__LLM__API_KEY_ENV": "", "AMELIA_PROFILES__DEV__LLM__API_KEY": "sk-env"},
			check: func(t *testing.T, c *Config) {
				equal(t, "llm", c.Profiles["dev"].LLM, LLM{Upstream: Upstream{BaseURL: DefaultBaseURL, APIKey: "sk-env"}, Timeout: DefaultLLMTimeout})
			},
		},
		{
			name: "values are interpolated",
			env:  testEnv{"AMELIA_PROFILES__DEV__MODEL": "${M:-o3}"},
			check: func(t *testing.T, c *Config) {
				equal(t, "model", c.Profiles["dev"].Model, "o3")
			},
		},
		{
			name: "other AMELIA_ variables are not config keys",
			env: testEnv{
				"AMELIA_CONFIG_DIR":             "/x",
				"AMELIA_PLUGIN_PATH":            "/usr/lib/amelia",
				"AMELIA_WORKER_DIR":             "/tmp/w",
				"AMELIA_PROXY_URL":              "http://127.0.0.1:1",
				"AMELIA_PROFILE":                "prod",
				"AMELIA_PROFILES":               "x",
				"AMELIA_PROFILES_DEV":           "x",
				"AMELIA_DEFAULT_PROFILE_":       "prod",
				"AMELIA_PROFILES__DEV____MODEL": "x",
				"PROFILES__DEV__MODEL":          "x",
				"amelia_profiles__dev__model":   "x",
			},
			check: func(t *testing.T, c *Config) {
				equal(t, "DefaultProfile", c.DefaultProfile, "dev")
				equal(t, "dev model", c.Profiles["dev"].Model, DefaultModel)
				equal(t, "names", c.ProfileNames(), []string{"dev", "prod"})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, mustLoad(t, file, tt.env))
		})
	}
}

func TestEnvOverrideProblemsNameTheVariable(t *testing.T) {
	env := testEnv{
		"AMELIA_PROFILES__DEV__LLM__TIMEOUT":             "soon",
		"AMELIA_PROFILES__DEV__PROXY__MAX_REQUEST_BYTES": "10 furlongs",
		"AMELIA_PROFILES__DEV__SANDBOX__NETWORK":         "opn",
		"AMELIA_PROFILES__DEV__MODLE":                    "o3",
		"AMELIA_PROFILES__DEV__SANDBOX__ALLOWED_HOSTS":   "ok.com,bad host",
		"AMELIA_DEFAULT_PROFILE":                         "nope",
	}
	got := problems(t, minimal, env)
	equal(t, "problems", got, []string{
		`profiles.dev.llm.timeout: the value from AMELIA_PROFILES__DEV__LLM__TIMEOUT is not a duration (like 90s, 10m, 14d)`,
		`profiles.dev.proxy.max_request_bytes: the value from AMELIA_PROFILES__DEV__PROXY__MAX_REQUEST_BYTES is not a size (an integer of bytes, or like 512KiB, 10MiB)`,
		`profiles.dev.sandbox.network: the value from AMELIA_PROFILES__DEV__SANDBOX__NETWORK is not one of open, allowlist, none`,
		`profiles.dev.sandbox.allowed_hosts[1]: the value from AMELIA_PROFILES__DEV__SANDBOX__ALLOWED_HOSTS is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
		`profiles.dev.modle: unknown key, did you mean model? (known: model, max_turns, retention, agent, commit_build_outputs, llm, git, proxy, sandbox, mcp) (set by AMELIA_PROFILES__DEV__MODLE)`,
		`default_profile: the value from AMELIA_DEFAULT_PROFILE is not a profile (profiles: dev)`,
	})
}

// An override names a profile the config has; one for any other profile
// (a typo of its name, a variable left over from another config) is
// reported naming the variable, not made into a profile that then lacks
// its provider.
func TestEnvOverrideOfNoProfile(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        testEnv
		want       []string
	}{
		{
			name: "one variable",
			file: minimal,
			env:  testEnv{"AMELIA_PROFILES__DEVV__SANDBOX__NETWORK": "none"},
			want: []string{`environment variable AMELIA_PROFILES__DEVV__SANDBOX__NETWORK: no profile "devv" (profiles: dev); set AMELIA_PROFILES__DEVV__... only for a profile the config has, or add profile devv to the config`},
		},
		{
			name: "a whole profile's worth, beside an override that applies",
			file: minimal + "    model: \"\"\n",
			env: testEnv{
				"AMELIA_PROFILES__CI__SANDBOX__PROVIDER": "local",
				"AMELIA_PROFILES__CI__MODEL":             "o3",
				"AMELIA_PROFILES__DEV__MODEL":            "o3",
			},
			want: []string{`environment variables AMELIA_PROFILES__CI__MODEL, AMELIA_PROFILES__CI__SANDBOX__PROVIDER: no profile "ci" (profiles: dev); set AMELIA_PROFILES__CI__... only for a profile the config has, or add profile ci to the config`},
		},
		{
			name: "a file without profiles",
			file: "default_profile: dev\n",
			env:  testEnv{"AMELIA_PROFILES__DEV__SANDBOX__PROVIDER": "docker"},
			want: []string{
				`environment variable AMELIA_PROFILES__DEV__SANDBOX__PROVIDER: no profile "dev" (the config has none); set AMELIA_PROFILES__DEV__... only for a profile the config has, or add profile dev to the config`,
				"profiles: no profiles defined",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			equal(t, "problems", problems(t, tc.file, tc.env), tc.want)
		})
	}

	// The built-in default has one profile, local.
	env := testEnv{"AMELIA_PROFILES__DEV__SANDBOX__PROVIDER": "docker"}
	_, err := Load(env.options("", t.TempDir()))
	equal(t, "error", errString(err), `built-in default config: environment variable AMELIA_PROFILES__DEV__SANDBOX__PROVIDER: no profile "dev" (profiles: local); set AMELIA_PROFILES__DEV__... only for a profile the config has, or add profile dev to the config`)
}

func TestInterpolation(t *testing.T) {
	const file = `
profiles:
  dev:
    model: ${MODEL}
    llm:
      base_url: ${BASE:-https://llm.example/v1}
      api_key: "${KEY_PREFIX:-sk}-${KEY}"
    sandbox:
      provider: ${PROVIDER:-docker}
      network: ${NET:-allowlist}
      allowed_hosts: ["${HOST}", "${OTHER:-pypi.org}"]
      docker:
        image: "${REGISTRY:-docker.io}/amelia:${TAG:-latest}"
        price: "cost $5, pa$$word, $HOME, $${LITERAL}, trailing $"
        nested:
          - {name: "${NAME}", n: 3}
          - plain
        ${KEY_NOT_EXPANDED}: kept
`
	env := testEnv{"MODEL": "o3", "KEY": "secret", "HOST": "github.com", "TAG": "", "NAME": "n1", "NET": ""}
	c := mustLoad(t, file, env)
	p := mustProfile(t, c, "dev")
	equal(t, "model", p.Model, "o3")
	equal(t, "base_url", p.LLM.BaseURL, "https://llm.example/v1")
	equal(t, "api_key", p.LLM.APIKey, "sk-secret")
	equal(t, "provider", p.Sandbox.Provider, "docker")
	equal(t, "network (set but empty uses the default)", p.Sandbox.Network, sdk.NetworkAllowlist)
	equal(t, "allowed_hosts", p.Sandbox.AllowedHosts, []string{"github.com", "pypi.org"})
	equal(t, "docker settings", p.Sandbox.ProviderSettings(), map[string]any{
		"image":               "docker.io/amelia:latest",
		"price":               "cost $5, pa$$word, $HOME, ${LITERAL}, trailing $",
		"nested":              []any{map[string]any{"name": "n1", "n": 3}, "plain"},
		"${KEY_NOT_EXPANDED}": "kept",
	})
}

func TestInterpolationProblems(t *testing.T) {
	const file = `
profiles:
  dev:
    model: ${MODEL}
    llm: {api_key: "${A}${B:-${C}}"}
    sandbox:
      provider: docker
      network: allowlist
      allowed_hosts: [ok.com, "${HOST}"]
      docker:
        env: [{X: "${DEEP}"}]
        bad: "${unterminated"
        name: "${1X}"
`
	got := problems(t, file, testEnv{})
	equal(t, "problems", got, []string{
		`profiles.dev.model: environment variable MODEL is not set (write ${MODEL:-default} to give a default)`,
		`profiles.dev.llm.api_key: environment variable A is not set (write ${A:-default} to give a default)`,
		`profiles.dev.llm.api_key: environment variable C is not set (write ${C:-default} to give a default)`,
		`profiles.dev.sandbox.allowed_hosts[1]: environment variable HOST is not set (write ${HOST:-default} to give a default)`,
		`profiles.dev.sandbox.docker.bad: unterminated reference "${unterminated" (want ${NAME} or ${NAME:-default})`,
		`profiles.dev.sandbox.docker.env[0].X: environment variable DEEP is not set (write ${DEEP:-default} to give a default)`,
		`profiles.dev.sandbox.docker.name: invalid reference "${1X}" (want ${NAME} or ${NAME:-default}; write $${ for a literal ${)`,
	})
}

func TestExpand(t *testing.T) {
	env := testEnv{"A": "a", "E": "", "N": "${A}"}
	lookup := env.options("", "").LookupEnv
	tests := []struct {
		in, want string
		unset    []string
		err      string
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "a"},
		{in: "x${A}y${A}z", want: "xayaz"},
		{in: "${E}", want: ""},
		{in: "${E:-d}", want: "d"},
		{in: "${U:-d}", want: "d"},
		{in: "${U:-}", want: ""},
		{in: "${U:-a:-b}", want: "a:-b"},
		{in: "${U:-${A}}", want: "a"},
		{in: "${U:-${V:-deep}}", want: "deep"},
		{in: "${N}", want: "${A}"}, // values are not expanded again
		{in: "${U}", want: "", unset: []string{"U"}},
		{in: "${U}${V}", want: "", unset: []string{"U", "V"}},
		{in: "$", want: "$"},
		{in: "$A", want: "$A"},
		{in: "$$", want: "$$"},
		{in: "a$", want: "a$"},
		{in: "$${A}", want: "${A}"},
		{in: "$$${A}", want: "$${A}"}, // "$" then the literal "${"
		{in: "${", err: "unterminated"},
		{in: "${A", err: "unterminated"},
		{in: "${}", err: "invalid reference"},
		{in: "${A B}", err: "invalid reference"},
		{in: "${A:}", err: "invalid reference"},
	}
	for _, tt := range tests {
		got, err := expand(tt.in, lookup)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("expand(%q): error %v, want one containing %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("expand(%q): %v", tt.in, err)
			continue
		}
		if got.value != tt.want || strings.Join(got.unset, ",") != strings.Join(tt.unset, ",") {
			t.Errorf("expand(%q) = %q unset %v, want %q unset %v", tt.in, got.value, got.unset, tt.want, tt.unset)
		}
	}
}

func TestDottedKeysSurvive(t *testing.T) {
	const file = `
profiles:
  dev:
    sandbox:
      provider: docker
      docker:
        labels:
          com.example.team: platform
          com.example.owner: amelia
        a.b: {c.d: 1}
`
	env := testEnv{"AMELIA_PROFILES__DEV__SANDBOX__DOCKER__LABELS__COM.EXAMPLE.TEAM": "infra"}
	c := mustLoad(t, file, env)
	equal(t, "docker settings", c.Profiles["dev"].Sandbox.ProviderSettings(), map[string]any{
		"labels": map[string]any{"com.example.team": "infra", "com.example.owner": "amelia"},
		"a.b":    map[string]any{"c.d": 1},
	})

	// And problems under such keys quote them.
	got := problems(t, `
profiles:
  dev:
    sandbox:
      provider: docker
      docker: {labels: {"com.example.team": "${TEAM}"}}
`, nil)
	equal(t, "problems", got, []string{
		`profiles.dev.sandbox.docker.labels."com.example.team": environment variable TEAM is not set (write ${TEAM:-default} to give a default)`,
	})
}

func TestMalformedYAML(t *testing.T) {
	tests := []struct {
		name, content string
		want          string // after "<file>: "
	}{
		{
			name:    "tab indentation",
			content: "profiles:\n  dev:\n\tmodel: x\n",
			want:    "invalid YAML: line 3: found character that cannot start any token",
		},
		{
			name:    "a key indented out of its block",
			content: "default_profile: dev\nprofiles:\n  dev:\n    model: m\n    sandbox: {provider: local}\n   llm: {}\n",
			want:    "invalid YAML: line 6: did not find expected key in the block that starts at line 2 (check the indentation of line 6)",
		},
		{
			name:    "a key indented out of its block, after a flow map over two lines",
			content: "default_profile: dev\nprofiles:\n  dev:\n    model: m\n    sandbox: {provider: local,\n      network: open}\n   llm: {}\n",
			want:    "invalid YAML: line 7: did not find expected key in the block that starts at line 2 (check the indentation of line 7)",
		},
		{
			name:    "a key indented out of its block, after a quoted string over two lines",
			content: "default_profile: dev\nprofiles:\n  dev:\n    model: \"a\n      b\"\n   llm: {}\n",
			want:    "invalid YAML: line 6: did not find expected key in the block that starts at line 2 (check the indentation of line 6)",
		},
		{
			name:    "mapping in a scalar",
			content: "profiles:\n  dev: a: b\n",
			want:    "invalid YAML: line 2: mapping values are not allowed in this context",
		},
		{
			name:    "duplicate key",
			content: "profiles: {}\nprofiles: {}\n",
			want:    `invalid YAML: line 2: mapping key "profiles" already defined at line 1`,
		},
		{
			name:    "top level is a list",
			content: "# comment\n- a\n- b\n",
			want:    "invalid config: line 2: the top level must be a map (default_profile, profiles), got a list",
		},
		{
			name:    "top level is a scalar",
			content: "hello\n",
			want:    "invalid config: line 1: the top level must be a map (default_profile, profiles), got a scalar",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, path, err := loadString(t, tt.content, nil)
			equal(t, "error", errString(err), path+": "+tt.want)
			var ve *ValidationError
			if errors.As(err, &ve) {
				t.Errorf("malformed YAML gave a *ValidationError")
			}
		})
	}
}

func TestEmptyFile(t *testing.T) {
	for _, content := range []string{"", "# only a comment\n", "profiles:\n", "profiles: {}\n"} {
		got := problems(t, content, nil)
		equal(t, "problems of "+strings.TrimSpace(content), got, []string{"profiles: no profiles defined"})
	}
}

func TestExampleConfig(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "example.yaml")
	c, err := Load(testEnv{"HOME": "/home/u"}.options(path, "/home/u"))
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			t.Fatalf("%v\n%s", err, problemLines(ve))
		}
		t.Fatal(err)
	}
	equal(t, "profiles", c.ProfileNames(), []string{"daytona", "docker", "local", "ssh"})
	equal(t, "default", c.DefaultProfile, "docker")
	for _, name := range c.ProfileNames() {
		p := c.Profiles[name]
		equal(t, name+" provider", p.Sandbox.Provider, name)
		if p.Sandbox.ProviderSettings() == nil {
			t.Errorf("profile %s has no settings for its provider", name)
		}
	}
	equal(t, "local root", c.Profiles["local"].Sandbox.ProviderSettings()["root"], "/home/u/.local/state/amelia/local")
	docker := c.Profiles["docker"]
	equal(t, "docker labels", docker.Sandbox.Settings["docker"]["labels"], map[string]any{"com.example.team": "platform"})
	equal(t, "docker model", docker.Model, "gpt-4.1")
	local := c.Profiles["local"]
	equal(t, "local timeout", local.LLM.Timeout, 10*time.Minute)
	equal(t, "local proxy", local.Proxy, Proxy{AuditDir: "/home/u/.local/state/amelia/audit", MaxRequestBytes: 10 << 20})
	equal(t, "docker git (GITHUB_TOKEN unset)", docker.Git, Git{Username: "x-access-token"})
	equal(t, "docker mcp", docker.MCP, []MCPServer{{Name: "github", Command: []string{"github-mcp-server", "stdio", "--read-only"},
		Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": ""}}})
	equal(t, "docker anthropic", docker.LLM.Anthropic, (*Upstream)(nil))
	daytona := c.Profiles["daytona"]
	equal(t, "daytona anthropic", daytona.LLM.Anthropic, &Upstream{BaseURL: "https://api.anthropic.com/v1", APIKeyEnv: "ANTHROPIC_API_KEY"})
	equal(t, "daytona gemini", daytona.LLM.Gemini, &Upstream{BaseURL: DefaultGeminiBaseURL, APIKeyEnv: DefaultGeminiKeyEnv})
	equal(t, "docker gemini", docker.LLM.Gemini, (*Upstream)(nil))
	equal(t, "daytona git", daytona.Git, Git{TokenEnv: "GITHUB_TOKEN", Username: "x-access-token"})
	equal(t, "ssh llm", c.Profiles["ssh"].LLM, LLM{Upstream: Upstream{BaseURL: "http://gpu-box.internal:8000/v1", APIKey: "not-needed"}, Timeout: DefaultLLMTimeout})
}

// The shape the foundation issue pins, verbatim: it must load as written
// (allowed_hosts is kept with network open, ready for a switch to allowlist).
func TestPinnedShape(t *testing.T) {
	c := mustLoad(t, `default_profile: dev
profiles:
  dev:
    model: gpt-4.1-mini
    llm: {base_url: https://api.openai.com/v1, api_key_env: OPENAI_API_KEY}
    sandbox:
      provider: docker          # local | docker | ssh | daytona | any installed plugin name
      network: open             # open | allowlist | none
      allowed_hosts: [github.com, pypi.org]
      # provider-specific settings live under the provider's name, passed to the plugin as-is:
      docker: {image: amelia-sandbox:latest}
`, nil)
	p, err := c.Profile("")
	if err != nil {
		t.Fatal(err)
	}
	got := withoutEnv(*p)
	equal(t, "profile", got, Profile{
		Name:      "dev",
		Model:     "gpt-4.1-mini",
		MaxTurns:  DefaultMaxTurns,
		Retention: DefaultRetention,
		LLM:       LLM{Upstream: Upstream{BaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY"}, Timeout: DefaultLLMTimeout}, Git: defaultGit, Proxy: defaultProxy,
		Sandbox: Sandbox{
			Provider:     "docker",
			Network:      sdk.NetworkOpen,
			AllowedHosts: []string{"github.com", "pypi.org"},
			Settings:     map[string]map[string]any{"docker": {"image": "amelia-sandbox:latest"}},
		},
		source: p.source,
	})
}

// A problem a provider finds in a loaded profile's settings reads like
// Load's own: its key from the top of the file, and the variables that
// set it.
func TestProblemAt(t *testing.T) {
	const file = `
default_profile: dev
profiles:
  dev:
    sandbox:
      provider: docker
      docker: {resources: {memory: 4g}, labels: {"com.example.team": x}}
  here:
    sandbox: {provider: local, none: {root: /tmp/x}}
`
	env := testEnv{"AMELIA_PROFILES__DEV__SANDBOX__DOCKER__RESOURCES__MEMORY": "4x"}
	c := mustLoad(t, file, env)
	dev, here := mustProfile(t, c, "dev"), mustProfile(t, c, "here")
	equal(t, "dev's block", dev.SettingsKey(), "sandbox.docker")
	equal(t, "here's block, under local's alias", here.SettingsKey(), "sandbox.none")
	equal(t, "the block of another provider", dev.WithProvider("ssh").SettingsKey(), "sandbox.ssh")
	for _, tc := range []struct {
		p        *Profile
		key, msg string
		want     string
	}{
		{dev, "sandbox.docker.resources.memory", `"4x" is not a size`, `profiles.dev.sandbox.docker.resources.memory: "${AMELIA_PROFILES__DEV__SANDBOX__DOCKER__RESOURCES__MEMORY}" is not a size`},
		{dev, "sandbox.docker.resources.memory", `not a size`, `profiles.dev.sandbox.docker.resources.memory: not a size (set by AMELIA_PROFILES__DEV__SANDBOX__DOCKER__RESOURCES__MEMORY)`},
		{dev, "sandbox.docker", "bad block", `profiles.dev.sandbox.docker: bad block (set by AMELIA_PROFILES__DEV__SANDBOX__DOCKER__RESOURCES__MEMORY)`},
		{dev, `sandbox.docker.labels."com.example.team"`, "no", `profiles.dev.sandbox.docker.labels."com.example.team": no`},
		{dev, "sandbox.docker.mounts[2].path", "no", `profiles.dev.sandbox.docker.mounts[2].path: no`},
		{here, "sandbox.network", "cannot", `profiles.here.sandbox.network: cannot`},
		{here, "", "whole", `profiles.here: whole`},
		{here, "sandbox..x", "not a path", `profiles.here.sandbox..x: not a path`},
	} {
		if got := tc.p.ProblemAt(tc.key, tc.msg).String(); got != tc.want {
			t.Errorf("ProblemAt(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// A provider quotes the value it finds wrong; one that came from a
// ${VAR} (a key put where a variable's name goes) is shown as written.
func TestProblemAtHidesExpandedValues(t *testing.T) {
	const file = `
profiles:
  dev:
    sandbox:
      provider: daytona
      daytona: {api_key_env: "${DAYTONA_KEY}", target: "${REGION}"}
`
	env := testEnv{"DAYTONA_KEY": "dtn_0123456789abcdefXYZ", "REGION": "eu"}
	p := mustProfile(t, mustLoad(t, file, env), "dev")
	got := p.ProblemAt("sandbox.daytona.api_key_env", `"dtn_0123456789abcdefXYZ" is not an environment variable name`).String()
	want := `profiles.dev.sandbox.daytona.api_key_env: "${DAYTONA_KEY}" is not an environment variable name`
	equal(t, "problem", got, want)
	// A short value is replaced where it is quoted; elsewhere it is too
	// likely part of other words.
	got = p.ProblemAt("sandbox.daytona.target", `"eu" is not a region: try eu-west`).String()
	equal(t, "short value", got, `profiles.dev.sandbox.daytona.target: "${REGION}" is not a region: try eu-west`)
}

// withoutEnv is p without what it keeps of the environment, for comparing
// with a Profile written out: functions never compare equal.
func withoutEnv(p Profile) Profile {
	p.lookupEnv, p.envKeys, p.hide = nil, nil, nil
	return p
}

func TestLLMAPI(t *testing.T) {
	for _, tt := range []struct {
		name, llm string
		want      LLM
	}{
		{"default", `{}`, LLM{Upstream: Upstream{BaseURL: DefaultBaseURL, APIKeyEnv: DefaultAPIKeyEnv}, Timeout: DefaultLLMTimeout}},
		{"anthropic gets Anthropic's URL and key variable", `{api: anthropic}`,
			LLM{API: APIAnthropic, Upstream: Upstream{BaseURL: DefaultAnthropicBaseURL, APIKeyEnv: DefaultAnthropicKeyEnv}, Timeout: DefaultLLMTimeout}},
		{"anthropic with its own URL and key", `{api: anthropic, base_url: "http://localhost:3/v1", api_key_env: MY_KEY}`,
			LLM{API: APIAnthropic, Upstream: Upstream{BaseURL: "http://localhost:3/v1", APIKeyEnv: "MY_KEY"}, Timeout: DefaultLLMTimeout}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, profileWith("llm: "+tt.llm+"\nsandbox: {provider: docker}\n"), nil)
			equal(t, "llm", mustProfile(t, c, "dev").LLM, tt.want)
		})
	}
	for _, tt := range []struct{ llm, want string }{
		{`{api: gemini}`, `profiles.dev.llm.api: "gemini" is not an API the proxy translates to: keep llm for an openai or anthropic upstream, and add an llm.gemini block for Google's Gemini API (the gemini agent's)`},
		{`{api: vertex}`, `profiles.dev.llm.api: "vertex" is not an API the proxy speaks: use openai (chat completions) or anthropic (messages)`},
		{`{api: anthropic, anthropic: {}}`, `profiles.dev.llm.anthropic: is redundant with api: anthropic (the profile's upstream already speaks Anthropic's API); remove one`},
	} {
		got := problems(t, profileWith("llm: "+tt.llm+"\nsandbox: {provider: docker}\n"), nil)
		if len(got) != 1 || !strings.Contains(got[0], tt.want) {
			t.Errorf("llm: %s: problems %q, want %q", tt.llm, got, tt.want)
		}
	}
}
