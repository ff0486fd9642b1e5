package agent

import (
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// SystemPrompt is the agentic run's system prompt: the caller's
// instructions, if any, then what every run needs to know about its tools.
func SystemPrompt(cwd, instructions string) string {
	var b strings.Builder
	if s := strings.TrimSpace(instructions); s != "" {
		b.WriteString(s)
		b.WriteString("\n\n")
	}
	b.WriteString("You are a coding agent working in the directory ")
	b.WriteString(cwd)
	b.WriteString(` inside an isolated sandbox. Use the tools to look at and change files and to run commands there.
- Paths are relative to that directory; paths outside it are refused.
- read_file before you edit_file, and keep old_string exact and unique.
- execute runs bash; keep commands non-interactive and bounded in time.
- Use write_todos to plan work with several steps and keep the list current.
When the task is done, stop calling tools and reply with a short summary of what you changed.`)
	return b.String()
}

// WriteFailure writes the result and usage lines of a run that failed
// before it could start, and returns err.
func WriteFailure(out *protocol.Encoder, model string, err error) error {
	return finish(out, model, "", err, newTally(model))
}
