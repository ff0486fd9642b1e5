// Package runview shows what `amelia run` does while it does it: the host's
// phases (profile, proxy, sandbox, workspace, agent, results, ...), the
// worker's messages as they arrive, and a summary at the end.
//
// There are two views. [NewJSON] writes one JSON line per event for
// orchestrators: the worker's AgenticMessages byte for byte as the worker
// wrote them, and the host's own events in the same style (see [NewJSON] for
// their exact shape). [NewTTY] draws a compact live display for a person at a
// terminal. [New] picks one the way `amelia run` does.
//
// A view never stops a run: its methods return nothing, a failed write is
// remembered and returned by Close, and the view writes nothing after it,
// so that cleanup still runs when stdout has gone away.
//
// A run is done, failed, or interrupted (Ctrl-C): an error that matches
// context.Canceled, given to PhaseEnd or in Summary.Err, says that the run
// was interrupted, and both views show it as such, not as a failure.
package runview

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// View receives the events of one run. The methods of both implementations
// are safe for concurrent use; events are shown in the order the calls
// acquire the view. Calls after Close are ignored.
type View interface {
	// PhaseStart says that the host step name (e.g. "profile", "proxy",
	// "plugin", "sandbox", "worker", "tunnel", "workspace", "prompt",
	// "agent", "results", "cleanup") has begun.
	PhaseStart(name string)
	// PhaseEnd says that the step name has ended after d, failed if err is
	// not nil, interrupted if err matches context.Canceled.
	PhaseEnd(name string, d time.Duration, err error)
	// Message shows one of the worker's messages (thinking, tool_call,
	// tool_result, result, usage). The view does not keep m.
	Message(m *protocol.AgenticMessage)
	// Summary shows the outcome of the run, once, at the end; a failed or
	// interrupted run gets one too, with its error.
	Summary(s Summary)
	// Close finishes the display (a step or tool call still running is
	// shown as unfinished), stops any goroutine the view started, and
	// returns the first error writing or encoding met.
	Close() error
}

// Summary is the outcome of a run.
type Summary struct {
	Workflow string // the workflow id, e.g. "fix-login-3f9a"
	Branch   string // the result branch, e.g. "amelia/fix-login-3f9a"; empty if none
	DiffStat string // `git diff --stat` of the branch against its base
	Pushed   bool   // whether the branch was pushed to the remote
	// Usage is the worker's token usage and cost; when nil, the TTY view
	// uses the last usage message it was shown.
	Usage *protocol.DriverUsage
	Wall  time.Duration // the run's wall time
	// Err is why the run failed, or nil; it matches context.Canceled when
	// the run was interrupted.
	Err error
	// Kept is where the work of a failed or interrupted run is, or nil.
	Kept *Kept
	// Cleaned is what the run's cleanups removed or stopped, in the order
	// they did, in words a user knows: "worktree", "tunnel", "proxy".
	Cleaned []string
	// Left is what the run leaves behind besides Kept, each with what
	// becomes of it: "sandbox dev (running; amelia stop --profile dev
	// removes it)".
	Left []string
}

// Kept is the work of a run that failed or was interrupted after its agent
// started, kept in the sandbox.
type Kept struct {
	Sandbox string // the profile whose sandbox holds it
	Branch  string // the workflow branch in the sandbox, its work committed
	Dir     string // the worktree inside the sandbox
	Recover string // the command that brings it back
}

// Live is a view drawn for a person at a terminal: the TTY view. It shows
// a failed run's error once, in its summary box, and it keeps a live area
// at its bottom (the spinner) that nothing else may write into: other
// output for the terminal, such as log records, goes through Notice.
type Live interface {
	View
	// Notice shows text (one or more lines: a warning, a log record) above
	// the live area, which is drawn again below it. Like the agent's text,
	// it is stripped of control characters and wrapped to the width.
	Notice(text string)
}

// interrupted reports whether err says that the run was interrupted.
func interrupted(err error) bool { return errors.Is(err, context.Canceled) }

// New returns the view `amelia run` uses: JSON lines when jsonMode is set or
// w is not a terminal (a pipe or a file is read by a program), otherwise the
// live display, without colour when the NO_COLOR environment variable is set
// (https://no-color.org) and as wide as the terminal.
func New(w io.Writer, jsonMode bool) View {
	if jsonMode || !isTerminal(w) {
		return NewJSON(w)
	}
	return NewTTY(w, TTYOptions{NoColor: os.Getenv("NO_COLOR") != ""})
}

// isTerminal reports whether w writes to a terminal.
func isTerminal(w io.Writer) bool {
	_, ok := terminalWidth(w)
	return ok
}
