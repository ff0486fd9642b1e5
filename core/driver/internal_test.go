package driver

import (
	"strings"
	"testing"
)

func TestSandboxArch(t *testing.T) {
	for machine, want := range map[string]string{
		"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", " x86_64\n": "amd64",
	} {
		if got, err := sandboxArch(machine); err != nil || got != want {
			t.Errorf("sandboxArch(%q) = %q, %v; want %q", machine, got, err, want)
		}
	}
	for _, machine := range []string{"riscv64", "armv7l", "i686", "", "x86_64\x1b[2J"} {
		_, err := sandboxArch(machine)
		if err == nil || !strings.Contains(err.Error(), "amd64 and arm64") || strings.Contains(err.Error(), "\x1b") {
			t.Errorf("sandboxArch(%q) = %v", machine, err)
		}
	}
}
