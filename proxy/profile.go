package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
)

// ProfileRun is the RunConfig of run id of profile p (but for the run's
// Model, which the caller sets): its upstreams with
// their keys read from the host's environment (lookupEnv; nil reads the
// environment p was loaded with), its network policy and git settings. repos
// are the run's repository URLs; auditDir is used when the profile sets no
// proxy.audit_dir. A key variable that is not set is an error here, before
// anything starts.
func ProfileRun(p *config.Profile, lookupEnv func(string) (string, bool), id string, repos []string, auditDir string) (RunConfig, error) {
	cfg := RunConfig{
		ID:              id,
		Profile:         p.Name,
		Timeout:         p.LLM.Timeout,
		MaxRequestBytes: p.Proxy.MaxRequestBytes,
		Network:         p.Sandbox.Network,
		AllowedHosts:    p.Sandbox.AllowedHosts,
		Repos:           repos,
		Git:             GitAuth{Username: p.Git.Username},
		AuditDir:        auditDir,
		MCP:             mcpRunServers(p.MCP),
	}
	if p.Proxy.AuditDir != "" {
		cfg.AuditDir = p.Proxy.AuditDir
	}
	key, err := p.LLMKey(lookupEnv)
	if err != nil {
		return RunConfig{}, err
	}
	if p.LLM.API == config.APIAnthropic {
		// The profile's only upstream speaks Anthropic's API: /v1 chat
		// completions are translated to it.
		cfg.Anthropic = &Upstream{BaseURL: p.LLM.BaseURL, Key: key}
	} else {
		cfg.OpenAI = Upstream{BaseURL: p.LLM.BaseURL, Key: key}
	}
	if p.LLM.Anthropic != nil {
		key, err := p.AnthropicKey(lookupEnv)
		if err != nil {
			return RunConfig{}, err
		}
		cfg.Anthropic = &Upstream{BaseURL: p.LLM.Anthropic.BaseURL, Key: key}
	}
	if p.LLM.Gemini != nil {
		key, err := p.GeminiKey(lookupEnv)
		if err != nil {
			return RunConfig{}, err
		}
		cfg.Gemini = &Upstream{BaseURL: p.LLM.Gemini.BaseURL, Key: key}
	}
	if cfg.Git.Token, err = p.GitToken(lookupEnv); err != nil {
		return RunConfig{}, err
	}
	return cfg, nil
}

// NewRunID returns a fresh run id from prefix (a valid run id itself):
// prefix-YYYYMMDD-HHMMSS-xxxxxxxx, the prefix cut short where the whole
// would pass 63 characters (a workflow id may take all 63). Its 32 random
// bits keep another run in the sandbox from making the run's directory
// before it (it is named by the run id).
func NewRunID(prefix string, now time.Time) string {
	b := make([]byte, 4)
	rand.Read(b)
	suffix := "-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
	if max := 63 - len(suffix); len(prefix) > max {
		prefix = prefix[:max]
	}
	return prefix + suffix
}
