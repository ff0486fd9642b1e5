package config

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// profileWith is a config with one profile "dev" whose body is given.
func profileWith(body string) string {
	return "profiles:\n  dev:\n" + indent(body, "    ")
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n") + "\n"
}

func TestValidationRules(t *testing.T) {
	const sandbox = "sandbox: {provider: docker}\n"
	tests := []struct {
		name    string
		content string
		env     testEnv
		want    []string
	}{
		// Profile names.
		{
			name:    "profile name with capitals",
			content: "profiles:\n  Dev: {sandbox: {provider: docker}}\n",
			want:    []string{`profiles.Dev: invalid profile name: profile names become sandbox names, so use lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters`},
		},
		{
			name:    "profile name starting with a dash, and one with a dot",
			content: "default_profile: ok\nprofiles:\n  -x: {sandbox: {provider: docker}}\n  a.b: {sandbox: {provider: docker}}\n  ok: {sandbox: {provider: docker}}\n",
			want: []string{
				`profiles.-x: invalid profile name: profile names become sandbox names, so use lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters`,
				`profiles."a.b": invalid profile name: profile names become sandbox names, so use lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters`,
			},
		},
		{
			name:    "profile name of 64 characters",
			content: "profiles:\n  " + strings.Repeat("a", 64) + ": {sandbox: {provider: docker}}\n",
			want:    []string{"profiles." + strings.Repeat("a", 64) + `: invalid profile name: profile names become sandbox names, so use lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters`},
		},
		// default_profile.
		{
			name:    "default_profile names no profile",
			content: "default_profile: prod\nprofiles:\n  dev: {sandbox: {provider: docker}}\n  ci: {sandbox: {provider: local}}\n",
			want:    []string{`default_profile: "prod" is not a profile (profiles: ci, dev)`},
		},
		{
			name:    "several profiles and no default_profile",
			content: "profiles:\n  dev: {sandbox: {provider: docker}}\n  ci: {sandbox: {provider: local}}\n",
			want:    []string{`default_profile: required when there are several profiles (profiles: ci, dev)`},
		},
		{
			name:    "default_profile is not a string",
			content: "default_profile: [dev]\n" + profileWith(sandbox),
			want:    []string{`default_profile: must be a string, got a list`},
		},
		// model.
		{
			name:    "empty model",
			content: profileWith("model: ' '\n" + sandbox),
			want:    []string{`profiles.dev.model: must not be empty`},
		},
		{
			name:    "model is not a string",
			content: profileWith("model: [a, b]\n" + sandbox),
			want:    []string{`profiles.dev.model: must be a string, got a list`},
		},
		{
			name:    "model is a number",
			content: profileWith("model: 4.1\n" + sandbox),
			want:    []string{`profiles.dev.model: must be a string, got a number`},
		},
		// max_turns.
		{
			name:    "max_turns zero, too many, a fraction, not a number",
			content: "default_profile: a\nprofiles:\n  a: {max_turns: 0, sandbox: {provider: docker}}\n  b: {max_turns: 10001, sandbox: {provider: docker}}\n  c: {max_turns: 2.5, sandbox: {provider: docker}}\n  d: {max_turns: many, sandbox: {provider: docker}}\n  e: {max_turns: [1], sandbox: {provider: docker}}\n",
			want: []string{
				`profiles.a.max_turns: 0 is not from 1 to 10000`,
				`profiles.b.max_turns: 10001 is not from 1 to 10000`,
				`profiles.c.max_turns: 2.5 is not a whole number (from 1 to 10000)`,
				`profiles.d.max_turns: "many" is not a whole number (from 1 to 10000)`,
				`profiles.e.max_turns: must be a whole number from 1 to 10000, got a list`,
			},
		},
		{
			name:    "max_turns from a variable",
			content: profileWith("max_turns: '${TURNS}'\n" + sandbox),
			env:     testEnv{"TURNS": "99999999999999999999"},
			want:    []string{`profiles.dev.max_turns: "${TURNS}" (as expanded) is not from 1 to 10000`},
		},
		// llm.
		{
			name:    "base_url without scheme",
			content: profileWith("llm: {base_url: api.openai.com/v1}\n" + sandbox),
			want:    []string{`profiles.dev.llm.base_url: "api.openai.com/v1" is not an absolute http(s) URL`},
		},
		{
			name:    "base_url with another scheme hides its password",
			content: profileWith("llm: {base_url: 'ftp://me:hunter2@host/v1'}\n" + sandbox),
			want:    []string{`profiles.dev.llm.base_url: "ftp://me:********@host/v1" is not an absolute http(s) URL`},
		},
		{
			name:    "base_url without host",
			content: profileWith("llm: {base_url: 'https:///v1'}\n" + sandbox),
			want:    []string{`profiles.dev.llm.base_url: "https:///v1" is not an absolute http(s) URL`},
		},
		{
			name:    "api_key_env is not a variable name",
			content: profileWith("llm: {api_key_env: MY-KEY}\n" + sandbox),
			want:    []string{`profiles.dev.llm.api_key_env: "MY-KEY" is not a valid environment variable name (letters, digits and _, not starting with a digit)`},
		},
		{
			name:    "api_key_env starting with a digit",
			content: profileWith("llm: {api_key_env: 1KEY}\n" + sandbox),
			want:    []string{`profiles.dev.llm.api_key_env: "1KEY" is not a valid environment variable name (letters, digits and _, not starting with a digit)`},
		},
		{
			name:    "api_key_env given the key's value never echoes it",
			content: profileWith("llm: {api_key_env: '${OPENAI_API_KEY}'}\n" + sandbox),
			env:     testEnv{"OPENAI_API_KEY": "sk-live-0123"},
			want:    []string{`profiles.dev.llm.api_key_env: "${OPENAI_API_KEY}" (as expanded) is not a valid environment variable name: api_key_env takes the variable's name (like OPENAI_API_KEY), not its value`},
		},
		{
			name:    "api_key with a line break is not echoed",
			content: profileWith("llm: {api_key: '${K}'}\n" + sandbox),
			env:     testEnv{"K": "sk-live-0123\n"},
			want:    []string{`profiles.dev.llm.api_key: contains a line break or NUL, which cannot be sent in an HTTP header`},
		},
		{
			name:    "api_key and api_key_env",
			content: profileWith("llm: {api_key: sk-1, api_key_env: K}\n" + sandbox),
			want:    []string{`profiles.dev.llm: api_key and api_key_env are both set; use one`},
		},
		// llm.timeout.
		{
			name:    "timeout in words",
			content: profileWith("llm: {timeout: 10 minutes}\n" + sandbox),
			want:    []string{`profiles.dev.llm.timeout: "10 minutes" is not a duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "timeout without a unit",
			content: profileWith("llm: {timeout: '600'}\n" + sandbox),
			want:    []string{`profiles.dev.llm.timeout: "600" is not a duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "timeout is a number",
			content: profileWith("llm: {timeout: 600}\n" + sandbox),
			want:    []string{`profiles.dev.llm.timeout: must be a duration (like 90s, 10m, 14d), got a number`},
		},
		{
			name:    "timeout of zero",
			content: profileWith("llm: {timeout: 0s}\n" + sandbox),
			want:    []string{`profiles.dev.llm.timeout: "0s" is not a positive duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "negative timeout",
			content: profileWith("llm: {timeout: -1m}\n" + sandbox),
			want:    []string{`profiles.dev.llm.timeout: "-1m" is not a positive duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "timeout from a variable",
			content: profileWith("llm: {timeout: '${T}'}\n" + sandbox),
			env:     testEnv{"T": "soon"},
			want:    []string{`profiles.dev.llm.timeout: "${T}" (as expanded) is not a duration (like 90s, 10m, 14d)`},
		},
		// retention (a duration that may be in days).
		{
			name:    "retention in words",
			content: profileWith("retention: two weeks\n" + sandbox),
			want:    []string{`profiles.dev.retention: "two weeks" is not a duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "retention of zero days",
			content: profileWith("retention: 0d\n" + sandbox),
			want:    []string{`profiles.dev.retention: "0d" is not a positive duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "retention of a fraction of days",
			content: profileWith("retention: 1.5d\n" + sandbox),
			want:    []string{`profiles.dev.retention: "1.5d" is not a duration (like 90s, 10m, 14d)`},
		},
		// llm.anthropic: the same rules as llm, under its own path.
		{
			name:    "anthropic base_url without scheme",
			content: profileWith("llm: {anthropic: {base_url: api.anthropic.com/v1}}\n" + sandbox),
			want:    []string{`profiles.dev.llm.anthropic.base_url: "api.anthropic.com/v1" is not an absolute http(s) URL`},
		},
		{
			name:    "anthropic api_key_env is not a variable name",
			content: profileWith("llm: {anthropic: {api_key_env: MY-KEY}}\n" + sandbox),
			want:    []string{`profiles.dev.llm.anthropic.api_key_env: "MY-KEY" is not a valid environment variable name (letters, digits and _, not starting with a digit)`},
		},
		{
			name:    "anthropic api_key_env given the key's value never echoes it",
			content: profileWith("llm: {anthropic: {api_key_env: '${ANTHROPIC_API_KEY}'}}\n" + sandbox),
			env:     testEnv{"ANTHROPIC_API_KEY": "sk-live-0123"},
			want:    []string{`profiles.dev.llm.anthropic.api_key_env: "${ANTHROPIC_API_KEY}" (as expanded) is not a valid environment variable name: api_key_env takes the variable's name (like ANTHROPIC_API_KEY), not its value`},
		},
		{
			name:    "anthropic api_key and api_key_env",
			content: profileWith("llm: {anthropic: {api_key: sk-1, api_key_env: K}}\n" + sandbox),
			want:    []string{`profiles.dev.llm.anthropic: api_key and api_key_env are both set; use one`},
		},
		{
			name:    "anthropic is not a map",
			content: profileWith("llm: {anthropic: true}\n" + sandbox),
			want:    []string{`profiles.dev.llm.anthropic: must be a map, got a boolean`},
		},
		{
			name:    "unknown anthropic keys",
			content: profileWith("llm: {anthropic: {apikey: x, timeout: 1m}}\n" + sandbox),
			want: []string{
				`profiles.dev.llm.anthropic.apikey: unknown key, did you mean api_key? (known: base_url, api_key_env, api_key)`,
				`profiles.dev.llm.anthropic.timeout: unknown key (known: base_url, api_key_env, api_key)`,
			},
		},
		// Variable names that look like the secret itself are never echoed.
		{
			name:    "api_key_env written as a long key",
			content: profileWith("llm: {api_key_env: sk_proj_hunter2Hunter2abcdefghijklmnop0123}\n" + sandbox),
			want:    []string{`profiles.dev.llm.api_key_env: this looks like a secret, not a variable name: api_key_env takes the variable's name (like OPENAI_API_KEY), not its value`},
		},
		// git.
		{
			name:    "git token_env is not a variable name",
			content: profileWith("git: {token_env: GH-TOKEN}\n" + sandbox),
			want:    []string{`profiles.dev.git.token_env: "GH-TOKEN" is not a valid environment variable name (letters, digits and _, not starting with a digit)`},
		},
		{
			name:    "git token_env given a value that is not a name never echoes it",
			content: profileWith("git: {token_env: '${GH_TOKEN}'}\n" + sandbox),
			env:     testEnv{"GH_TOKEN": "sk-live-0123"},
			want:    []string{`profiles.dev.git.token_env: "${GH_TOKEN}" (as expanded) is not a valid environment variable name: token_env takes the variable's name (like GITHUB_TOKEN), not its value`},
		},
		{
			name:    "git token_env given a GitHub token, which is a valid name, never echoes it",
			content: profileWith("git: {token_env: '${GH_TOKEN}'}\n" + sandbox),
			env:     testEnv{"GH_TOKEN": "ghp_hunter2"},
			want:    []string{`profiles.dev.git.token_env: "${GH_TOKEN}" (as expanded) looks like a secret, not a variable name: token_env takes the variable's name (like GITHUB_TOKEN), not its value`},
		},
		{
			name:    "git token_env written as a GitHub token",
			content: profileWith("git: {token_env: github_pat_hunter2}\n" + sandbox),
			want:    []string{`profiles.dev.git.token_env: this looks like a secret, not a variable name: token_env takes the variable's name (like GITHUB_TOKEN), not its value`},
		},
		{
			name:    "git token and token_env",
			content: profileWith("git: {token: ghp_x, token_env: GH_TOKEN}\n" + sandbox),
			want:    []string{`profiles.dev.git: token and token_env are both set; use one`},
		},
		{
			name:    "git token with a line break is not echoed",
			content: profileWith("git: {token: '${GH_TOKEN}'}\n" + sandbox),
			env:     testEnv{"GH_TOKEN": "hunter2\nhost=evil.example"},
			want:    []string{`profiles.dev.git.token: contains a line break or NUL, which git's credential protocol cannot carry`},
		},
		{
			name:    "git token is not a string",
			content: profileWith("git: {token: [a]}\n" + sandbox),
			want:    []string{`profiles.dev.git.token: must be a string, got a list`},
		},
		{
			name:    "git username empty",
			content: profileWith("git: {username: ''}\n" + sandbox),
			want:    []string{`profiles.dev.git.username: must not be empty (default x-access-token)`},
		},
		{
			name:    "git username with a line break",
			content: profileWith("git: {username: \"bot\\nhost=evil\"}\n" + sandbox),
			want:    []string{`profiles.dev.git.username: "bot\nhost=evil" contains a line break or NUL, which git's credential protocol cannot carry`},
		},
		{
			name:    "git is not a map",
			content: profileWith("git: ghp_x\n" + sandbox),
			want:    []string{`profiles.dev.git: must be a map, got a string`},
		},
		{
			name:    "unknown git keys",
			content: profileWith("git: {tokenenv: X, password: y}\n" + sandbox),
			want: []string{
				`profiles.dev.git.password: unknown key (known: token_env, token, username)`,
				`profiles.dev.git.tokenenv: unknown key, did you mean token_env? (known: token_env, token, username)`,
			},
		},
		// proxy.audit_dir.
		{
			name:    "audit_dir relative",
			content: profileWith("proxy: {audit_dir: audit}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.audit_dir: "audit" is not an absolute path (write /dir or ~/dir)`},
		},
		{
			name:    "audit_dir with another user's home",
			content: profileWith("proxy: {audit_dir: ~amelia/audit}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.audit_dir: "~amelia/audit" is not an absolute path (write /dir or ~/dir)`},
		},
		{
			name:    "audit_dir relative from a variable",
			content: profileWith("proxy: {audit_dir: '${D}/audit'}\n" + sandbox),
			env:     testEnv{"D": "state"},
			want:    []string{`profiles.dev.proxy.audit_dir: "${D}/audit" (as expanded) is not an absolute path (write /dir or ~/dir)`},
		},
		{
			name:    "audit_dir is not a string",
			content: profileWith("proxy: {audit_dir: [/a]}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.audit_dir: must be a string, got a list`},
		},
		// proxy.max_request_bytes.
		{
			name:    "max_request_bytes in furlongs",
			content: profileWith("proxy: {max_request_bytes: 10 furlongs}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: "10 furlongs" is not a size (an integer of bytes, or like 512KiB, 10MiB)`},
		},
		{
			name:    "max_request_bytes with a fraction",
			content: profileWith("proxy: {max_request_bytes: 1.5MiB}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: "1.5MiB" is not a size (an integer of bytes, or like 512KiB, 10MiB)`},
		},
		{
			name:    "max_request_bytes as a fractional number",
			content: profileWith("proxy: {max_request_bytes: 1024.5}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: 1024.5 is not a size (an integer of bytes, or like 512KiB, 10MiB)`},
		},
		{
			name:    "max_request_bytes with a sign",
			content: profileWith("proxy: {max_request_bytes: '+2048'}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: "+2048" is not a size (an integer of bytes, or like 512KiB, 10MiB)`},
		},
		{
			name:    "max_request_bytes unit only",
			content: profileWith("proxy: {max_request_bytes: MiB}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: "MiB" is not a size (an integer of bytes, or like 512KiB, 10MiB)`},
		},
		{
			name:    "max_request_bytes below 1 KiB",
			content: profileWith("proxy: {max_request_bytes: 1023}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: 1023 is too small (at least 1KiB)`},
		},
		{
			name:    "max_request_bytes of 1KB is below 1 KiB",
			content: profileWith("proxy: {max_request_bytes: 1KB}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: "1KB" is too small (at least 1KiB)`},
		},
		{
			name:    "max_request_bytes zero",
			content: profileWith("proxy: {max_request_bytes: 0}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: 0 is too small (at least 1KiB)`},
		},
		{
			name:    "max_request_bytes negative",
			content: profileWith("proxy: {max_request_bytes: -1}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: -1 is too small (at least 1KiB)`},
		},
		{
			name:    "max_request_bytes above 1 GiB",
			content: profileWith("proxy: {max_request_bytes: 2GiB}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: "2GiB" is too large (at most 1GiB)`},
		},
		{
			name:    "max_request_bytes one byte above 1 GiB",
			content: profileWith("proxy: {max_request_bytes: 1073741825}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: 1073741825 is too large (at most 1GiB)`},
		},
		{
			name:    "max_request_bytes beyond int64",
			content: profileWith("proxy: {max_request_bytes: '99999999999999999999 GiB'}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: "99999999999999999999 GiB" is too large (at most 1GiB)`},
		},
		{
			name:    "max_request_bytes is a boolean",
			content: profileWith("proxy: {max_request_bytes: true}\n" + sandbox),
			want:    []string{`profiles.dev.proxy.max_request_bytes: must be a size (an integer of bytes, or like 512KiB, 10MiB), got a boolean`},
		},
		{
			name:    "max_request_bytes from a variable",
			content: profileWith("proxy: {max_request_bytes: '${S}'}\n" + sandbox),
			env:     testEnv{"S": "big"},
			want:    []string{`profiles.dev.proxy.max_request_bytes: "${S}" (as expanded) is not a size (an integer of bytes, or like 512KiB, 10MiB)`},
		},
		{
			name:    "unknown proxy keys",
			content: profileWith("proxy: {auditdir: /a, max_request_byte: 1MiB, listen: x}\n" + sandbox),
			want: []string{
				`profiles.dev.proxy.auditdir: unknown key, did you mean audit_dir? (known: audit_dir, max_request_bytes)`,
				`profiles.dev.proxy.listen: unknown key (known: audit_dir, max_request_bytes)`,
				`profiles.dev.proxy.max_request_byte: unknown key, did you mean max_request_bytes? (known: audit_dir, max_request_bytes)`,
			},
		},
		{
			name:    "proxy is not a map",
			content: profileWith("proxy: 127.0.0.1:8080\n" + sandbox),
			want:    []string{`profiles.dev.proxy: must be a map, got a string`},
		},
		// sandbox.provider.
		{
			name:    "provider missing",
			content: profileWith("model: o3\n"),
			want:    []string{`profiles.dev.sandbox.provider: required: where the profile runs (local, docker, ssh, daytona, kubernetes, or an installed plugin's name)`},
		},
		{
			name:    "provider missing in an empty profile",
			content: "profiles:\n  dev:\n",
			want:    []string{`profiles.dev.sandbox.provider: required: where the profile runs (local, docker, ssh, daytona, kubernetes, or an installed plugin's name)`},
		},
		{
			name:    "provider empty",
			content: profileWith("sandbox: {provider: ''}\n"),
			want:    []string{`profiles.dev.sandbox.provider: must not be empty: where the profile runs (local, docker, ssh, daytona, kubernetes, or an installed plugin's name)`},
		},
		{
			name:    "provider not a name",
			content: profileWith("sandbox: {provider: My.Plugin}\n"),
			want:    []string{`profiles.dev.sandbox.provider: "My.Plugin" is not a valid provider name (built in: local, docker, ssh, daytona, kubernetes; a plugin's name uses lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters)`},
		},
		{
			name:    "provider not a string",
			content: profileWith("sandbox: {provider: true}\n"),
			want:    []string{`profiles.dev.sandbox.provider: must be a string, got a boolean`},
		},
		{
			name:    "concurrent_runs not a boolean",
			content: profileWith("sandbox: {provider: local, concurrent_runs: sometimes}\n"),
			want:    []string{`profiles.dev.sandbox.concurrent_runs: "sometimes" is not true or false`},
		},
		{
			name:    "shared_plugin not a boolean",
			content: profileWith("sandbox: {provider: local, shared_plugin: never}\n"),
			want:    []string{`profiles.dev.sandbox.shared_plugin: "never" is not true or false`},
		},
		{
			name:    "parked_checkouts out of range",
			content: profileWith("sandbox: {provider: docker, parked_checkouts: 65}\n"),
			want:    []string{`profiles.dev.sandbox.parked_checkouts: 65 is not from 0 to 64`},
		},
		{
			name:    "parked_checkouts not a number",
			content: profileWith("sandbox: {provider: docker, parked_checkouts: many}\n"),
			want:    []string{`profiles.dev.sandbox.parked_checkouts: "many" is not a whole number (from 0 to 64)`},
		},
		{
			name:    "idle_timeout not a duration",
			content: profileWith("sandbox: {provider: docker, idle_timeout: soon}\n"),
			want:    []string{`profiles.dev.sandbox.idle_timeout: "soon" is not a duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "idle_timeout too short",
			content: profileWith("sandbox: {provider: docker, idle_timeout: 10ms}\n"),
			want:    []string{`profiles.dev.sandbox.idle_timeout: 10ms is shorter than 1s: use a longer duration, or off`},
		},
		{
			name:    "max_lifetime negative",
			content: profileWith("sandbox: {provider: docker, max_lifetime: -1h}\n"),
			want:    []string{`profiles.dev.sandbox.max_lifetime: "-1h" is not a positive duration (like 90s, 10m, 14d)`},
		},
		{
			name:    "max_lifetime a number",
			content: profileWith("sandbox: {provider: docker, max_lifetime: 5}\n"),
			want:    []string{`profiles.dev.sandbox.max_lifetime: must be a duration (like 90s, 10m, 14d) or off, got a number`},
		},
		{
			name:    "concurrent_runs a list",
			content: profileWith("sandbox: {provider: local, concurrent_runs: [true]}\n"),
			want:    []string{`profiles.dev.sandbox.concurrent_runs: must be true or false, got a list`},
		},
		// sandbox.network.
		{
			name:    "network misspelled",
			content: profileWith("sandbox: {provider: docker, network: opn}\n"),
			want:    []string{`profiles.dev.sandbox.network: "opn" is not one of open, allowlist, none`},
		},
		{
			name:    "network is case-sensitive",
			content: profileWith("sandbox: {provider: docker, network: Open}\n"),
			want:    []string{`profiles.dev.sandbox.network: "Open" is not one of open, allowlist, none`},
		},
		{
			name:    "network from a variable",
			content: profileWith("sandbox: {provider: docker, network: '${NET}'}\n"),
			env:     testEnv{"NET": "closed"},
			want:    []string{`profiles.dev.sandbox.network: "${NET}" (as expanded) is not one of open, allowlist, none`},
		},
		// sandbox.allowed_hosts.
		{
			name: "allowed_hosts entries",
			content: profileWith(`sandbox:
  provider: docker
  network: allowlist
  allowed_hosts:
    - github.com
    - "*.example"
    - a_b.example
    - 192.0.2.1
    - "::1"
    - https://forge.test
    - forge.test:443
    - forge.test/path
    - "*"
    - "*.*.example"
    - foo.*.example
    - -a.example
    - 999.1.1.1
    - "2001:db8::1%eth0"
    - ""
    - 42
`),
			want: []string{
				`profiles.dev.sandbox.allowed_hosts[5]: "https://forge.test" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[6]: "forge.test:443" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[7]: "forge.test/path" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[8]: "*" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[9]: "*.*.example" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[10]: "foo.*.example" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[11]: "-a.example" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[12]: "999.1.1.1" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[13]: "2001:db8::1%eth0" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[14]: "" is not a hostname, *.wildcard or IP address (no scheme, port or path)`,
				`profiles.dev.sandbox.allowed_hosts[15]: must be a string, got a number`,
			},
		},
		{
			name:    "allowed_hosts is not a list",
			content: profileWith("sandbox: {provider: docker, network: allowlist, allowed_hosts: github.com}\n"),
			want:    []string{`profiles.dev.sandbox.allowed_hosts: must be a list, got a string`},
		},
		// sandbox.egress_check_targets.
		{
			name: "egress_check_targets entries",
			content: profileWith(`sandbox:
  provider: docker
  network: none
  egress_check_targets:
    - 192.0.2.1:80
    - "[2001:db8::1]:443"
    - Canary.Test:53
    - 192.0.2.1
    - 2001:db8::1:443
    - forge.test:0
    - forge.test:65536
    - forge.test:http
    - "*.forge.test:443"
    - http://forge.test:80
    - -x:80
    - ""
`),
			want: []string{
				`profiles.dev.sandbox.egress_check_targets[3]: "192.0.2.1" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[4]: "2001:db8::1:443" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[5]: "forge.test:0" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[6]: "forge.test:65536" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[7]: "forge.test:http" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[8]: "*.forge.test:443" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[9]: "http://forge.test:80" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[10]: "-x:80" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
				`profiles.dev.sandbox.egress_check_targets[11]: "" is not HOST:PORT (a hostname or IP address, [IPv6] in brackets, and a port from 1 to 65535)`,
			},
		},
		// sandbox.plugin_env.
		{
			name: "plugin_env entries",
			content: profileWith(`sandbox:
  provider: kubernetes
  plugin_env:
    - KUBECONFIG
    - _OK_2
    - KUBE CONFIG
    - 2FAST
    - KUBECONFIG=/tmp/k
    - ""
    - ghp_abcdefghijklmnopqrstuvwxyz0123456789
`),
			want: []string{
				`profiles.dev.sandbox.plugin_env[2]: "KUBE CONFIG" is not a valid environment variable name (letters, digits and _, not starting with a digit)`,
				`profiles.dev.sandbox.plugin_env[3]: "2FAST" is not a valid environment variable name (letters, digits and _, not starting with a digit)`,
				`profiles.dev.sandbox.plugin_env[4]: "KUBECONFIG=/tmp/k" is not a valid environment variable name (letters, digits and _, not starting with a digit)`,
				`profiles.dev.sandbox.plugin_env[5]: "" is not a valid environment variable name (letters, digits and _, not starting with a digit)`,
				`profiles.dev.sandbox.plugin_env[6]: this looks like a secret, not a variable name: plugin_env takes the variable's name (like KUBECONFIG), not its value`,
			},
		},
		{
			name:    "plugin_env not a list",
			content: profileWith("sandbox: {provider: kubernetes, plugin_env: KUBECONFIG}\n"),
			want:    []string{`profiles.dev.sandbox.plugin_env: must be a list, got a string`},
		},
		// Unknown keys.
		{
			name:    "unknown top-level key",
			content: "defaults: {}\nprofile: x\n" + profileWith(sandbox),
			want: []string{
				`defaults: unknown key (known: default_profile, profiles)`,
				`profile: unknown key, did you mean profiles? (known: default_profile, profiles)`,
			},
		},
		{
			name:    "unknown profile key",
			content: profileWith("sandbx: {provider: docker}\n" + sandbox + "image: x\n"),
			want: []string{
				`profiles.dev.image: unknown key (known: model, max_turns, retention, agent, commit_build_outputs, llm, git, proxy, sandbox, mcp)`,
				`profiles.dev.sandbx: unknown key, did you mean sandbox? (known: model, max_turns, retention, agent, commit_build_outputs, llm, git, proxy, sandbox, mcp)`,
			},
		},
		{
			name:    "unknown llm key",
			content: profileWith("llm: {apikey: x, url: y}\n" + sandbox),
			want: []string{
				`profiles.dev.llm.apikey: unknown key, did you mean api_key? (known: api, base_url, api_key_env, api_key, timeout, anthropic, gemini)`,
				`profiles.dev.llm.url: unknown key (known: api, base_url, api_key_env, api_key, timeout, anthropic, gemini)`,
			},
		},
		{
			name:    "unknown scalar or list under sandbox",
			content: profileWith("sandbox: {provider: docker, netwrok: none, image: x, hosts: [a]}\n"),
			want: []string{
				`profiles.dev.sandbox.hosts: unknown key (known: provider, network, allowed_hosts, egress_check_targets, plugin_env, concurrent_runs, shared_plugin, parked_checkouts, setup, idle_timeout, max_lifetime, or a map of provider settings)`,
				`profiles.dev.sandbox.image: unknown key (known: provider, network, allowed_hosts, egress_check_targets, plugin_env, concurrent_runs, shared_plugin, parked_checkouts, setup, idle_timeout, max_lifetime, or a map of provider settings)`,
				`profiles.dev.sandbox.netwrok: unknown key, did you mean network? (known: provider, network, allowed_hosts, egress_check_targets, plugin_env, concurrent_runs, shared_plugin, parked_checkouts, setup, idle_timeout, max_lifetime, or a map of provider settings)`,
			},
		},
		// Provider settings blocks.
		{
			name:    "settings block not named like a provider",
			content: profileWith("sandbox: {provider: docker, My.Plugin: {a: 1}}\n"),
			want:    []string{`profiles.dev.sandbox."My.Plugin": invalid provider settings block name: a block is named after its provider (lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters)`},
		},
		{
			name:    "both local and none blocks",
			content: profileWith("sandbox: {provider: local, local: {a: 1}, none: {b: 2}}\n"),
			want:    []string{`profiles.dev.sandbox.none: "none" is an alias of "local": keep a single settings block`},
		},
		// Wrong types of sections.
		{
			name:    "profiles is a list",
			content: "profiles: [dev]\n",
			want:    []string{`profiles: must be a map, got a list`},
		},
		{
			name:    "profile is a string",
			content: "profiles:\n  dev: docker\n",
			want:    []string{`profiles.dev: must be a map, got a string`},
		},
		{
			name:    "llm and sandbox are not maps",
			content: profileWith("llm: openai\nsandbox: [docker]\n"),
			want: []string{
				`profiles.dev.llm: must be a map, got a string`,
				`profiles.dev.sandbox: must be a map, got a list`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problems(t, tt.content, tt.env)
			equal(t, "problems", got, tt.want)
			for _, p := range got {
				if strings.Contains(p, "sk-live-0123") || strings.Contains(p, "hunter2") {
					t.Errorf("problem reveals a secret: %s", p)
				}
			}
		})
	}
}

func TestValidationListsEveryProblem(t *testing.T) {
	const content = `
default_profile: prod
profiles:
  dev:
    model: ""
    llm: {base_url: "ftp://x", api_key: k, api_key_env: K}
    sandbox: {provider: docker, network: opn}
  Bad:
    sandbx: {}
`
	_, path, err := loadString(t, content, nil)
	want := []string{
		`profiles.Bad: invalid profile name: profile names become sandbox names, so use lowercase letters, digits, "-" and "_", starting with a letter or digit, at most 63 characters`,
		`profiles.Bad.sandbox.provider: required: where the profile runs (local, docker, ssh, daytona, kubernetes, or an installed plugin's name)`,
		`profiles.Bad.sandbx: unknown key, did you mean sandbox? (known: model, max_turns, retention, agent, commit_build_outputs, llm, git, proxy, sandbox, mcp)`,
		`profiles.dev.model: must not be empty`,
		`profiles.dev.llm.base_url: "ftp://x" is not an absolute http(s) URL`,
		`profiles.dev.llm: api_key and api_key_env are both set; use one`,
		`profiles.dev.sandbox.network: "opn" is not one of open, allowlist, none`,
		`default_profile: "prod" is not a profile (profiles: Bad, dev)`,
	}
	equal(t, "problems", problemsOf(t, err), want)
	equal(t, "Error()", errString(err), fmt.Sprintf("%s: %s (and %d more; run `amelia config validate`)", path, want[0], len(want)-1))
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Error() is not one line: %q", err)
	}
}

func problemsOf(t *testing.T, err error) []string {
	t.Helper()
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	var out []string
	for _, p := range ve.Problems {
		out = append(out, p.String())
	}
	return out
}

func TestValidationErrorFormat(t *testing.T) {
	tests := []struct {
		err  *ValidationError
		want string
	}{
		{
			err:  &ValidationError{File: "/home/u/.config/amelia/config.yaml", Problems: []Problem{{Key: "profiles.dev.sandbox.network", Message: `"opn" is not one of open, allowlist, none`}}},
			want: `/home/u/.config/amelia/config.yaml: profiles.dev.sandbox.network: "opn" is not one of open, allowlist, none`,
		},
		{
			err:  &ValidationError{File: "c.yaml", Problems: []Problem{{Key: "a", Message: "x"}, {Key: "b", Message: "y"}, {Key: "c", Message: "z"}}},
			want: "c.yaml: a: x (and 2 more; run `amelia config validate`)",
		},
		{
			err:  &ValidationError{Problems: []Problem{{Key: "a", Message: "x"}}},
			want: "built-in default config: a: x",
		},
		{
			err:  &ValidationError{File: "c.yaml"},
			want: "c.yaml: invalid configuration",
		},
	}
	for _, tt := range tests {
		equal(t, "Error()", tt.err.Error(), tt.want)
	}
}

func TestValidEnvNames(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"OPENAI_API_KEY", true}, {"_x", true}, {"a1", true},
		{"", false}, {"1A", false}, {"A-B", false}, {"A B", false}, {"A=B", false},
	} {
		if got := validEnvName(tt.s); got != tt.want {
			t.Errorf("validEnvName(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestAuditDirWithoutHome(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", profileWith("proxy: {audit_dir: ~/audit}\nsandbox: {provider: docker}\n"))
	opts := testEnv{}.options(p, "")
	_, err := Load(opts)
	equal(t, "problems", problemsOf(t, err), []string{
		`profiles.dev.proxy.audit_dir: "~/audit" starts with ~ but there is no home directory; write an absolute path`,
	})
}

func TestParseSize(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1536", 1536, true}, {" 2048 ", 2048, true}, {"2048B", 2048, true}, {"2048 b", 2048, true},
		{"512KiB", 512 << 10, true}, {"512kib", 512 << 10, true}, {"10 MiB", 10 << 20, true}, {"10MIB", 10 << 20, true},
		{"1GiB", 1 << 30, true}, {"3KB", 3000, true}, {"10mb", 10e6, true}, {"2 GB", 2e9, true},
		{"9223372036854775807", math.MaxInt64, true}, {"9223372036854775808", math.MaxInt64, true},
		{"9999999999 GiB", math.MaxInt64, true},
		{"", 0, false}, {"MiB", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1.5MiB", 0, false},
		{"1e6", 0, false}, {"10 M iB", 0, false}, {"10MiBs", 0, false}, {"10 furlongs", 0, false}, {"0x10", 0, false},
		{"10Mi", 0, false}, {"10K", 0, false},
	} {
		got, ok := parseSize(tt.s)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseSize(%q) = %d, %v; want %d, %v", tt.s, got, ok, tt.want, tt.ok)
		}
	}
	for _, tt := range []struct {
		n    int64
		want string
	}{
		{DefaultMaxRequestBytes, "10MiB"}, {1 << 30, "1GiB"}, {1536 << 10, "1536KiB"}, {1024, "1KiB"},
		{2e9, "2GB"}, {1e6, "1MB"}, {3000, "3KB"}, {1500, "1500"}, {0, "0"},
	} {
		got := formatSize(tt.n)
		equal(t, fmt.Sprintf("formatSize(%d)", tt.n), got, tt.want)
		if back, ok := parseSize(got); !ok || back != tt.n {
			t.Errorf("parseSize(formatSize(%d) = %q) = %d, %v", tt.n, got, back, ok)
		}
	}
}

// A config with problems keeps what of it could be read, for the checks
// those problems leave undone; Reported says which keys are in doubt.
func TestPartialConfig(t *testing.T) {
	_, _, err := loadString(t, `default_profile: dev
profiles:
  dev:
    sandbox:
      provider: docker
      network: opn
      docker: {imag: x}
  ok:
    sandbox: {provider: local}
`, testEnv{})
	ve, ok := err.(*ValidationError)
	if !ok {
		t.Fatalf("Load: %v, want a *ValidationError", err)
	}
	c := ve.Partial()
	if c == nil || len(c.Profiles) != 2 {
		t.Fatalf("Partial = %+v, want both profiles", c)
	}
	dev := c.Profiles["dev"]
	if dev.Sandbox.Provider != "docker" || dev.Sandbox.Network != "" || dev.Sandbox.Settings["docker"]["imag"] != "x" {
		t.Errorf("dev as read: %+v, want its provider and settings block, and no network", dev.Sandbox)
	}
	for key, want := range map[string]bool{
		"profiles.dev.sandbox.network":     true,
		"profiles.dev.sandbox.network[0]":  true,
		"profiles.dev.sandbox.networks":    false,
		"profiles.dev.sandbox.provider":    false,
		"profiles.dev.sandbox.docker.imag": false,
		"profiles.dev":                     false,
		"profiles.ok.sandbox.network":      false,
	} {
		if got := ve.Reported(key); got != want {
			t.Errorf("Reported(%q) = %v, want %v", key, got, want)
		}
	}
}
