// Package agentbintest gives tests the cached CLI-agent programs (package
// agentbin): opencode and the MCP everything server. When they are not
// built (make agent-binaries), the test is skipped with the reason, unless
// AMELIA_REQUIRE_AGENTS is set (CI sets it), which makes it a failure.
package agentbintest

import (
	"os"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/agentbin"
)

// RequireEnv makes programs that are not built a test failure when set.
const RequireEnv = "AMELIA_REQUIRE_AGENTS"

// Binaries returns the cached programs, or skips or fails tb, as the
// package doc says, when they are not built.
func Binaries(tb testing.TB) agentbin.Binaries {
	tb.Helper()
	b, err := cached()
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("no CLI-agent test programs, and %s is set: %v", RequireEnv, err)
		}
		tb.Skipf("SKIPPING: this test needs the CLI-agent test programs: %v; set %s=1 to make that a failure", err, RequireEnv)
	}
	return b
}

func cached() (agentbin.Binaries, error) {
	root, err := agentbin.CacheDir()
	if err != nil {
		return agentbin.Binaries{}, err
	}
	return agentbin.Cached(root)
}
