package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
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
		shown   string  // how the problem shows the value; "" for the ${VAR} as written
	}{
		{"enum", profileWith("sandbox: {provider: docker, network: '${OPENAI_API_KEY}'}\n"), nil, "profiles.dev.sandbox.network", ""},
		{"enum with text around", profileWith("sandbox: {provider: docker, network: 'x-${OPENAI_API_KEY}-y'}\n"), nil, "profiles.dev.sandbox.network", ""},
		{"name", profileWith("sandbox: {provider: '${OPENAI_API_KEY}'}\n"), nil, "profiles.dev.sandbox.provider", ""},
		{"duration", profileWith("llm: {timeout: '${OPENAI_API_KEY}'}\n" + sandbox), nil, "profiles.dev.llm.timeout", ""},
		{"size", profileWith("proxy: {max_request_bytes: '${OPENAI_API_KEY}'}\n" + sandbox), nil, "profiles.dev.proxy.max_request_bytes", ""},
		{"size too large", profileWith("proxy: {max_request_bytes: '${BIG}'}\n" + sandbox), testEnv{"BIG": "98765432109876543"}, "profiles.dev.proxy.max_request_bytes", ""},
		{"path", profileWith("proxy: {audit_dir: '${OPENAI_API_KEY}'}\n" + sandbox), nil, "profiles.dev.proxy.audit_dir", ""},
		{"list item", profileWith("sandbox: {provider: docker, allowed_hosts: [github.com, '${OPENAI_API_KEY}']}\n"), nil, "profiles.dev.sandbox.allowed_hosts[1]", ""},
		{"host:port", profileWith("sandbox: {provider: docker, egress_check_targets: ['${OPENAI_API_KEY}']}\n"), nil, "profiles.dev.sandbox.egress_check_targets[0]", ""},
		{"nested upstream URL", profileWith("llm: {anthropic: {base_url: '${OPENAI_API_KEY}'}}\n" + sandbox), nil, "profiles.dev.llm.anthropic.base_url", ""},
		{"nested upstream key variable", profileWith("llm: {anthropic: {api_key_env: '${OPENAI_API_KEY}'}}\n" + sandbox), nil, "profiles.dev.llm.anthropic.api_key_env", ""},
		{"git username", profileWith("git: {username: '${OPENAI_API_KEY}'}\n" + sandbox), testEnv{"OPENAI_API_KEY": secret + "\n"}, "profiles.dev.git.username", ""},
		{"default_profile", "default_profile: '${OPENAI_API_KEY}'\n" + profileWith(sandbox), nil, "default_profile", ""},
		{"environment override", profileWith(sandbox), testEnv{"AMELIA_PROFILES__DEV__SANDBOX__NETWORK": "${OPENAI_API_KEY}"}, "profiles.dev.sandbox.network", "the value from AMELIA_PROFILES__DEV__SANDBOX__NETWORK"},
		{"environment override of a secret", profileWith(sandbox), testEnv{"AMELIA_PROFILES__DEV__SANDBOX__PROVIDER": strings.ToLower(secret)}, "profiles.dev.sandbox.provider", "the value from AMELIA_PROFILES__DEV__SANDBOX__PROVIDER"},
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
					if want := cmp.Or(tt.shown, "${"); !strings.Contains(p.Message, want) {
						t.Errorf("%s: %q does not show the value as %s", p.Key, p.Message, want)
					}
				}
			}
			if !found {
				t.Errorf("no problem at %s:\n%s", tt.key, problemLines(ve))
			}
		})
	}
}

// A config file over maxConfigBytes is refused with one line naming it,
// its size and the limit, before it is read; one at the limit loads.
func TestConfigFileSizeLimit(t *testing.T) {
	dir := t.TempDir()
	// Just over the limit, sparse: 1 MiB of NULs it never reads.
	over := filepath.Join(dir, "over.yaml")
	f, err := os.Create(over)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(maxConfigBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = Load(testEnv{}.options(over, dir))
	if err == nil {
		t.Fatal("Load of a file over the limit succeeded")
	}
	for _, want := range []string{over, strconv.Itoa(maxConfigBytes + 1), "1MiB", "--config"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q is more than one line", err)
	}

	// Exactly at the limit: a valid config padded with a comment.
	at := filepath.Join(dir, "at.yaml")
	content := minimal + "#"
	content += strings.Repeat("x", maxConfigBytes-len(content)-1) + "\n"
	if err := os.WriteFile(at, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(at); fi.Size() != maxConfigBytes {
		t.Fatalf("test file is %d bytes, want %d", fi.Size(), maxConfigBytes)
	}
	c, err := Load(testEnv{}.options(at, dir))
	if err != nil {
		t.Fatalf("Load of a file at the limit: %v", err)
	}
	equal(t, "profiles", c.ProfileNames(), []string{"dev"})
}

// A config that is not a regular file (a pipe, /dev/stdin, a device) has
// no size to check first: it is read up to the limit and no further.
func TestConfigStreamSizeLimit(t *testing.T) {
	if _, err := os.Stat("/dev/fd/0"); err != nil {
		t.Skip("no /dev/fd on this system")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() {
		// Endless: Load must stop reading on its own.
		defer w.Close()
		line := []byte("# padding padding padding padding padding padding\n")
		for {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}()
	name := fmt.Sprintf("/dev/fd/%d", r.Fd())
	_, err = Load(testEnv{}.options(name, t.TempDir()))
	if err == nil || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "more than 1048576 bytes") {
		t.Fatalf("Load of an endless pipe: %v", err)
	}
}

// Environment overrides and ${VAR}s are config text too: they are held
// to the same limit.
func TestEnvironmentConfigSizeLimit(t *testing.T) {
	big := strings.Repeat("a", maxConfigBytes/4)
	t.Run("overrides", func(t *testing.T) {
		env := testEnv{}
		for i := range 5 {
			env[fmt.Sprintf("AMELIA_PROFILES__DEV__X%d", i)] = big
		}
		_, _, err := loadString(t, minimal, env)
		if err == nil || !strings.Contains(err.Error(), "AMELIA_") || !strings.Contains(err.Error(), "1MiB") {
			t.Fatalf("Load with %d bytes of overrides: %v", 5*len(big), err)
		}
	})
	t.Run("expansions", func(t *testing.T) {
		content := profileWith("sandbox:\n  provider: docker\n  docker: {a: '${BIG}', b: '${BIG}', c: '${BIG}', d: '${BIG}', e: '${BIG}'}\n")
		got := problems(t, content, testEnv{"BIG": big})
		if len(got) != 1 || !strings.Contains(got[0], "1MiB") || strings.Contains(got[0], big[:64]) {
			t.Fatalf("problems: %.300q", got)
		}
	})
}

// No key shows a value that came from a ${VAR} or an override, in a
// problem, in ShowYAML or where a provider quotes it (ProblemAt): every
// key of a profile, found as a user finds them (the known keys an
// unknown one lists), so that a key added later is covered too.
func TestNoKeyShowsAHiddenValue(t *testing.T) {
	leaves := profileKeys(t)
	for _, want := range []string{"model", "llm.anthropic.api_key", "git.username", "proxy.audit_dir", "sandbox.provider", "sandbox.plugin_env"} {
		if !slices.Contains(leaves, want) {
			t.Fatalf("the keys found lack %s: %v", want, leaves)
		}
	}
	// Settings blocks are the providers': any key, at any depth.
	leaves = append(leaves, "sandbox.docker.image", "sandbox.docker.registry.url")
	// So are an MCP server's name and keys.
	leaves = append(leaves, "mcp.gh.command", "mcp.gh.url", "mcp.gh.env.TOKEN", "mcp.gh.headers.Authorization")
	secrets := []string{
		"sk-proj/Abc+123=SECRETsecret9f3a", // valid as nothing
		"sk-live-0a1b2c3d4e5f6a7b8c9d",     // a valid name, host, model, username...
	}
	for _, leaf := range leaves {
		for _, secret := range secrets {
			for _, form := range []string{"${VAR}", "[${VAR}]", "override"} {
				content, env := minimal, testEnv{"SECRET": secret}
				if form == "override" {
					env["AMELIA_PROFILES__DEV__"+strings.ToUpper(strings.ReplaceAll(leaf, ".", "__"))] = secret
				} else {
					var v any = "${SECRET}"
					if form == "[${VAR}]" {
						v = []any{v}
					}
					content = profileSetting(t, leaf, v)
				}
				c, _, err := loadString(t, content, env)
				var shown string
				if err != nil {
					shown = err.Error()
					if ve := (*ValidationError)(nil); errors.As(err, &ve) {
						shown += "\n" + problemLines(ve)
					}
				} else {
					p := mustProfile(t, c, "dev")
					out, err := p.ShowYAML()
					if err != nil {
						t.Fatal(err)
					}
					shown = string(out) + "\n" + p.ProblemAt(leaf, fmt.Sprintf("%q is wrong, %s is wrong", secret, secret)).String()
				}
				if strings.Contains(strings.ToLower(shown), strings.ToLower(secret)) {
					t.Errorf("%s set as %s: the value is shown:\n%s", leaf, form, shown)
				}
			}
		}
	}
}

// profileKeys are the paths of every key of a profile that is not a
// section of keys itself, found as a user would: an unknown key lists
// the known ones.
func profileKeys(t *testing.T) []string {
	t.Helper()
	const probe = "zzprobe"
	// known are the keys an unknown key under prefix lists, or nil when
	// prefix is not a section.
	known := func(prefix string) []string {
		at := strings.TrimPrefix(prefix+"."+probe, ".")
		env := testEnv{"AMELIA_PROFILES__DEV__" + strings.ToUpper(strings.ReplaceAll(at, ".", "__")): "1"}
		_, _, err := loadString(t, minimal, env)
		if err == nil {
			return nil // a leaf whose map takes any name (sandbox.setup's commands)
		}
		var ve *ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("probe %s: %v", at, err)
		}
		for _, p := range ve.Problems {
			_, list, ok := strings.Cut(p.Message, "(known: ")
			if p.Key != "profiles.dev."+at || !ok {
				continue
			}
			var keys []string
			list, _, _ = strings.Cut(list, ")")
			for k := range strings.SplitSeq(list, ", ") {
				if !strings.Contains(k, " ") { // not the hint: "or a map of provider settings"
					keys = append(keys, k)
				}
			}
			return keys
		}
		return nil
	}
	var leaves []string
	var walk func(prefix string, keys []string)
	walk = func(prefix string, keys []string) {
		for _, k := range keys {
			key := strings.TrimPrefix(prefix+"."+k, ".")
			if sub := known(key); sub != nil {
				walk(key, sub)
			} else {
				leaves = append(leaves, key)
			}
		}
	}
	walk("", known(""))
	return leaves
}

// profileSetting is a config whose profile dev has its sandbox on docker
// and v at the path key (dot-separated).
func profileSetting(t *testing.T, key string, v any) string {
	t.Helper()
	profile := map[string]any{"sandbox": map[string]any{"provider": "docker"}}
	m := profile
	parts := strings.Split(key, ".")
	for _, k := range parts[:len(parts)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
	b, err := yaml.Marshal(map[string]any{"profiles": map[string]any{"dev": profile}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A file nested deeper than maxConfigDepth is refused, before it becomes
// keys, with one line naming it and the limit: thousands of levels in a
// few KiB would otherwise take seconds. A file nested exactly to the
// limit loads, so the bound is what refuses the others.
func TestConfigDepthLimit(t *testing.T) {
	// settingsNested is a profile whose docker settings hold maps nested
	// so that the deepest is at level depth (the top of the file is 1;
	// the docker block is 5).
	settingsNested := func(depth int) string {
		n := depth - 5
		return "profiles: {dev: {sandbox: {provider: docker, docker: " + strings.Repeat("{a: ", n) + "{}" + strings.Repeat("}", n) + "}}}\n"
	}
	const deep = 5000
	tooDeep := "maps and lists nested more than 100 levels deep, over the limit for a config file"
	for _, tc := range []struct {
		name, content, want string
	}{
		{"flow lists", "profiles: " + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "\n", "line 1: " + tooDeep},
		{"flow maps", settingsNested(deep), "line 1: " + tooDeep},
		{"block lists", "profiles:\n  dev:\n    " + strings.Repeat("- ", deep) + "x\n", "line 3: " + tooDeep},
		{"past the parser's own limit", "profiles: " + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + "\n", tooDeep},
		{"one level too deep", settingsNested(maxConfigDepth + 1), "line 1: " + tooDeep},
		{"an alias of a deep anchor", "x: &x " + settingsNested(60)[len("profiles: "):] + "y: [" + strings.Repeat("[", 45) + "*x" + strings.Repeat("]", 45) + "]\n", "line 2: " + tooDeep},
		{"an anchor that holds itself", "x: &x [*x]\n", "line 1: " + tooDeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path, err := loadString(t, tc.content, nil)
			if err == nil || err.Error() != path+": "+tc.want+" (is it the right file?)" {
				t.Errorf("Load: %v\nwant %s: %s (is it the right file?)", err, path, tc.want)
			}
		})
	}
	c := mustLoad(t, settingsNested(maxConfigDepth), nil)
	if c.Profiles["dev"].Sandbox.ProviderSettings()["a"] == nil {
		t.Errorf("the settings at the limit did not load: %v", c.Profiles["dev"].Sandbox.Settings)
	}

	// The overrides' keys are held to it too.
	name := "AMELIA_PROFILES__DEV__SANDBOX__DOCKER" + strings.Repeat("__A", deep)
	got := problems(t, minimal, testEnv{name: "1"})
	want := "environment variable " + name[:60] + "...: its keys are nested more than 100 levels deep, over the limit for config keys"
	equal(t, "problems", got, []string{want})
	name = "AMELIA_PROFILES__DEV__SANDBOX__DOCKER" + strings.Repeat("__A", maxConfigDepth-5)
	if c := mustLoad(t, minimal, testEnv{name: "1"}); c.Profiles["dev"].Sandbox.ProviderSettings()["a"] == nil {
		t.Errorf("the override at the limit did not load: %v", c.Profiles["dev"].Sandbox.Settings)
	}
}
