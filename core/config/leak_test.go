package config

import (
	"errors"
	"strings"
	"testing"
)

// A value that comes from ${VAR}s is never shown expanded in a problem:
// the variable may hold a key (the wrong variable named, or a key put in
// the wrong variable). The problem still names the file, the key and what
// was written.
func TestProblemsNeverShowExpandedValues(t *testing.T) {
	// Fails every rule: upper case, '/', '+', '=', not a number or a URL.
	const secret = "sk-proj/Abc+123=SECRETsecret9f3a"
	env := testEnv{"OPENAI_API_KEY": secret}
	const sandbox = "sandbox: {provider: docker}\n"
	tests := []struct {
		name    string
		content string
		env     testEnv // added to env
		key     string  // the problem's key
	}{
		{"enum", profileWith("sandbox: {provider: docker, network: '${OPENAI_API_KEY}'}\n"), nil, "profiles.dev.sandbox.network"},
		{"enum with text around", profileWith("sandbox: {provider: docker, network: 'x-${OPENAI_API_KEY}-y'}\n"), nil, "profiles.dev.sandbox.network"},
		{"name", profileWith("sandbox: {provider: '${OPENAI_API_KEY}'}\n"), nil, "profiles.dev.sandbox.provider"},
		{"duration", profileWith("llm: {timeout: '${OPENAI_API_KEY}'}\n" + sandbox), nil, "profiles.dev.llm.timeout"},
		{"size", profileWith("proxy: {max_request_bytes: '${OPENAI_API_KEY}'}\n" + sandbox), nil, "profiles.dev.proxy.max_request_bytes"},
		{"size too large", profileWith("proxy: {max_request_bytes: '${BIG}'}\n" + sandbox), testEnv{"BIG": "98765432109876543"}, "profiles.dev.proxy.max_request_bytes"},
		{"path", profileWith("proxy: {audit_dir: '${OPENAI_API_KEY}'}\n" + sandbox), nil, "profiles.dev.proxy.audit_dir"},
		{"list item", profileWith("sandbox: {provider: docker, allowed_hosts: [github.com, '${OPENAI_API_KEY}']}\n"), nil, "profiles.dev.sandbox.allowed_hosts[1]"},
		{"host:port", profileWith("sandbox: {provider: docker, egress_check_targets: ['${OPENAI_API_KEY}']}\n"), nil, "profiles.dev.sandbox.egress_check_targets[0]"},
		{"nested upstream URL", profileWith("llm: {anthropic: {base_url: '${OPENAI_API_KEY}'}}\n" + sandbox), nil, "profiles.dev.llm.anthropic.base_url"},
		{"nested upstream key variable", profileWith("llm: {anthropic: {api_key_env: '${OPENAI_API_KEY}'}}\n" + sandbox), nil, "profiles.dev.llm.anthropic.api_key_env"},
		{"git username", profileWith("git: {username: '${OPENAI_API_KEY}'}\n" + sandbox), testEnv{"OPENAI_API_KEY": secret + "\n"}, "profiles.dev.git.username"},
		{"default_profile", "default_profile: '${OPENAI_API_KEY}'\n" + profileWith(sandbox), nil, "default_profile"},
		{"environment override", profileWith(sandbox), testEnv{"AMELIA_PROFILES__DEV__SANDBOX__NETWORK": "${OPENAI_API_KEY}"}, "profiles.dev.sandbox.network"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := testEnv{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range tt.env {
				e[k] = v
			}
			_, path, err := loadString(t, tt.content, e)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Load: %v, want a *ValidationError", err)
			}
			all := err.Error() + "\n" + problemLines(ve)
			for _, s := range []string{strings.TrimSpace(e["OPENAI_API_KEY"]), "SECRETsecret", "98765432109876543"} {
				if strings.Contains(all, s) || strings.Contains(strings.ToLower(all), strings.ToLower(s)) {
					t.Errorf("the error shows the expanded value %q:\n%s", s, all)
				}
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file %s", err, path)
			}
			var found bool
			for _, p := range ve.Problems {
				if p.Key == tt.key {
					found = true
					if !strings.Contains(p.Message, "${") {
						t.Errorf("%s: %q does not show the value as written", p.Key, p.Message)
					}
				}
			}
			if !found {
				t.Errorf("no problem at %s:\n%s", tt.key, problemLines(ve))
			}
		})
	}
}
