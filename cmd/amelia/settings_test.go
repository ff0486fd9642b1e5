package main_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// A profile whose provider would refuse its settings, or cannot enforce
// its network policy, is refused in amelia run's check phase, through the
// built binary and a real provider plugin, with the config file and every
// key: nothing starts, the model is never asked.
func TestRunRefusesWhatItsProviderWould(t *testing.T) {
	root := t.TempDir()
	h := newHostWith(t, fmt.Sprintf(`{provider: local, network: none, egress_check_targets: ["127.0.0.1:9"], local: {root: %q, rooot: /tmp}}`, root), root,
		llmtest.Options{}, llmtest.Turn{Text: "never asked"})
	r := h.amelia(t, "run", "--workflow", "typo", "Write nothing.")
	want := "amelia: check: " + h.configPath() + `: profiles.e2e.sandbox.network: provider local cannot enforce "none" (it can enforce: open); pick another provider or network mode (and 1 more; run ` + "`amelia config validate`)\n"
	if r.code != 2 || !strings.HasSuffix(r.stderr, want) {
		t.Errorf("amelia run: exit %d, stderr %q; want 2 (refused) and a last line %q", r.code, r.stderr, want)
	}
	if !strings.Contains(r.stdout, `{"type":"phase","content":"check","status":"failed"`) {
		t.Errorf("the check phase did not fail:\n%s", r.stdout)
	}
	r = h.amelia(t, "config", "validate")
	wantLines := h.configPath() + `: profiles.e2e.sandbox.network: provider local cannot enforce "none" (it can enforce: open); pick another provider or network mode` + "\n" +
		h.configPath() + ": profiles.e2e.sandbox.local.rooot: unknown key, did you mean root? (known: root)\n"
	if r.code != 1 || r.stderr != wantLines {
		t.Errorf("config validate: exit %d, stderr %q; want 1 and %q", r.code, r.stderr, wantLines)
	}
	if n := len(h.up.Requests()); n != 0 {
		t.Errorf("the LLM got %d requests", n)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("a refused run created a sandbox: %v", entries)
	}
}
