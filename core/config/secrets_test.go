package config

import (
	"strings"
	"testing"
)

func TestSecretResolution(t *testing.T) {
	type resolver func(p *Profile, lookupEnv func(string) (string, bool)) (string, error)
	llmKey := func(p *Profile, l func(string) (string, bool)) (string, error) { return p.LLMKey(l) }
	anthropicKey := func(p *Profile, l func(string) (string, bool)) (string, error) { return p.AnthropicKey(l) }
	geminiKey := func(p *Profile, l func(string) (string, bool)) (string, error) { return p.GeminiKey(l) }
	gitToken := func(p *Profile, l func(string) (string, bool)) (string, error) { return p.GitToken(l) }
	tests := []struct {
		name    string
		body    string  // the profile's keys besides sandbox
		loadEnv testEnv // the environment at Load, for ${VAR}s
		host    testEnv // the environment at resolution
		resolve resolver
		want    string
		wantErr string
	}{
		// llm.
		{
			name:    "llm: the default variable, set",
			host:    testEnv{"OPENAI_API_KEY": "sk-SECRET-1"},
			resolve: llmKey,
			want:    "sk-SECRET-1",
		},
		{
			name:    "llm: the default variable, unset",
			resolve: llmKey,
			wantErr: "profile dev: llm.api_key_env: OPENAI_API_KEY is not set in this environment (export it, or set llm.api_key)",
		},
		{
			name:    "llm: the variable set but empty",
			body:    "llm: {api_key_env: MY_KEY}",
			host:    testEnv{"MY_KEY": "", "OPENAI_API_KEY": "sk-SECRET-other"},
			resolve: llmKey,
			wantErr: "profile dev: llm.api_key_env: MY_KEY is set but empty in this environment (export it, or set llm.api_key)",
		},
		{
			name:    "llm: the variable holds a line break",
			host:    testEnv{"OPENAI_API_KEY": "sk-SECRET-1\n"},
			resolve: llmKey,
			wantErr: "profile dev: llm.api_key_env: the value of OPENAI_API_KEY contains a line break or NUL, which cannot be sent (export it without one)",
		},
		{
			name:    "llm: a literal key, expanded at load",
			body:    `llm: {api_key: "${K}"}`,
			loadEnv: testEnv{"K": "sk-SECRET-lit"},
			host:    testEnv{"OPENAI_API_KEY": "sk-SECRET-env"},
			resolve: llmKey,
			want:    "sk-SECRET-lit",
		},
		{
			name:    "llm: an explicitly empty key is no key",
			body:    `llm: {base_url: "http://127.0.0.1:11434/v1", api_key: ""}`,
			resolve: llmKey,
			want:    "",
		},
		// llm.anthropic.
		{
			name:    "anthropic: no block, no key and no error",
			host:    testEnv{"ANTHROPIC_API_KEY": "sk-SECRET-a"},
			resolve: anthropicKey,
			want:    "",
		},
		{
			name:    "anthropic: the default variable, set",
			body:    "llm: {anthropic: {}}",
			host:    testEnv{"ANTHROPIC_API_KEY": "sk-SECRET-a", "OPENAI_API_KEY": "sk-SECRET-o"},
			resolve: anthropicKey,
			want:    "sk-SECRET-a",
		},
		{
			name:    "anthropic: the default variable, unset",
			body:    "llm: {anthropic: {}}",
			host:    testEnv{"OPENAI_API_KEY": "sk-SECRET-o"},
			resolve: anthropicKey,
			wantErr: "profile dev: llm.anthropic.api_key_env: ANTHROPIC_API_KEY is not set in this environment (export it, or set llm.anthropic.api_key)",
		},
		{
			name:    "anthropic: set but empty",
			body:    "llm: {anthropic: {api_key_env: AK}}",
			host:    testEnv{"AK": ""},
			resolve: anthropicKey,
			wantErr: "profile dev: llm.anthropic.api_key_env: AK is set but empty in this environment (export it, or set llm.anthropic.api_key)",
		},
		{
			name:    "anthropic: a literal key",
			body:    "llm: {anthropic: {api_key: sk-ant-SECRET}}",
			resolve: anthropicKey,
			want:    "sk-ant-SECRET",
		},
		{
			name:    "anthropic: an explicitly empty key is no key",
			body:    `llm: {anthropic: {api_key: ""}}`,
			resolve: anthropicKey,
			want:    "",
		},
		// llm.gemini.
		{
			name:    "gemini: no block, no key and no error",
			host:    testEnv{"GEMINI_API_KEY": "AIza-SECRET-g"},
			resolve: geminiKey,
			want:    "",
		},
		{
			name:    "gemini: the default variable, set",
			body:    "llm: {gemini: {}}",
			host:    testEnv{"GEMINI_API_KEY": "AIza-SECRET-g", "OPENAI_API_KEY": "sk-SECRET-o"},
			resolve: geminiKey,
			want:    "AIza-SECRET-g",
		},
		{
			name:    "gemini: the default variable, unset",
			body:    "llm: {gemini: {}}",
			host:    testEnv{"OPENAI_API_KEY": "sk-SECRET-o"},
			resolve: geminiKey,
			wantErr: "profile dev: llm.gemini.api_key_env: GEMINI_API_KEY is not set in this environment (export it, or set llm.gemini.api_key)",
		},
		{
			name:    "gemini: a variable of its own",
			body:    "llm: {gemini: {api_key_env: GK}}",
			host:    testEnv{"GK": "AIza-SECRET-own", "GEMINI_API_KEY": "AIza-SECRET-g"},
			resolve: geminiKey,
			want:    "AIza-SECRET-own",
		},
		{
			name:    "gemini: a literal key",
			body:    "llm: {gemini: {api_key: AIza-SECRET-lit}}",
			resolve: geminiKey,
			want:    "AIza-SECRET-lit",
		},
		// git.
		{
			name:    "git: no token, the host's credential store",
			host:    testEnv{"GITHUB_TOKEN": "ghp_SECRET"},
			resolve: gitToken,
			want:    "",
		},
		{
			name:    "git: token_env set",
			body:    "git: {token_env: GITHUB_TOKEN}",
			host:    testEnv{"GITHUB_TOKEN": "ghp_SECRET"},
			resolve: gitToken,
			want:    "ghp_SECRET",
		},
		{
			name:    "git: token_env unset",
			body:    "git: {token_env: GITHUB_TOKEN}",
			resolve: gitToken,
			wantErr: "profile dev: git.token_env: GITHUB_TOKEN is not set in this environment (export it, set git.token, or remove git.token_env to use the host's git credentials)",
		},
		{
			name:    "git: token_env empty",
			body:    "git: {token_env: GITHUB_TOKEN}",
			host:    testEnv{"GITHUB_TOKEN": ""},
			resolve: gitToken,
			wantErr: "profile dev: git.token_env: GITHUB_TOKEN is set but empty in this environment (export it, set git.token, or remove git.token_env to use the host's git credentials)",
		},
		{
			name:    "git: token_env holds a line break",
			body:    "git: {token_env: GITHUB_TOKEN}",
			host:    testEnv{"GITHUB_TOKEN": "ghp_SECRET\nhost=evil.example"},
			resolve: gitToken,
			wantErr: "profile dev: git.token_env: the value of GITHUB_TOKEN contains a line break or NUL, which cannot be sent (export it without one)",
		},
		{
			name:    "git: a literal token",
			body:    `git: {token: "${GH}"}`,
			loadEnv: testEnv{"GH": "ghp_SECRET-lit"},
			host:    testEnv{"GITHUB_TOKEN": "ghp_SECRET-env"},
			resolve: gitToken,
			want:    "ghp_SECRET-lit",
		},
		{
			name:    "git: an explicitly empty token is no token",
			body:    `git: {token: ""}`,
			resolve: gitToken,
			want:    "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, profileWith(tt.body+"\nsandbox: {provider: docker}\n"), tt.loadEnv)
			p := mustProfile(t, c, "dev")
			got, err := tt.resolve(p, func(k string) (string, bool) {
				v, ok := tt.host[k]
				return v, ok
			})
			if tt.wantErr != "" {
				equal(t, "error", errString(err), tt.wantErr)
				equal(t, "value with an error", got, "")
				if err != nil && strings.Contains(err.Error(), "SECRET") {
					t.Errorf("error reveals a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "value", got, tt.want)
		})
	}
}

// A nil lookup reads the environment the profile was loaded with.
func TestSecretResolutionNilLookup(t *testing.T) {
	env := testEnv{"OPENAI_API_KEY": "sk-1", "AK": "sk-ant-1", "GH": "ghp_1"}
	c := mustLoad(t, profileWith("llm: {anthropic: {api_key_env: AK}}\ngit: {token_env: GH}\nsandbox: {provider: docker}\n"), env)
	p := mustProfile(t, c, "dev")
	for _, tt := range []struct {
		what string
		fn   func(func(string) (string, bool)) (string, error)
		want string
	}{
		{"LLMKey", p.LLMKey, "sk-1"}, {"AnthropicKey", p.AnthropicKey, "sk-ant-1"}, {"GitToken", p.GitToken, "ghp_1"},
	} {
		got, err := tt.fn(nil)
		if err != nil {
			t.Fatalf("%s: %v", tt.what, err)
		}
		equal(t, tt.what, got, tt.want)
	}

	// A profile built by hand has no environment: variables are unset.
	hand := &Profile{Name: "h", LLM: LLM{Upstream: Upstream{APIKeyEnv: "OPENAI_API_KEY"}}}
	_, err := hand.LLMKey(nil)
	equal(t, "error", errString(err), "profile h: llm.api_key_env: OPENAI_API_KEY is not set in this environment (export it, or set llm.api_key)")
}
