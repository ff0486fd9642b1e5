package cli

import (
	"strings"
	"testing"
	"time"
)

// How runs share a sandbox: separated wherever the provider gives runs
// uids of their own, whatever the profile says; else one at a time, or
// shared unseparated when the profile allows it.
func TestRunsMode(t *testing.T) {
	for _, c := range []struct {
		runUsers, concurrent bool
		want                 string
	}{
		{false, false, "one-at-a-time"},
		{false, true, "shared,unseparated"},
		{true, false, "separated"},
		{true, true, "separated"},
	} {
		if got := runsMode(c.runUsers, c.concurrent); got != c.want {
			t.Errorf("runsMode(run users %v, concurrent_runs %v) = %q, want %q", c.runUsers, c.concurrent, got, c.want)
		}
	}
}

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
