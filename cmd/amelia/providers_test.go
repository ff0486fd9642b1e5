package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// TestWithoutProviders: an amelia installed without amelia-providers
// beside it (go install alone) fails saying what is missing and how to
// install it, for a run and for the commands it hands to
// amelia-providers; beside it, the same run succeeds.
func TestWithoutProviders(t *testing.T) {
	h := newHost(t, llmtest.Options{}, llmtest.Turn{Text: "done"})
	alone := filepath.Join(t.TempDir(), "amelia")
	data, err := os.ReadFile(ameliaBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "--json", "hello"},
		{"image", "build"},
		{"plugin", "serve", "local"},
	} {
		cmd := exec.Command(alone, args...)
		cmd.Dir, cmd.Env = h.repo, h.env
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("amelia %s without amelia-providers: succeeded:\n%s", strings.Join(args, " "), out)
			continue
		}
		if !strings.Contains(string(out), "amelia-providers") || !strings.Contains(string(out), "make install") {
			t.Errorf("amelia %s without amelia-providers: want a line naming amelia-providers and make install, got:\n%s", strings.Join(args, " "), out)
		}
	}
	if r := h.amelia(t, "run", "--json", "hello"); r.code != 0 {
		t.Errorf("the same run with amelia-providers beside amelia: exit %d: %s", r.code, r.stderr)
	}
}
