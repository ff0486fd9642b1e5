package runview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// event is one call on a View, for scripted runs.
type event struct {
	start   string // PhaseStart(start)
	end     string // PhaseEnd(end, d, err)
	d       time.Duration
	err     error
	msg     *protocol.AgenticMessage
	summary *Summary
	notice  string        // Notice(notice), on a view that has it
	advance time.Duration // moves the test clock, calls nothing
}

func play(v View, clk *fakeClock, events []event) {
	for _, e := range events {
		switch {
		case e.start != "":
			v.PhaseStart(e.start)
		case e.end != "":
			v.PhaseEnd(e.end, e.d, e.err)
		case e.msg != nil:
			v.Message(e.msg)
		case e.summary != nil:
			v.Summary(*e.summary)
		case e.notice != "":
			if l, ok := v.(Live); ok {
				l.Notice(e.notice)
			}
		case e.advance != 0:
			clk.advance(e.advance)
		}
	}
}

// phases is a sequence of phases that all succeed.
func phases(names ...string) []event {
	var evs []event
	for i, n := range names {
		evs = append(evs, event{start: n}, event{end: n, d: time.Duration(i+1) * 45 * time.Millisecond})
	}
	return evs
}

func thinkingMsg(s string) *protocol.AgenticMessage {
	return &protocol.AgenticMessage{Type: protocol.Thinking, Content: &s, Model: new("gpt-4.1-mini")}
}

func callMsg(id, name, input string) *protocol.AgenticMessage {
	return &protocol.AgenticMessage{Type: protocol.ToolCall, ToolName: &name, ToolInput: json.RawMessage(input),
		ToolCallID: &id, Model: new("gpt-4.1-mini")}
}

func resultMsg(id, name, output string, failed bool) *protocol.AgenticMessage {
	return &protocol.AgenticMessage{Type: protocol.ToolResult, ToolName: &name, ToolOutput: &output,
		ToolCallID: &id, IsError: failed, Model: new("gpt-4.1-mini")}
}

func answerMsg(s string, failed bool) *protocol.AgenticMessage {
	return &protocol.AgenticMessage{Type: protocol.Result, Content: &s, IsError: failed, Model: new("gpt-4.1-mini")}
}

var testUsage = &protocol.DriverUsage{
	InputTokens: new(int64(12345)), OutputTokens: new(int64(2345)), CacheReadTokens: new(int64(1000)),
	CacheCreationTokens: new(int64(0)), CostUSD: new(0.0123), DurationMs: new(int64(42100)),
	NumTurns: new(int64(7)), Model: new("gpt-4.1-mini"),
}

// successRun is a run that edits files, has a tool call fail, and ends
// with a branch. Its thinking is longer than the test width and carries an
// escape sequence that must not reach the terminal.
func successRun() []event {
	evs := phases("profile", "proxy", "plugin", "sandbox", "worker", "tunnel", "workspace", "prompt")
	evs = append(evs,
		event{start: "agent"},
		event{msg: thinkingMsg("I'll start by reading the login handler and its tests, then fix the " +
			"session expiry check that compares seconds with milliseconds.\x1b]52;c;ZXZpbA==\x07\n\n" +
			"Plan:\n  - read login.go\n  - fix the comparison in checkExpiry_with_a_very_long_identifier_that_cannot_wrap_anywhere\n")},
		event{msg: callMsg("call_1", "write_file", `{"file_path": "main.go", "content": "package main\n\nfunc main() {}\n"}`)},
		event{msg: resultMsg("call_1", "write_file", "Updated file main.go", false)},
		event{msg: callMsg("call_2", "execute", `{"command": "go test ./... && \\\n  go vet ./... && echo 'a long command line that does not fit in sixty columns'"}`)},
		event{advance: 3 * time.Second},
		event{msg: resultMsg("call_2", "execute", "--- FAIL: TestExpiry (0.00s)\nFAIL\n[Command failed with exit code 1]", true)},
		event{msg: callMsg("call_3", "read_file", `{"file_path": "missing.go"}`)},
		event{msg: resultMsg("call_3", "read_file", "Error: file 'missing.go' not found", true)},
		event{msg: callMsg("call_4", "grep", `{"pattern": "TODO", "path": "internal/"}`)},
		event{msg: resultMsg("call_4", "grep", "internal/a.go:3: // TODO", false)},
		event{msg: answerMsg("Fixed the expiry check in login.go; `go test` still fails in TestExpiry, which failed before my change too.", false)},
		event{msg: &protocol.AgenticMessage{Type: protocol.Usage, Usage: testUsage}},
		event{end: "agent", d: 42100 * time.Millisecond},
	)
	evs = append(evs, phases("results", "cleanup")...)
	return append(evs, event{summary: &Summary{
		Workflow: "fix-login-3f9a",
		Branch:   "amelia/fix-login-3f9a",
		DiffStat: " login.go      | 12 ++++++++----\n login_test.go |  3 +++\n 2 files changed, 11 insertions(+), 4 deletions(-)\n",
		Usage:    testUsage,
		Wall:     45600 * time.Millisecond,
		Cleaned:  []string{"worktree", "tunnel", "proxy", "plugin"},
		Left:     []string{"sandbox dev (running; amelia stop --profile dev removes it)"},
	}})
}

// failedRun is a run whose workspace step fails.
func failedRun() []event {
	cause := errors.New(`clone https://forge.test/acme/app: repository not found (check --repo and the git token of profile "dev")`)
	evs := phases("profile", "proxy", "plugin", "sandbox", "worker", "tunnel")
	evs = append(evs,
		event{start: "workspace"},
		event{end: "workspace", d: 1234 * time.Millisecond, err: cause},
	)
	evs = append(evs, phases("cleanup")...)
	return append(evs, event{summary: &Summary{
		Workflow: "fix-login-3f9a",
		Wall:     2100 * time.Millisecond,
		Err:      fmt.Errorf("workspace: %w", cause),
		Cleaned:  []string{"tunnel", "proxy", "plugin"},
		Left:     []string{"sandbox dev (running; amelia stop --profile dev removes it)"},
	}})
}

// keptRun is a run whose agent wrote a file, then failed: its work is
// kept in the sandbox, and the summary says where and how to get it.
func keptRun() []event {
	cause := errors.New("the agent failed: 400 This model's maximum context length is 128000 tokens")
	evs := phases("profile", "proxy", "plugin", "sandbox", "worker", "tunnel", "workspace")
	evs = append(evs,
		event{start: "agent"},
		event{msg: callMsg("call_1", "write_file", `{"file_path": "main.go", "content": "package main\n"}`)},
		event{msg: resultMsg("call_1", "write_file", "Updated file main.go", false)},
		event{msg: answerMsg("400 This model's maximum context length is 128000 tokens", true)},
		event{end: "agent", d: 9 * time.Second, err: cause},
	)
	evs = append(evs, phases("cleanup")...)
	return append(evs, event{summary: &Summary{
		Workflow: "fix-login-3f9a",
		Wall:     9500 * time.Millisecond,
		Err:      fmt.Errorf("agent: %w", cause),
		Kept: &Kept{Sandbox: "dev", Branch: "amelia/fix-login-3f9a", Dir: "/workspace/worktrees/fix-login-3f9a",
			Recover: "amelia results --profile dev fix-login-3f9a"},
		Cleaned: []string{"tunnel", "proxy", "plugin"},
		Left:    []string{"sandbox dev (running; amelia stop --profile dev removes it)"},
	}})
}

// interruptedRun is a run interrupted (Ctrl-C) while its agent runs a
// command: the command is killed, the agent says it was interrupted, the
// agent phase ends with context.Canceled, and the work so far is kept.
func interruptedRun() []event {
	evs := phases("check", "proxy", "plugin", "sandbox", "worker", "tunnel", "workspace")
	evs = append(evs,
		event{start: "agent"},
		event{msg: callMsg("call_1", "write_file", `{"file_path": "wip.txt", "content": "half done\n"}`)},
		event{msg: resultMsg("call_1", "write_file", "Updated file wip.txt", false)},
		event{msg: callMsg("call_2", "execute", `{"command": "sleep 100"}`)},
		event{advance: 7 * time.Second},
		event{msg: resultMsg("call_2", "execute", "[Command cancelled (terminated signal received) and was killed]", true)},
		event{msg: answerMsg("interrupted", true)},
		event{end: "agent", d: 7700 * time.Millisecond, err: context.Canceled},
	)
	evs = append(evs, phases("cleanup")...)
	return append(evs, event{summary: &Summary{
		Workflow: "slow",
		Wall:     7800 * time.Millisecond,
		Err:      fmt.Errorf("agent: %w", context.Canceled),
		Kept: &Kept{Sandbox: "local", Branch: "amelia/slow", Dir: "/workspace/worktrees/slow",
			Recover: "amelia results --profile local slow"},
		Cleaned: []string{"tunnel", "proxy", "plugin"},
		Left:    []string{"sandbox local (running; amelia stop --profile local removes it)"},
	}})
}

// warningRun is a run during which warnings are logged: one while the
// sandbox phase spins, before anything is shown inside it, and one while a
// tool call runs inside the agent phase. Each goes above the live line.
func warningRun() []event {
	evs := phases("check", "proxy", "plugin")
	evs = append(evs,
		event{start: "sandbox"},
		event{advance: 1500 * time.Millisecond},
		event{notice: "amelia: warning: provider local isolates nothing: commands run directly on this machine as the current user"},
		event{end: "sandbox", d: 1600 * time.Millisecond},
	)
	evs = append(evs, phases("worker", "tunnel", "workspace")...)
	evs = append(evs,
		event{start: "agent"},
		event{msg: callMsg("call_1", "execute", `{"command": "make test"}`)},
		event{notice: "amelia: warning: lost the sandbox; the agent goes on there; reconnecting err=\"plugin exited\""},
		event{msg: resultMsg("call_1", "execute", "ok", false)},
		event{msg: answerMsg("Tests pass.", false)},
		event{end: "agent", d: 3 * time.Second},
	)
	evs = append(evs, phases("results", "cleanup")...)
	return append(evs, event{summary: &Summary{
		Workflow: "warned",
		Wall:     5 * time.Second,
		Cleaned:  []string{"worktree", "tunnel", "proxy", "plugin"},
		Left:     []string{"sandbox local (running; amelia stop --profile local removes it)"},
	}})
}

// unfinishedRun is a run whose view is closed in the middle of a tool
// call, with a phase and the call still running: what a view shows when
// its run never ends (the process is being killed).
func unfinishedRun() []event {
	evs := phases("profile", "sandbox")
	return append(evs,
		event{start: "agent"},
		event{msg: thinkingMsg("Running the slow tests.")},
		event{msg: callMsg("call_1", "execute", `{"command": "sleep 100"}`)},
		event{advance: 12 * time.Second},
		event{msg: &protocol.AgenticMessage{Type: protocol.Thinking}}, // empty: shows nothing, redraws the live line
	)
}

// commandNotFoundRun is the newcomer's run: the agent ran the project's
// tests in a sandbox without python3, got exit 127, and said it was done.
// The run is done (the agent decided so), and its summary says plainly
// that the last command failed, with its exit status and the command.
func commandNotFoundRun() []event {
	evs := phases("check", "proxy", "plugin", "sandbox", "worker", "tunnel", "workspace")
	evs = append(evs,
		event{start: "agent"},
		event{msg: callMsg("call_1", "write_file", `{"file_path": "calc.py", "content": "def add(a, b):\n    return a + b\n"}`)},
		event{msg: resultMsg("call_1", "write_file", "Updated file calc.py", false)},
		event{msg: callMsg("call_2", "execute", `{"command": "python3 -m pytest -q"}`)},
		event{msg: resultMsg("call_2", "execute", "sh: 1: python3: not found\n[Command failed with exit code 127]", true)},
		event{msg: answerMsg("Added add() to calc.py; the tests are in place.", false)},
		event{end: "agent", d: 4 * time.Second},
	)
	evs = append(evs, phases("results", "cleanup")...)
	return append(evs, event{summary: &Summary{
		Workflow: "add-calc-1b2c",
		Branch:   "amelia/add-calc-1b2c",
		DiffStat: " calc.py | 2 ++\n 1 file changed, 2 insertions(+)\n",
		Wall:     6 * time.Second,
		Cleaned:  []string{"worktree", "tunnel", "proxy", "plugin"},
		Left:     []string{"sandbox dev (running; amelia stop --profile dev removes it)"},
	}})
}
