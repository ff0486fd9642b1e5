package runview

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// failedCommand is the agent's last command when it did not succeed. A
// run whose agent ended after one is still done (the agent decided it
// was), but its summary says so plainly: the agent may have reported
// success over a test run that could not even start.
type failedCommand struct {
	command string
	code    *int   // the exit code; nil when it did not exit (killed, timed out)
	status  string // the worker's words: "failed with exit code 127"
}

// commands follows the agent's commands (the tool calls whose input has a
// "command": the worker's execute) to their results, keeping whether the
// last one to finish failed.
type commands struct {
	pending []pendingCommand
	last    *failedCommand
}

type pendingCommand struct {
	id      *string
	name    string
	command string
}

// reported is the failed command a run's summary s reports, nil when the
// last command succeeded or the run was interrupted: an interrupted run's
// last command was most likely stopped with it.
func (c *commands) reported(s Summary) *failedCommand {
	if interrupted(s.Err) {
		return nil
	}
	return c.last
}

// see takes one of the worker's messages into account.
func (c *commands) see(m *protocol.AgenticMessage) {
	switch m.Type {
	case protocol.ToolCall:
		var in struct {
			Command string `json:"command"`
		}
		if json.Unmarshal(m.ToolInput, &in) == nil && in.Command != "" {
			c.pending = append(c.pending, pendingCommand{id: clone(m.ToolCallID), name: deref(m.ToolName), command: in.Command})
		}
	case protocol.ToolResult:
		for i, p := range c.pending {
			// As the TTY view pairs them: by id, else the oldest call of
			// the same tool.
			if (m.ToolCallID != nil && p.id != nil && *p.id == *m.ToolCallID) ||
				(m.ToolCallID == nil && p.name == deref(m.ToolName)) {
				c.pending = append(c.pending[:i], c.pending[i+1:]...)
				c.last = commandOutcome(p.command, deref(m.ToolOutput), m.IsError)
				return
			}
		}
	}
}

// commandOutcome is how a command that gave output ended: nil when it
// succeeded. The worker's execute ends its output with a status line
// ("[Command failed with exit code 127]"); without one, the result's
// is_error says.
func commandOutcome(command, output string, isError bool) *failedCommand {
	status, code, ok := statusOf(output)
	switch {
	case !ok && !isError:
		return nil
	case !ok:
		return &failedCommand{command: command, status: "failed"}
	case strings.HasPrefix(status, "succeeded"):
		return nil
	}
	f := &failedCommand{command: command, status: status}
	if n, err := strconv.Atoi(code); err == nil {
		f.code = &n
	}
	return f
}

// describe says plainly how the command ended: "exit 127, command not
// found", "timed out after 60s and was killed".
func (f *failedCommand) describe() string {
	if f.code == nil {
		return f.status
	}
	s := "exit " + strconv.Itoa(*f.code)
	switch *f.code {
	case 126:
		s += ", not executable"
	case 127:
		s += ", command not found"
	}
	return s
}
