package daytona

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func TestDecodeSettings(t *testing.T) {
	ten := 10
	for _, tt := range []struct {
		name, in string
		want     Settings
		timeout  time.Duration
		err      string
	}{
		{name: "defaults", in: `{}`, timeout: 10 * time.Minute, want: Settings{
			APIURL: "https://app.daytona.io/api", APIKeyEnv: "DAYTONA_API_KEY", OnTeardown: "delete", SSHTokenMinutes: 60, HostKeyPolicy: "accept-new",
		}},
		{name: "everything", timeout: 90 * time.Second,
			in: `{"api_url":"http://127.0.0.1:9/api","api_key_env":"MY_KEY","organization_id":"org-1","target":"eu","image":"debian:bookworm-slim","cpu":2,"memory":4,"disk":10,"auto_stop_interval":10,"on_teardown":"stop","start_timeout":"90s","ssh_token_minutes":5,"known_hosts":"~/.kh","host_key_policy":"strict","env":{"TZ":"UTC"},"labels":{"team":"a"}}`,
			want: Settings{APIURL: "http://127.0.0.1:9/api", APIKeyEnv: "MY_KEY", OrganizationID: "org-1", Target: "eu", Image: "debian:bookworm-slim", CPU: 2, Memory: 4, Disk: 10, AutoStopInterval: &ten,
				OnTeardown: "stop", StartTimeout: "90s", SSHTokenMinutes: 5, KnownHosts: "~/.kh", HostKeyPolicy: "strict", Env: map[string]string{"TZ": "UTC"}, Labels: map[string]string{"team": "a"}}},
		{name: "unknown key", in: `{"snapshots":"x"}`, err: `daytona.snapshots: unknown key, did you mean snapshot? (known: api_url, api_key_env, organization_id, target, snapshot, image, cpu, memory, disk, auto_stop_interval, on_teardown, start_timeout, ssh_token_minutes, known_hosts, host_key_policy, env, labels)`},
		{name: "snapshot and image", in: `{"snapshot":"s","image":"i"}`, err: "daytona.image: set snapshot or image, not both"},
		{name: "snapshot and resources", in: `{"snapshot":"s","cpu":2}`, err: "daytona.snapshot: a snapshot fixes cpu, memory and disk (Daytona refuses both): drop cpu/memory/disk, or use image instead of snapshot"},
		{name: "secret in env", in: `{"env":{"OPENAI_API_KEY":"sk"}}`, err: "daytona.env.OPENAI_API_KEY: looks like a secret, and secrets never enter a sandbox: the LLM key and git token reach the sandbox only through Amelia's proxy"},
		{name: "bad env name", in: `{"env":{"A B":"x"}}`, err: `daytona.env."A B": is not an environment variable name`},
		{name: "amelia label", in: `{"labels":{"amelia.sandbox":"x"}}`, err: `daytona.labels."amelia.sandbox": keys starting with amelia. are Amelia's own`},
		{name: "bad teardown", in: `{"on_teardown":"archive"}`, err: `daytona.on_teardown: "archive" is not delete or stop`},
		{name: "bad timeout", in: `{"start_timeout":"soon"}`, err: `daytona.start_timeout: "soon" is not a duration like 5m`},
		{name: "no host key checks", in: `{"host_key_policy":"off"}`, err: `daytona.host_key_policy: "off" is not accept-new or strict (host keys are always checked)`},
		{name: "bad key env", in: `{"api_key_env":"$KEY"}`, err: `daytona.api_key_env: "$KEY" is not an environment variable name`},
		{name: "option as image", in: `{"image":"-x"}`, err: `daytona.image: "-x" is not a valid name`},
		{name: "negative auto stop", in: `{"auto_stop_interval":-1}`, err: "daytona.auto_stop_interval: -1 is negative (0 never stops the sandbox)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, timeout, err := decodeSettings(json.RawMessage(tt.in))
			if tt.err != "" {
				if err == nil || err.Error() != tt.err || !errors.Is(err, sdk.ErrInvalid) {
					t.Errorf("error %v, want %q (invalid)", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tt.want)
			if string(gj) != string(wj) || timeout != tt.timeout {
				t.Errorf("settings\n got %s, %v\nwant %s, %v", gj, timeout, wj, tt.timeout)
			}
		})
	}
}

func TestAPIKeyFromItsVariable(t *testing.T) {
	set, _, err := decodeSettings(json.RawMessage(`{"api_key_env":"MY_DAYTONA"}`))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MY_DAYTONA": "dtn_123"}
	if key, err := set.apiKey(func(k string) string { return env[k] }); err != nil || key != "dtn_123" {
		t.Errorf("key %q, %v", key, err)
	}
	_, err = set.apiKey(func(string) string { return "" })
	want := "daytona: $MY_DAYTONA is empty: set it to a Daytona API key (Dashboard → Keys), or name another variable with daytona.api_key_env"
	if err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// The daytona blocks of configs/ are ones the provider accepts.
func TestConfigExamples(t *testing.T) {
	for _, f := range []struct{ file, profile string }{{"example.yaml", "daytona"}, {"daytona.yaml", "daytona"}} {
		t.Run(f.file, func(t *testing.T) {
			env := map[string]string{"HOME": "/home/u"}
			cfg, err := config.Load(config.Options{
				Path:      filepath.Join("..", "..", "configs", f.file),
				LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
				HomeDir:   "/home/u",
			})
			if err != nil {
				t.Fatal(err)
			}
			p := cfg.Profiles[f.profile]
			if p == nil || p.Sandbox.Provider != Name {
				t.Fatalf("%s has no daytona profile", f.file)
			}
			b, _ := json.Marshal(p.Sandbox.ProviderSettings())
			if _, _, err := decodeSettings(b); err != nil {
				t.Fatalf("%s's daytona settings: %v", f.file, err)
			}
		})
	}
}

func TestGatewayAddr(t *testing.T) {
	for _, tt := range []struct{ cmd, want string }{
		{"ssh -p 22 tok@ssh.app.daytona.io", "ssh.app.daytona.io:22"},
		{"ssh -p 2222 tok@127.0.0.1", "127.0.0.1:2222"},
		{"ssh tok@gw.example", "gw.example:22"},
	} {
		if got, err := gatewayAddr(tt.cmd); err != nil || got != tt.want {
			t.Errorf("gatewayAddr(%q) = %q, %v; want %q", tt.cmd, got, err, tt.want)
		}
	}
	if _, err := gatewayAddr("ssh -p 22"); err == nil || err.Error() != "daytona: no host in the SSH access's command (3 words)" {
		t.Errorf("no host: %v", err)
	}
}

// ValidateSettings answers the block's problems at their keys, without
// the API or its key.
func TestValidateSettings(t *testing.T) {
	p := New(Options{Getenv: func(string) string { return "" }})
	for _, tc := range []struct {
		in   string
		want []sdk.Problem
	}{
		{in: `{"image":"debian:bookworm-slim","cpu":2}`},
		{in: `{"cpu":"2","labels":{"amelia.x":"y"}}`, want: []sdk.Problem{{Key: "cpu", Message: "want a whole number, not a string"}}},
		{in: `{"env":{"GITHUB_TOKEN":"x"}}`, want: []sdk.Problem{{Key: "env.GITHUB_TOKEN", Message: "looks like a secret, and secrets never enter a sandbox: the LLM key and git token reach the sandbox only through Amelia's proxy"}}},
		{in: `{"known_hosts":"known"}`, want: []sdk.Problem{{Key: "known_hosts", Message: `"known" must be an absolute path or start with ~/`}}},
	} {
		got, err := p.ValidateSettings(t.Context(), sdk.ValidateRequest{Config: json.RawMessage(tc.in), Network: sdk.NetworkPolicy{Mode: sdk.NetworkNone}})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
