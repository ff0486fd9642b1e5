package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/lifetime"
)

// sandbox ls shows each sandbox's name and provider, each way runs share
// a sandbox, and what a profile's sandbox on another provider and one of
// an older version are, and when each stops, in the table and in JSON.
func TestSandboxLsRuns(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	created := now.Add(-3 * time.Hour)
	rows := func() []sandboxRow {
		return []sandboxRow{
			{Profile: "box", Sandbox: "box-1a2b3c4d", Provider: "docker", State: "ready", Created: &created, Runs: runsMode(true, false),
				Workflows: []string{"fix-1", "fix-2"}, WorkflowStates: map[string]string{"fix-1": "running", "fix-2": "kept"},
				Lifetime: &lifetime.Status{Watchdog: "running", Started: created, LastActivity: now.Add(-5 * time.Minute), StopsAt: now.Add(25 * time.Minute), Reason: lifetime.ReasonIdle}},
			// Busy past its lifetime: it stops once its work ends.
			{Profile: "old", Sandbox: "old-3c4d5e6f", Provider: "ssh", State: "ready", Created: &created, Runs: runsMode(false, false),
				Lifetime: &lifetime.Status{Watchdog: "running", Started: created, Busy: true, LastActivity: now, StopsAt: now.Add(-time.Hour), Reason: lifetime.ReasonLifetime}},
			// Stopped by its watchdog.
			{Profile: "idle", Sandbox: "idle-7a8b9c0d", Provider: "docker", State: "stopped", Created: &created, Runs: runsMode(true, false),
				Message: "container amelia-idle-7a8b9c0d is exited since 2026-11-26T11:30:00Z"},
			// box's, made by amelia run --sandbox local.
			{Profile: "box", Sandbox: "box-1a2b3c4d", Provider: "local", State: "ready", Created: &created, Runs: runsMode(false, false), Elsewhere: true},
			// box's, named by an older amelia.
			{Profile: "box", Sandbox: "box", Provider: "docker", State: "ready", Created: &created, Runs: runsMode(true, false), Legacy: true},
			{Profile: "dev", Sandbox: "dev-5e6f7a8b", Provider: "local", State: "ready", Created: &created, Runs: runsMode(false, false)},
			// Its provider would lose its work by stopping it.
			{Profile: "pod", Sandbox: "pod-4b5c6d7e", Provider: "kubernetes", State: "ready", Created: &created, Runs: runsMode(false, false),
				Message: "pod ns/amelia-pod-4b5c6d7e on node-1", NeverStops: "the workspace is not on a volume (kubernetes.workspace_volume)"},
			{Profile: "team", Sandbox: "team-9c0d1e2f", Provider: "ssh", State: "absent", Runs: runsMode(false, true)},
			// Its provider could not start.
			{Profile: "cloud", Provider: "nosuch", State: "error", Message: "no provider nosuch"},
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
