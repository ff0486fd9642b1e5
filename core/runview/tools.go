package runview

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// toolSubject is what a tool call acts on, for its one line on the
// terminal: the command of execute, the path of a file tool, the pattern of
// a search. Tools it does not know show their input as compact JSON.
func toolSubject(name string, input json.RawMessage) string {
	if len(input) == 0 {
		return ""
	}
	var args map[string]any
	if json.Unmarshal(input, &args) != nil || args == nil {
		return oneLine(string(input))
	}
	str := func(key string) string {
		s, _ := args[key].(string)
		return oneLine(s)
	}
	if todos, ok := args["todos"].([]any); ok && name == "write_todos" {
		if len(todos) == 1 {
			return "1 item"
		}
		return strconv.Itoa(len(todos)) + " items"
	}
	// The worker's tools (DeepAgents' names) and the usual names elsewhere.
	for _, key := range []string{"command", "file_path", "pattern", "path", "url", "query"} {
		s := str(key)
		if s == "" {
			continue
		}
		if key == "pattern" && str("path") != "" {
			s += " in " + str("path")
		}
		return s
	}
	if len(args) == 0 {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, input) != nil {
		return oneLine(string(input))
	}
	return oneLine(b.String())
}

// commandStatus matches the status line the worker's execute tool ends its
// output with.
var commandStatus = regexp.MustCompile(`^\[Command (.*)\]$`)

// exitCode matches the status of a command that exited non-zero.
var exitCode = regexp.MustCompile(`^failed with exit code (-?\d+)$`)

// failureReason is a short reason for a failed tool call, from its output:
// "exit 1" for a command that exited 1, the status of one that was killed or
// timed out, else the first line of the output.
func failureReason(output string) string {
	lines := strings.Split(strings.TrimRight(output, "\n "), "\n")
	if m := commandStatus.FindStringSubmatch(lines[len(lines)-1]); m != nil {
		if c := exitCode.FindStringSubmatch(m[1]); c != nil {
			return "exit " + c[1]
		}
		return oneLine(m[1])
	}
	for _, l := range lines {
		if l = oneLine(l); l != "" {
			return l
		}
	}
	return "failed"
}
