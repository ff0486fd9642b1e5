package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/testbin"
)

// The demo runs amelia for real (on the local provider: no engine answers
// at the DOCKER_HOST it is given) and leaves nothing behind: not in the
// user's amelia directories, not in the temporary directory.
func TestDemoLeavesNothingBehind(t *testing.T) {
	bin := t.TempDir()
	amelia, err := testbin.BuildAmelia(bin)
	if err != nil {
		t.Fatal(err)
	}
	home, tmp := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("XDG_STATE_HOME", filepath.Join(home, "state"))
	t.Setenv("TMPDIR", tmp)
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(tmp, "no-engine.sock"))
	t.Setenv("OPENAI_API_KEY", "")
	// A variable of the user's own config, which the demo's must ignore.
	t.Setenv("AMELIA_PROFILES__DEV__MODEL", "m")
	if err := demo(amelia); err != nil {
		t.Fatalf("demo: %v", err)
	}
	for _, dir := range []string{home, tmp} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			t.Errorf("the demo left %s", filepath.Join(dir, e.Name()))
		}
	}
}
