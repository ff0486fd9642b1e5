// Package pythontest finds the python3 with pydantic v2 that the checks
// of the worker against the Python Amelia's models need (compat/,
// internal/worker), or skips loudly, or fails when RequireEnv is set, as
// internal/dockertest does for the engine.
package pythontest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireEnv makes a missing python3 with pydantic v2 a test failure when
// set (CI sets it).
const RequireEnv = "AMELIA_REQUIRE_UPSTREAM"

// Python returns the path of a python3 with pydantic v2, found on PATH.
// Without one the test is skipped, saying so loudly, or fails when
// RequireEnv is set; what is checked without it is in what.
func Python(tb testing.TB, what string) string {
	tb.Helper()
	python, err := exec.LookPath("python3")
	if err == nil {
		var out []byte
		out, err = exec.Command(python, "-c", "import pydantic; print(pydantic.VERSION)").CombinedOutput()
		if err == nil && !strings.HasPrefix(string(out), "2.") {
			err = fmt.Errorf("pydantic %s, not v2", strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			tb.Fatalf("python3 with pydantic v2 is needed to check %s, and %s is set: %v", what, RequireEnv, err)
		}
		tb.Skipf("SKIPPING: python3 with pydantic v2 not found (%v): %s was not checked; set %s=1 to make that a failure", err, what, RequireEnv)
	}
	return python
}
