package main_test

import (
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// amelia logs -f follows a running agent until Ctrl-C, which ends it
// quietly with 130 and leaves the agent running; once the run delivered,
// its sandbox holds nothing of it, and amelia logs shows this host's copy
// of what the run showed; of a workflow no run of this host showed, it
// says where logs are kept.
func TestLogsFollowAndDelivered(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{}, gatedTurns(g)...)
	const wf = "logged"
	r := h.startUntil(t, g.path, "run", "--json", "--workflow", wf, "be logged")

	f := h.startUntil(t, g.path, "logs", "-f", "--json", wf)
	if err := f.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	// The local provider's warning is all it says.
	if code, stderr := f.wait(t, "Ctrl-C"), withoutLocalWarning(f.stderr.String()); code != 130 || stderr != "" {
		t.Errorf("logs -f after Ctrl-C: exit %d, stderr %q; want 130 and nothing", code, stderr)
	}

	g.open(t, h)
	rest, _ := io.ReadAll(r.stdout)
	if code := r.wait(t, "the run's end"); code != 0 {
		t.Fatalf("the run: exit %d; stderr: %s", code, r.stderr.String())
	}
	h.deliveredDespite(t, wf, string(rest))

	logs := h.amelia(t, "logs", "--json", wf)
	if logs.code != 0 || withoutLocalWarning(logs.stderr) != "" {
		t.Fatalf("logs of the delivered run: exit %d, stderr %q", logs.code, logs.stderr)
	}
	if n := strings.Count(logs.stdout, `"type":"tool_call"`); n != 3 || !strings.Contains(logs.stdout, "done despite the fault") {
		t.Errorf("logs of the delivered run: %d tool calls, want the run's 3 and its answer:\n%s", n, logs.stdout)
	}
	// The same lines the run showed after the gate, byte for byte.
	if _, after, _ := strings.Cut(logs.stdout, g.path); !strings.Contains(string(rest), strings.SplitN(strings.TrimLeft(after, "\n"), "\n", 3)[1]) {
		t.Errorf("the log's lines after the gate are not the run's:\nlog: %s\nrun: %s", after, rest)
	}

	none := h.amelia(t, "logs", "never-ran")
	const want = "amelia: no log of workflow never-ran on this host: a run's log is kept in its sandbox while its agent runs or its work is kept there, and on this host for 7 days after the run ends (amelia sandbox ls lists each sandbox's workflows)\n"
	if none.code != 1 || none.stderr != want {
		t.Errorf("logs of a workflow that never ran: exit %d, stderr\n%s\nwant 1 and\n%s", none.code, none.stderr, want)
	}
}

// withoutLocalWarning is stderr without the local provider's warning.
func withoutLocalWarning(stderr string) string {
	return strings.ReplaceAll(stderr, "amelia: warning: provider local isolates nothing: commands run directly on this machine as the current user\n", "")
}
