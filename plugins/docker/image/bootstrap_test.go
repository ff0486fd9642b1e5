package image_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// bootstrap-base.sh makes its base again when the one on the engine was
// made from another package list, or from one it cannot tell (no label):
// its --check says which, and only a base labelled with its own list
// passes. The bases here are amelia-base:<a suite of the test's own>,
// made FROM the test base with a label.
func TestBootstrapTellsAStaleBase(t *testing.T) {
	cli := dockertest.Engine(t)
	script := filepath.Join(t.TempDir(), "bootstrap-base.sh")
	if err := os.WriteFile(script, image.Bootstrap, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, label string // label "": none
		wantCode    int
		wantOut     string // its output, whole; %s is the tag
	}{
		{name: "current", label: image.BasePackages(), wantCode: 0, wantOut: "bootstrap-base: %s is there\n"},
		{name: "older list", label: strings.Join(image.BaseCore, ","), wantCode: 1, wantOut: "bootstrap-base: %s was made from " + strings.Join(image.BaseCore, ",") + ", not " + image.BasePackages() + "\n"},
		{name: "no label", wantCode: 1, wantOut: "bootstrap-base: %s was made from an older package list (no amelia.base-packages label), not " + image.BasePackages() + "\n"},
		{name: "missing", label: "-", wantCode: 1, wantOut: "bootstrap-base: there is no %s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			suite := "test-" + randomHex(t)
			if tc.label != "-" {
				dockerfile := "FROM " + image.TestBase + "\nLABEL " + image.BasePackagesLabel + "=\n"
				if tc.label != "" {
					dockerfile = "FROM " + image.TestBase + "\nLABEL " + image.BasePackagesLabel + "=" + tc.label + "\n"
				}
				dockertest.BuildImage(t, cli, "amelia-base:"+suite, dockerfile)
			}
			cmd := exec.CommandContext(t.Context(), "bash", script, "base", "--check")
			cmd.Env = append(os.Environ(), "AMELIA_BASE_SUITE="+suite)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf(tc.wantOut, "amelia-base:"+suite); code != tc.wantCode || string(out) != want {
				t.Errorf("bootstrap-base.sh --check exited %d saying:\n%s\nwant exit %d and\n%s", code, out, tc.wantCode, want)
			}
		})
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
