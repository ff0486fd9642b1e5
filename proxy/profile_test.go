package proxy_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/proxy"
)

func loadProfile(t *testing.T, yaml string, env map[string]string) *config.Profile {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c, err := config.Load(config.Options{Path: path, LookupEnv: lookup, HomeDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Profile("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestProfileRun(t *testing.T) {
	p := loadProfile(t, `
profiles:
  dev:
    llm:
      base_url: https://llm.test/api/v1
      api_key_env: OR_KEY
      timeout: 90s
      anthropic: {api_key_env: ANT_KEY}
    git: {token_env: GH_TOKEN}
    proxy: {audit_dir: /var/log/amelia, max_request_bytes: 1MiB}
    sandbox:
      provider: local
      network: allowlist
      allowed_hosts: [forge.test]
`, nil)
	env := map[string]string{"OR_KEY": "sk-or", "ANT_KEY": "sk-ant", "GH_TOKEN": "ghs_x"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := proxy.ProfileRun(p, lookup, "run-7", []string{"https://forge.test/o/r"}, "/default/audit")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ID != "run-7" || cfg.Profile != "dev" || cfg.OpenAI != (proxy.Upstream{BaseURL: "https://llm.test/api/v1", Key: "sk-or"}) ||
		cfg.Anthropic == nil || *cfg.Anthropic != (proxy.Upstream{BaseURL: config.DefaultAnthropicBaseURL, Key: "sk-ant"}) ||
		cfg.Timeout != 90*time.Second || cfg.MaxRequestBytes != 1<<20 || cfg.Network != sdk.NetworkAllowlist ||
		strings.Join(cfg.AllowedHosts, ",") != "forge.test" || cfg.Git != (proxy.GitAuth{Token: "ghs_x", Username: config.DefaultGitUsername}) ||
		cfg.AuditDir != "/var/log/amelia" || len(cfg.Repos) != 1 {
		t.Errorf("RunConfig %+v", cfg)
	}

	delete(env, "ANT_KEY")
	if _, err := proxy.ProfileRun(p, lookup, "run-8", nil, "/a"); err == nil || !strings.Contains(err.Error(), "ANT_KEY is not set") {
		t.Errorf("missing anthropic key: %v", err)
	}

	plain := loadProfile(t, "profiles: {dev: {sandbox: {provider: local}}}\n", nil)
	cfg, err = proxy.ProfileRun(plain, func(k string) (string, bool) {
		return map[string]string{"OPENAI_API_KEY": "sk-o"}[k], k == "OPENAI_API_KEY"
	}, "r", nil, "/default/audit")
	if err != nil || cfg.AuditDir != "/default/audit" || cfg.Anthropic != nil || cfg.Git.Token != "" || cfg.OpenAI.Key != "sk-o" {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
}

// A profile's MCP servers are the run's, with the values of their ${VAR}s.
func TestProfileRunMCP(t *testing.T) {
	p := loadProfile(t, `
profiles:
  dev:
    llm: {api_key: ""}
    sandbox: {provider: local}
    mcp:
      gh: {command: [github-mcp-server, stdio], env: {GITHUB_PERSONAL_ACCESS_TOKEN: "${GH}"}}
      docs: {url: "https://docs.test/mcp", headers: {Authorization: "Bearer ${DOCS}"}}
`, map[string]string{"GH": "ghp_x", "DOCS": "d-1"})
	cfg, err := proxy.ProfileRun(p, nil, "run-9", nil, "/a")
	if err != nil {
		t.Fatal(err)
	}
	want := []proxy.MCPServer{
		{Name: "docs", URL: "https://docs.test/mcp", Headers: map[string]string{"Authorization": "Bearer d-1"}},
		{Name: "gh", Command: []string{"github-mcp-server", "stdio"}, Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}},
	}
	if !reflect.DeepEqual(cfg.MCP, want) {
		t.Errorf("RunConfig.MCP = %+v, want %+v", cfg.MCP, want)
	}
}

func TestNewRunID(t *testing.T) {
	id := proxy.NewRunID("proxy", time.Date(2026, 11, 23, 5, 46, 0, 0, time.UTC))
	if !strings.HasPrefix(id, "proxy-20261123-054600-") || !proxy.ValidRunID(id) {
		t.Errorf("NewRunID = %q", id)
	}
	// A workflow id may be 63 characters long: the run id stays valid.
	long := strings.Repeat("w", 63)
	if id := proxy.NewRunID(long, time.Now()); !proxy.ValidRunID(id) || !strings.HasPrefix(id, long[:38]+"-") {
		t.Errorf("NewRunID of a 63-character prefix = %q", id)
	}
}

func TestProfileRunAnthropicOnly(t *testing.T) {
	p := loadProfile(t, `
profiles:
  dev:
    model: claude-test
    llm: {api: anthropic}
    sandbox: {provider: local}
`, nil)
	lookup := func(k string) (string, bool) {
		return map[string]string{"ANTHROPIC_API_KEY": "sk-ant"}[k], k == "ANTHROPIC_API_KEY"
	}
	cfg, err := proxy.ProfileRun(p, lookup, "run-1", nil, "/audit")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OpenAI != (proxy.Upstream{}) || cfg.Anthropic == nil || *cfg.Anthropic != (proxy.Upstream{BaseURL: config.DefaultAnthropicBaseURL, Key: "sk-ant"}) {
		t.Errorf("upstreams: openai %+v, anthropic %+v", cfg.OpenAI, cfg.Anthropic)
	}
}

func TestProfileRunGemini(t *testing.T) {
	p := loadProfile(t, `
profiles:
  dev:
    llm: {gemini: {}}
    sandbox: {provider: local}
`, nil)
	env := map[string]string{"OPENAI_API_KEY": "sk-o", "GEMINI_API_KEY": "AIza-g"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := proxy.ProfileRun(p, lookup, "run-1", nil, "/audit")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Gemini == nil || *cfg.Gemini != (proxy.Upstream{BaseURL: config.DefaultGeminiBaseURL, Key: "AIza-g"}) || cfg.OpenAI.Key != "sk-o" {
		t.Errorf("upstreams: openai %+v, gemini %+v", cfg.OpenAI, cfg.Gemini)
	}
	delete(env, "GEMINI_API_KEY")
	if _, err := proxy.ProfileRun(p, lookup, "run-2", nil, "/a"); err == nil || !strings.Contains(err.Error(), "llm.gemini.api_key_env: GEMINI_API_KEY is not set") {
		t.Errorf("missing gemini key: %v", err)
	}
	plain := loadProfile(t, "profiles: {dev: {sandbox: {provider: local}}}\n", nil)
	if cfg, err := proxy.ProfileRun(plain, lookup, "r", nil, "/a"); err != nil || cfg.Gemini != nil {
		t.Errorf("without the block: gemini %+v, %v", cfg.Gemini, err)
	}
}
