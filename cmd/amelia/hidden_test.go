package main_test

import (
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// A value that came from a ${VAR} or an AMELIA_PROFILES__ override is
// never printed, by any command, in any stream — stdout, the --json
// events, stderr, the --debug log —, whichever key it is and whoever
// quotes it (the config, the plugin host, the provider): the command
// shows it as written and still names the key that is wrong. The secret
// here is a valid provider name, so it goes as far as it can.
func TestHiddenValuesAreNeverShown(t *testing.T) {
	const secret = "sk-amelia-hidden-7f3c9e2a1b5d"
	for _, tc := range []struct {
		name    string
		sandbox string   // the e2e profile's sandbox block
		env     []string // what sets the secret
		key     string   // the key every command names
		shown   string   // how they show the value
	}{
		{"provider from a ${VAR}", `{provider: "${E2E_PROVIDER}"}`, []string{"E2E_PROVIDER=" + secret},
			"profiles.e2e.sandbox.provider", "${E2E_PROVIDER}"},
		{"provider from an override", `{provider: local}`, []string{"AMELIA_PROFILES__E2E__SANDBOX__PROVIDER=" + secret},
			"profiles.e2e.sandbox.provider", "${AMELIA_PROFILES__E2E__SANDBOX__PROVIDER}"},
		{"network from an override", `{provider: local}`, []string{"AMELIA_PROFILES__E2E__SANDBOX__NETWORK=" + secret},
			"profiles.e2e.sandbox.network", "AMELIA_PROFILES__E2E__SANDBOX__NETWORK"},
		{"a setting its provider refuses", `{provider: local, local: {root: "${E2E_ROOT}"}}`, []string{"E2E_ROOT=" + secret},
			"profiles.e2e.sandbox.local.root", "${E2E_ROOT}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostWith(t, tc.sandbox, "", llmtest.Options{}, llmtest.Turn{Text: "never asked"})
			h.env = append(h.env, tc.env...)
			for _, args := range [][]string{
				{"config", "validate"},
				{"config", "show"},
				{"--debug", "sandbox", "up"},
				{"sandbox", "ls"}, // a row of the profile says what is wrong, and ls goes on
				{"doctor"},
				{"run", "--json", "--workflow", "hidden", "Write nothing."},
				{"--debug", "run", "--workflow", "hidden", "Write nothing."},
			} {
				cmd := strings.Join(args, " ")
				r := h.amelia(t, args...)
				all := r.stdout + r.stderr
				if strings.Contains(all, secret) {
					t.Errorf("amelia %s shows the value:\n%s", cmd, all)
				}
				if !strings.Contains(all, tc.shown) {
					t.Errorf("amelia %s does not show the value as %s:\n%s", cmd, tc.shown, all)
				}
				switch {
				case cmd == "sandbox ls" || cmd == "config show" && r.code == 0:
				case r.code == 0:
					t.Errorf("amelia %s: exit 0, want a failure", cmd)
				case !strings.Contains(all, tc.key) && !strings.Contains(all, "profile e2e: "):
					t.Errorf("amelia %s names neither %s nor profile e2e:\n%s", cmd, tc.key, all)
				}
			}
			if n := len(h.up.Requests()); n != 0 {
				t.Errorf("the LLM got %d requests", n)
			}
		})
	}
}
