package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// testEnv is a controlled environment: it backs both Options.LookupEnv
// and Options.Environ.
type testEnv map[string]string

func (e testEnv) options(path, home string) Options {
	environ := make([]string, 0, len(e))
	for k, v := range e {
		environ = append(environ, k+"="+v)
	}
	return Options{
		Path:    path,
		Environ: environ,
		HomeDir: home,
		LookupEnv: func(k string) (string, bool) {
			v, ok := e[k]
			return v, ok
		},
	}
}

// writeFile writes content to dir/name (creating parents) and returns the
// path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadString writes content to a config file in a temporary directory and
// loads it with --config and the environment env.
func loadString(t *testing.T, content string, env testEnv) (*Config, string, error) {
	t.Helper()
	p := writeFile(t, t.TempDir(), "config.yaml", content)
	c, err := Load(env.options(p, t.TempDir()))
	return c, p, err
}

// mustLoad loads content and fails the test on any error.
func mustLoad(t *testing.T, content string, env testEnv) *Config {
	t.Helper()
	c, _, err := loadString(t, content, env)
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			t.Fatalf("Load: %v\nall problems:\n%s", err, problemLines(ve))
		}
		t.Fatalf("Load: %v", err)
	}
	return c
}

func mustProfile(t *testing.T, c *Config, name string) *Profile {
	t.Helper()
	p, err := c.Profile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// problems loads content and returns its problems as "key: message"
// lines, failing unless Load returned a *ValidationError for that file.
func problems(t *testing.T, content string, env testEnv) []string {
	t.Helper()
	_, path, err := loadString(t, content, env)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Load: got error %v (%T), want *ValidationError", err, err)
	}
	if ve.File != path {
		t.Errorf("ValidationError.File = %q, want %q", ve.File, path)
	}
	var out []string
	for _, p := range ve.Problems {
		out = append(out, p.String())
	}
	return out
}

func problemLines(ve *ValidationError) string {
	var b strings.Builder
	for _, p := range ve.Problems {
		b.WriteString("  " + p.String() + "\n")
	}
	return b.String()
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %#v\nwant %#v", what, got, want)
	}
}

// minimal is a valid one-profile config to build on.
const minimal = `
profiles:
  dev:
    sandbox: {provider: docker}
`

// defaultGit is a profile's git block when the file has none.
var defaultGit = Git{Username: DefaultGitUsername}

// defaultProxy is a profile's proxy block when the file has none.
var defaultProxy = Proxy{MaxRequestBytes: DefaultMaxRequestBytes}
