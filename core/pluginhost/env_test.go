package pluginhost

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestEnvironment(t *testing.T) {
	host := []string{
		"PATH=/usr/bin", "HOME=/home/u", "USER=ollama", "LC_TIME=C", "LANG=C.UTF-8", "SHELL=/bin/sh",
		"AMELIA_WORKER_DIR=/opt/w", "AMELIA_PLUGIN_PATH=/p", "AMELIA_CONFIG=/c.yaml",
		"AMELIA_PROFILES__DEV__LLM__API_KEY=sk-override", "OPENAI_API_KEY=sk-openai", "GITHUB_TOKEN=ghp-token",
		"DOCKER_HOST=unix:///d.sock", "DAYTONA_API_KEY=dtn-default", "DAYTONA_OTHER=dtn-other",
		"KUBECONFIG=/k", "COPY_OF_KEY=sk-openai", "MY_LITERAL=sk-written", "TZ=UTC", "TZ=Europe/Paris",
	}
	base := []string{"AMELIA_WORKER_DIR=/opt/w", "HOME=/home/u", "LANG=C.UTF-8", "LC_TIME=C", "PATH=/usr/bin", "TZ=Europe/Paris", "USER=ollama"}
	daytona := Env{Vars: []string{"HTTPS_PROXY"}, Named: []NamedVar{{Key: "api_key_env", Default: "DAYTONA_API_KEY"}}}
	docker := Env{Vars: []string{"DOCKER_HOST", "DOCKER_CONTEXT"}}
	secrets := []Secret{
		{Key: "llm.api_key_env", Var: "OPENAI_API_KEY", What: "the LLM key"},
		{Key: "git.token_env", Var: "GITHUB_TOKEN", What: "the git token"},
	}
	with := func(env []string, more ...string) []string {
		out := append(slices.Clone(env), more...)
		slices.SortFunc(out, func(a, b string) int { return strings.Compare(envName(a), envName(b)) })
		return out
	}

	for _, tc := range []struct {
		name    string
		environ []string
		decl    Env
		prof    *Profile
		want    []string
		err     string
	}{
		{name: "no profile: the base only", environ: host, want: base},
		{name: "no profile: the base and what docker declares", environ: host, decl: docker, want: with(base, "DOCKER_HOST=unix:///d.sock")},
		{name: "no profile: a named variable's default", environ: host, decl: daytona, want: with(base, "DAYTONA_API_KEY=dtn-default")},
		{name: "nothing set", environ: nil, decl: docker, want: []string{}},
		{name: "sorted by name", environ: []string{"LC_ALL=C", "LC_A=x", "LC_A1=y"}, want: []string{"LC_A=x", "LC_A1=y", "LC_ALL=C"}},
		{
			name:    "a profile: granted and declared, not its secrets",
			environ: host, decl: docker,
			prof: &Profile{Grant: []string{"KUBECONFIG", "NOT_SET"}, Secrets: secrets},
			want: with(base, "DOCKER_HOST=unix:///d.sock", "KUBECONFIG=/k"),
		},
		{
			name:    "a setting names the variable instead of the default",
			environ: host, decl: daytona,
			prof: &Profile{Settings: map[string]any{"api_key_env": "DAYTONA_OTHER"}, Secrets: secrets},
			want: with(base, "DAYTONA_OTHER=dtn-other"),
		},
		{
			name:    "an empty setting is the default; one that is no name is the provider's to refuse",
			environ: host, decl: Env{Named: []NamedVar{{Key: "a", Default: "DAYTONA_API_KEY"}, {Key: "b", Default: "KUBECONFIG"}}},
			prof: &Profile{Settings: map[string]any{"a": "", "b": "$HOME"}},
			want: with(base, "DAYTONA_API_KEY=dtn-default"),
		},
		{
			name:    "a base variable with a secret's value is not the profile's choice",
			environ: host,
			prof:    &Profile{Secrets: []Secret{{Key: "llm.api_key", Value: "ollama", What: "the LLM key"}}},
			want:    base,
		},
		{
			name:    "granting the LLM key's variable",
			environ: host, decl: docker,
			prof: &Profile{Grant: []string{"KUBECONFIG", "OPENAI_API_KEY"}, Secrets: secrets},
			err:  "sandbox.plugin_env: OPENAI_API_KEY is the profile's llm.api_key_env; the LLM key never goes to a provider",
		},
		{
			name:    "the LLM key's variable refused even when unset",
			environ: nil,
			prof:    &Profile{Grant: []string{"OPENAI_API_KEY"}, Secrets: secrets},
			err:     "sandbox.plugin_env: OPENAI_API_KEY is the profile's llm.api_key_env; the LLM key never goes to a provider",
		},
		{
			name:    "a setting naming the git token's variable",
			environ: host, decl: daytona,
			prof: &Profile{Settings: map[string]any{"api_key_env": "GITHUB_TOKEN"}, Secrets: secrets},
			err:  "sandbox.daytona.api_key_env: GITHUB_TOKEN is the profile's git.token_env; the git token never goes to a provider",
		},
		{
			name:    "a default naming the LLM key's variable",
			environ: host, decl: daytona,
			prof: &Profile{Secrets: []Secret{{Key: "llm.anthropic.api_key_env", Var: "DAYTONA_API_KEY", What: "the LLM key"}}},
			err:  "sandbox.daytona.api_key_env (default): DAYTONA_API_KEY is the profile's llm.anthropic.api_key_env; the LLM key never goes to a provider",
		},
		{
			name:    "a declared variable that is the git token's",
			environ: host, decl: docker,
			prof: &Profile{Secrets: []Secret{{Key: "git.token_env", Var: "DOCKER_HOST", What: "the git token"}}},
			err:  "provider daytona: DOCKER_HOST is the profile's git.token_env; the git token never goes to a provider",
		},
		{
			name:    "granting a copy of the LLM key",
			environ: host,
			prof:    &Profile{Grant: []string{"COPY_OF_KEY"}, Secrets: secrets},
			err:     "sandbox.plugin_env: COPY_OF_KEY holds the profile's LLM key (llm.api_key_env); the LLM key never goes to a provider",
		},
		{
			name:    "granting the variable a literal key was interpolated from",
			environ: host,
			prof:    &Profile{Grant: []string{"MY_LITERAL"}, Secrets: []Secret{{Key: "llm.api_key", Value: "sk-written", What: "the LLM key"}}},
			err:     "sandbox.plugin_env: MY_LITERAL holds the profile's LLM key (llm.api_key); the LLM key never goes to a provider",
		},
		{
			name:    "granting a config override",
			environ: host,
			prof:    &Profile{Grant: []string{"AMELIA_PROFILES__DEV__LLM__API_KEY"}},
			err:     "sandbox.plugin_env: AMELIA_PROFILES__DEV__LLM__API_KEY overrides a config key and may hold a secret; AMELIA_PROFILES__ variables never go to a provider",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := environment(tc.environ, "daytona", tc.decl, tc.prof)
			switch {
			case tc.err != "":
				if err == nil || err.Error() != tc.err {
					t.Errorf("error = %v, want %q", err, tc.err)
				}
			case err != nil:
				t.Errorf("error: %v", err)
			case !reflect.DeepEqual(got, tc.want):
				t.Errorf("environment =\n  %q\nwant\n  %q", got, tc.want)
			}
		})
	}
}
