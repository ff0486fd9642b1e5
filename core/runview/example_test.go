package runview_test

import (
	"errors"
	"os"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/runview"
)

func ExampleNewJSON() {
	v := runview.NewJSON(os.Stdout)
	v.PhaseStart("workspace")
	v.PhaseEnd("workspace", 412*time.Millisecond, nil)
	v.Message(&protocol.AgenticMessage{Type: protocol.Result, Content: new("Done.")})
	v.PhaseEnd("results", 30*time.Millisecond, errors.New("bundle: 2 refs, want 1"))
	v.Summary(runview.Summary{Workflow: "fix-1", Wall: 61234 * time.Millisecond, Err: errors.New("results: bundle: 2 refs, want 1")})
	_ = v.Close()
	// Output:
	// {"type":"phase","content":"workspace","status":"started","duration_ms":null,"error":null}
	// {"type":"phase","content":"workspace","status":"done","duration_ms":412,"error":null}
	// {"type":"result","content":"Done.","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":null}
	// {"type":"phase","content":"results","status":"failed","duration_ms":30,"error":"bundle: 2 refs, want 1"}
	// {"type":"summary","status":"failed","workflow":"fix-1","branch":null,"pushed":false,"diff_stat":null,"usage":null,"wall_ms":61234,"error":"results: bundle: 2 refs, want 1","last_command":null,"kept":null,"cleaned":[],"left":[]}
}

// The live line (the spinner on a running phase or tool call) is left out
// here: it is rewritten in place with escape sequences.
func ExampleNewTTY() {
	v := runview.NewTTY(os.Stdout, runview.TTYOptions{Width: 60, NoColor: true, Tick: -1})
	v.PhaseEnd("workspace", 412*time.Millisecond, nil)
	v.Message(&protocol.AgenticMessage{Type: protocol.Result, Content: new("Fixed the expiry check in login.go and added a test for it.")})
	v.Notice("amelia: warning: provider local isolates nothing")
	v.Summary(runview.Summary{Branch: "amelia/fix-1", DiffStat: " login.go | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n",
		Wall: 61234 * time.Millisecond, Cleaned: []string{"worktree", "tunnel", "proxy", "plugin"},
		Left: []string{"sandbox dev (running; amelia stop --profile dev removes it)"}})
	_ = v.Close()
	// Output:
	// ✓ workspace 0.4s
	// Fixed the expiry check in login.go and added a test for
	// it.
	// amelia: warning: provider local isolates nothing
	// ╭─ ✓ done ────────────────────────────────────────────────╮
	// │ branch    amelia/fix-1                                  │
	// │ changes   login.go | 2 +-                               │
	// │           1 file changed, 1 insertion(+), 1 deletion(-) │
	// │ wall      1m1s                                          │
	// │ cleaned   worktree, tunnel, proxy, plugin               │
	// │ left      sandbox dev (running; amelia stop --profile   │
	// │           dev removes it)                               │
	// ╰─────────────────────────────────────────────────────────╯
}
