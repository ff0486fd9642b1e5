package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test -update if the change is intended)\n--- got\n%s--- want\n%s", p, got, want)
	}
}

func TestShowYAMLGolden(t *testing.T) {
	showEnv := testEnv{
		"OPENAI_API_KEY":    "sk-from-env-SECRET",
		"REGISTRY_PASSWORD": "reg-SECRET",
		"DAYTONA_API_KEY":   "",
	}
	c, err := Load(showEnv.options(filepath.Join("testdata", "show", "config.yaml"), "/home/u"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.ProfileNames() {
		t.Run(name, func(t *testing.T) {
			out, err := mustProfile(t, c, name).ShowYAML()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), "SECRET") {
				t.Errorf("ShowYAML reveals a secret:\n%s", out)
			}
			golden(t, filepath.Join("show", name+".golden"), out)
		})
	}
	t.Run("builtin", func(t *testing.T) {
		c, err := Load(testEnv{}.options("", t.TempDir()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := mustProfile(t, c, "").ShowYAML()
		if err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join("show", "builtin.golden"), out)
	})
}

func TestShowYAMLMasksSecrets(t *testing.T) {
	// Every secret contains "SECRET"; none may appear in the output.
	const content = `
profiles:
  dev:
    llm: {api_key: "${LLM_KEY}"}
    sandbox:
      provider: myplugin
      myplugin:
        Password: p-SECRET
        deep:
          deeper:
            - {client_secret: c-SECRET, API-KEY: a-SECRET, accessToken: t-SECRET}
            - {list_of_secrets: [x]}
          apikey: k-SECRET
          db_password: {nested: d-SECRET}
          private_key: [l-SECRET]
          token: 12345
          passphrase: pp-SECRET
          ssh_key: s-SECRET
          tokens_left: 3
          api_key_env: MY_KEY
          GITHUB_TOKEN_ENV: GH
          url: "https://u:u-SECRET@host.example/x?y=1"
        empty_token: ""
`
	env := testEnv{"LLM_KEY": "llm-SECRET", "MY_KEY": "env-SECRET"}
	c := mustLoad(t, content, env)
	out, err := mustProfile(t, c, "dev").ShowYAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "SECRET") || strings.Contains(string(out), "12345") {
		t.Errorf("ShowYAML reveals a secret:\n%s", out)
	}
	for _, want := range []string{
		"api_key_env: MY_KEY", "GITHUB_TOKEN_ENV: GH", "tokens_left: 3", `empty_token: ""`,
		"list_of_secrets:\n", `url: https://u:********@host.example/x?y=1`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ShowYAML output lacks %q:\n%s", want, out)
		}
	}
	// The output is YAML, and masked values are the string "********".
	var doc struct {
		LLM     map[string]string
		Sandbox struct {
			MyPlugin map[string]any `yaml:"myplugin"`
		}
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("ShowYAML output is not YAML: %v\n%s", err, out)
	}
	equal(t, "llm.api_key", doc.LLM["api_key"], masked)
	equal(t, "Password", doc.Sandbox.MyPlugin["Password"], masked)
	deep := doc.Sandbox.MyPlugin["deep"].(map[string]any)
	for _, k := range []string{"apikey", "db_password", "private_key", "token", "passphrase", "ssh_key"} {
		equal(t, "deep."+k, deep[k], masked)
	}
	item := deep["deeper"].([]any)[0].(map[string]any)
	for _, k := range []string{"client_secret", "API-KEY", "accessToken"} {
		equal(t, "deeper[0]."+k, item[k], masked)
	}
}

func TestShowYAMLKeyVariableComment(t *testing.T) {
	for _, key := range []struct{ body, line string }{
		{"llm: {api_key_env: K}", "  api_key_env: K"},
		{"llm: {anthropic: {api_key_env: K}}", "    api_key_env: K"},
		{"llm: {gemini: {api_key_env: K}}", "    api_key_env: K"},
		{"git: {token_env: K}", "  token_env: K"},
	} {
		for _, tt := range []struct {
			env  testEnv
			want string
		}{
			{testEnv{"K": "v-SECRET"}, " # set\n"},
			{testEnv{"K": ""}, " # set but empty\n"},
			{testEnv{}, " # not set\n"},
		} {
			c := mustLoad(t, profileWith(key.body+"\nsandbox: {provider: docker}\n"), tt.env)
			out, err := mustProfile(t, c, "dev").ShowYAML()
			if err != nil {
				t.Fatal(err)
			}
			want := "\n" + key.line + tt.want
			if !strings.Contains(string(out), want) || strings.Contains(string(out), "SECRET") {
				t.Errorf("%s, env %v: output lacks %q or reveals the value:\n%s", key.body, tt.env, want, out)
			}
		}
	}
}

// The gemini block is shown after the anthropic block, as written, with
// its key masked; a profile without it shows none.
func TestShowYAMLGemini(t *testing.T) {
	c := mustLoad(t, profileWith("llm: {gemini: {base_url: \"http://127.0.0.1:9\", api_key: AIza-SECRET}, anthropic: {base_url: \"http://127.0.0.1:8\"}}\nsandbox: {provider: docker}\n"), nil)
	out, err := mustProfile(t, c, "dev").ShowYAML()
	if err != nil {
		t.Fatal(err)
	}
	want := "  anthropic:\n    base_url: http://127.0.0.1:8\n    api_key_env: ANTHROPIC_API_KEY # not set\n" +
		"  gemini:\n    base_url: http://127.0.0.1:9\n    api_key: \"********\"\n"
	if !strings.Contains(string(out), want) || strings.Contains(string(out), "SECRET") {
		t.Errorf("output lacks\n%s\nor reveals the key:\n%s", want, out)
	}
	c = mustLoad(t, profileWith("sandbox: {provider: docker}\n"), nil)
	if out, _ := mustProfile(t, c, "dev").ShowYAML(); strings.Contains(string(out), "gemini") {
		t.Errorf("a profile without llm.gemini shows one:\n%s", out)
	}
}

func TestIsSecretKey(t *testing.T) {
	for _, tt := range []struct {
		key  string
		want bool
	}{
		{"api_key", true}, {"API_KEY", true}, {"apikey", true}, {"apiKey", true}, {"api-key", true},
		{"token", true}, {"secret", true}, {"password", true}, {"passphrase", true}, {"private_key", true},
		{"github_token", true}, {"client_secret", true}, {"db_password", true}, {"ssh_key", true},
		{"accessToken", true}, {"PrivateKey", true},
		{"api_key_env", false}, {"token_env", false}, {"API_KEY_ENV", false}, {"apiKeyEnv", false},
		{"tokens", false}, {"keys", false}, {"key", false}, {"monkey", false}, {"host", false}, {"secrets", false},
	} {
		if got := isSecretKey(tt.key); got != tt.want {
			t.Errorf("isSecretKey(%q) = %v, want %v", tt.key, got, tt.want)
		}
	}
}

func TestProviderSettings(t *testing.T) {
	tests := []struct {
		name    string
		sandbox string
		want    map[string]any
	}{
		{"the provider's block", "{provider: docker, docker: {image: x}, ssh: {host: h}}", map[string]any{"image": "x"}},
		{"no block", "{provider: docker, ssh: {host: h}}", nil},
		{"an empty block", "{provider: docker, docker: }", map[string]any{}},
		{"local reads its own block", "{provider: local, local: {workdir: /w}}", map[string]any{"workdir": "/w"}},
		{"local reads a none block", "{provider: local, none: {workdir: /n}}", map[string]any{"workdir": "/n"}},
		{"provider none reads a none block", "{provider: none, none: {workdir: /n}}", map[string]any{"workdir": "/n"}},
		{"provider none reads a local block", "{provider: none, local: {workdir: /l}}", map[string]any{"workdir": "/l"}},
		{"only local has the alias", "{provider: docker, none: {workdir: /n}}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustLoad(t, profileWith("sandbox: "+tt.sandbox+"\n"), nil)
			equal(t, "ProviderSettings", c.Profiles["dev"].Sandbox.ProviderSettings(), tt.want)
		})
	}
}

func TestProfileLookup(t *testing.T) {
	c, path, err := loadString(t, `
default_profile: dev
profiles:
  dev: {sandbox: {provider: docker}}
  ci: {sandbox: {provider: local}}
  prod: {sandbox: {provider: daytona}}
`, nil)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "ProfileNames", c.ProfileNames(), []string{"ci", "dev", "prod"})
	equal(t, `Profile("")`, mustProfile(t, c, "").Name, "dev")
	equal(t, `Profile("ci")`, mustProfile(t, c, "ci").Name, "ci")
	_, err = c.Profile("staging")
	equal(t, "unknown profile error", errString(err), `profile "staging" not found in `+path+` (available: ci, dev, prod)`)

	builtin, err := Load(testEnv{}.options("", t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = builtin.Profile("dev")
	equal(t, "unknown profile error", errString(err), `profile "dev" not found in built-in default config (available: local)`)
}

// A value that came from a ${VAR} or an override is shown as written,
// with what ShowYAML says of it otherwise (whether a key's variable is
// set); its neighbours as they are.
func TestShowYAMLShowsHiddenValuesAsWritten(t *testing.T) {
	c := mustLoad(t, profileWith(`model: ${MODEL:-gpt-4.1}
llm: {api_key_env: "${WHICH}"}
sandbox:
  provider: docker
  allowed_hosts: [github.com, "${HOST}"]
  docker: {image: "registry.test/${IMAGE}", cpus: 2}
`), testEnv{
		"MODEL": "sk-model-SECRET", "WHICH": "MY_KEY", "MY_KEY": "k", "HOST": "secret.example", "IMAGE": "img-SECRET",
		"AMELIA_PROFILES__DEV__SANDBOX__NETWORK":         "allowlist",
		"AMELIA_PROFILES__DEV__SANDBOX__PLUGIN_ENV":      "A,B",
		"AMELIA_PROFILES__DEV__PROXY__MAX_REQUEST_BYTES": "1MiB",
	})
	out, err := mustProfile(t, c, "dev").ShowYAML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\nmodel: ${MODEL:-gpt-4.1}\n",
		"\n  api_key_env: ${WHICH} # set\n",
		"\n  max_request_bytes: ${AMELIA_PROFILES__DEV__PROXY__MAX_REQUEST_BYTES}\n",
		"\n  network: ${AMELIA_PROFILES__DEV__SANDBOX__NETWORK}\n",
		"\n    - github.com\n    - ${HOST}\n",
		"\n  plugin_env: ${AMELIA_PROFILES__DEV__SANDBOX__PLUGIN_ENV}\n",
		"\n    cpus: 2\n    image: registry.test/${IMAGE}\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ShowYAML lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "SECRET") || strings.Contains(string(out), "secret.example") {
		t.Errorf("ShowYAML shows a value from a variable:\n%s", out)
	}
}
