package pluginhost

import (
	"fmt"
	"slices"
	"strings"
)

// A plugin never inherits the host's environment, which holds the LLM key
// and the git token. It gets the base below, the variables its provider
// declares (Env), and, when it is started for a profile, those the profile
// grants it (Profile.Grant), drawn from the host's environment; never a
// variable that holds one of the profile's secrets.

// baseEnv are the variables every plugin gets: where things are, who the
// user is, the locale (and every LC_*), the Go runtime's settings, and
// AMELIA_WORKER_DIR, where the built-in providers find workers.
var baseEnv = []string{
	"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR",
	"XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
	"GODEBUG", "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "GOTRACEBACK", "GORACE", "GOCOVERDIR",
	"AMELIA_WORKER_DIR",
}

// inBase reports whether name is one of the base variables.
func inBase(name string) bool {
	return slices.Contains(baseEnv, name) || strings.HasPrefix(name, "LC_")
}

// configOverridePrefix starts the variables that override config keys
// (AMELIA_PROFILES__DEV__LLM__API_KEY), which can hold secrets.
const configOverridePrefix = "AMELIA_PROFILES__"

// Env is what a provider reads from the host's environment beyond the
// base.
type Env struct {
	// Vars are variables it reads by name.
	Vars []string
	// Named are variables that a key of its settings names.
	Named []NamedVar
}

// NamedVar is the variable that the provider setting Key names (Daytona's
// api_key_env), or Default when the profile does not set Key.
type NamedVar struct {
	Key     string
	Default string
}

// Profile is what a profile adds to its plugin's environment, and what it
// keeps out of it, and whether its runs share a plugin (Host.Start).
type Profile struct {
	// ID tells the profile from every other (its config file and its
	// name): plugins of two profiles are never shared.
	ID string
	// OwnPlugin gives each Start a plugin process of its own
	// (sandbox.shared_plugin: false).
	OwnPlugin bool
	// Settings is the profile's settings block for the provider, where
	// the keys of Env.Named are read.
	Settings map[string]any
	// Grant are the variables the profile grants (sandbox.plugin_env).
	Grant []string
	// Secrets are the profile's LLM keys and git token: none reaches a
	// plugin.
	Secrets []Secret
}

// Secret is where one of a profile's secrets comes from: the variable
// Var, or the value Value as written in the profile.
type Secret struct {
	Key   string // the profile key: llm.api_key_env, git.token...
	Var   string // the variable holding it, when Key names one
	Value string // the secret itself, when the profile holds it
	What  string // for messages: "the LLM key", "the git token"
}

// candidate is a variable a plugin may get, and why, for messages.
type candidate struct {
	name   string
	origin string // "sandbox.plugin_env", "provider docker"...
	chosen bool   // the profile chose it (granted, or named by a setting)
}

// environment is the environment of the plugin of provider name, which
// declares decl, drawn from environ (os.Environ()): "NAME=value" entries
// sorted by name, never nil. prof is the profile it is started for, nil
// for none (plugin ls). It refuses, naming the variable and where it came
// from, any variable that holds one of prof's secrets.
func environment(environ []string, name string, decl Env, prof *Profile) ([]string, error) {
	host := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			host[k] = v // the last one wins, as in os/exec
		}
	}
	var base []string
	for k := range host {
		if inBase(k) {
			base = append(base, k)
		}
	}
	slices.Sort(base) // for the same error every time
	var cands []candidate
	for _, k := range base {
		cands = append(cands, candidate{name: k, origin: "the base plugin environment"})
	}
	for _, v := range decl.Vars {
		cands = append(cands, candidate{name: v, origin: "provider " + name})
	}
	for _, n := range decl.Named {
		v, set := namedVar(prof, n)
		origin := fmt.Sprintf("sandbox.%s.%s", name, n.Key)
		if !set {
			origin += " (default)"
		}
		cands = append(cands, candidate{name: v, origin: origin, chosen: set})
	}
	if prof != nil {
		for _, v := range prof.Grant {
			cands = append(cands, candidate{name: v, origin: "sandbox.plugin_env", chosen: true})
		}
		for _, c := range cands {
			if err := checkSecrets(c, prof.Secrets, host); err != nil {
				return nil, err
			}
		}
	}
	env := []string{}
	seen := map[string]bool{}
	for _, c := range cands {
		if v, ok := host[c.name]; ok && c.name != "" && !seen[c.name] {
			seen[c.name] = true
			env = append(env, c.name+"="+v)
		}
	}
	slices.SortFunc(env, func(a, b string) int { return strings.Compare(envName(a), envName(b)) })
	return env, nil
}

// namedVar is the variable n names in prof's settings, and whether the
// profile set it; Default when there is no profile or the key is unset.
// A value that is not a variable name is left to the provider to refuse.
func namedVar(prof *Profile, n NamedVar) (string, bool) {
	if prof == nil {
		return n.Default, false
	}
	switch v := prof.Settings[n.Key].(type) {
	case nil:
		return n.Default, false
	case string:
		if v == "" {
			return n.Default, false
		}
		if !validName(v) {
			return "", true
		}
		return v, true
	}
	return "", true
}

// checkSecrets refuses c when it is one of secrets' variables or a config
// override; and, when the profile chose c, when its value is one of the
// secrets (llm.api_key: ${MY_KEY} with MY_KEY granted).
func checkSecrets(c candidate, secrets []Secret, host map[string]string) error {
	if c.name == "" {
		return nil
	}
	if c.chosen && strings.HasPrefix(c.name, configOverridePrefix) {
		return fmt.Errorf("%s: %s overrides a config key and may hold a secret; %s variables never go to a provider", c.origin, c.name, configOverridePrefix)
	}
	for _, s := range secrets {
		if s.Var != "" && c.name == s.Var {
			return fmt.Errorf("%s: %s is the profile's %s; %s never goes to a provider", c.origin, c.name, s.Key, s.What)
		}
		if !c.chosen {
			continue
		}
		secret := s.Value
		if s.Var != "" {
			secret = host[s.Var]
		}
		if v, ok := host[c.name]; ok && v != "" && v == secret {
			return fmt.Errorf("%s: %s holds the profile's %s (%s); %s never goes to a provider", c.origin, c.name, strings.TrimPrefix(s.What, "the "), s.Key, s.What)
		}
	}
	return nil
}

// validName reports whether s is a portable environment variable name.
func validName(s string) bool {
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return s != ""
}

// envName is the name of a "NAME=value" entry.
func envName(kv string) string {
	name, _, _ := strings.Cut(kv, "=")
	return name
}

// names are the variable names of env, for logs.
func names(env []string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = envName(kv)
	}
	return out
}
