package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestSetup reads sandbox.setup in each of postCreateCommand's forms, and
// refuses what is not a command at its key.
func TestSetup(t *testing.T) {
	for _, c := range []struct {
		name, setup string
		want        []SetupCommand
		err         string
	}{
		{name: "string", setup: `"npm ci && echo ok"`, want: []SetupCommand{{Argv: []string{"sh", "-c", "npm ci && echo ok"}}}},
		{name: "argv", setup: `[npm, ci, --quiet]`, want: []SetupCommand{{Argv: []string{"npm", "ci", "--quiet"}}}},
		{name: "map in name order", setup: `{b: [make, deps], a: "npm ci"}`, want: []SetupCommand{
			{Name: "a", Argv: []string{"sh", "-c", "npm ci"}},
			{Name: "b", Argv: []string{"make", "deps"}},
		}},
		{name: "empty string", setup: `"  "`, err: "profiles.dev.sandbox.setup: is an empty command"},
		{name: "empty argv", setup: `[]`, err: "profiles.dev.sandbox.setup: is an empty command"},
		{name: "number", setup: `3`, err: "profiles.dev.sandbox.setup: must be a command: a string (run by sh -c), a list of strings (an argv), or a map of those, got a number"},
		{name: "map item of a wrong kind", setup: `{a: true}`, err: "profiles.dev.sandbox.setup.a: must be a command"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, _, err := loadString(t, profileWith("sandbox:\n  provider: docker\n  setup: "+c.setup+"\n"), testEnv{})
			if c.err != "" {
				var ve *ValidationError
				if !errors.As(err, &ve) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want a problem %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Profiles["dev"].Sandbox.Setup; !reflect.DeepEqual(got, c.want) {
				t.Errorf("setup = %#v, want %#v", got, c.want)
			}
		})
	}
}
