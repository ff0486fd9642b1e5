package cli

import (
	"strings"
	"testing"
	"time"
)

// sandbox ls shows each way runs share a sandbox, in the table and in
// JSON.
func TestSandboxLsRuns(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	created := now.Add(-3 * time.Hour)
	rows := func() []sandboxRow {
		return []sandboxRow{
			{Profile: "box", Provider: "docker", State: "ready", Created: &created, Runs: runsMode(true, false),
				Workflows: []string{"fix-1", "fix-2"}, WorkflowStates: map[string]string{"fix-1": "running", "fix-2": "kept"}},
			{Profile: "dev", Provider: "local", State: "ready", Created: &created, Runs: runsMode(false, false)},
			{Profile: "team", Provider: "ssh", State: "absent", Runs: runsMode(false, true)},
		}
	}
	var out strings.Builder
	for _, asJSON := range []bool{false, true} {
		if err := printSandboxRows(&out, rows(), asJSON, now); err != nil {
			t.Fatal(err)
		}
	}
	golden(t, "sandbox-ls-runs", out.String())
}
