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

// statusOf reads the status line the worker's execute tool ends a command's
// output with: the status ("failed with exit code 127", "succeeded") and,
// for a command that exited non-zero, its exit code as written. ok is false
// when the output ends with no status line.
func statusOf(output string) (status, code string, ok bool) {
	lines := strings.Split(strings.TrimRight(output, "\n "), "\n")
	m := commandStatus.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		return "", "", false
	}
	if c := exitCode.FindStringSubmatch(m[1]); c != nil {
		return m[1], c[1], true
	}
	return m[1], "", true
}

// failureReason is a short reason for a failed tool call, from its output:
// "exit 1" for a command that exited 1, the status of one that was killed or
// timed out, else the first line of the output.
func failureReason(output string) string {
	if status, code, ok := statusOf(output); ok {
		if code != "" {
			return "exit " + code
		}
		return oneLine(status)
	}
	for _, l := range strings.Split(strings.TrimRight(output, "\n "), "\n") {
		if l = oneLine(l); l != "" {
			return l
		}
	}
	return "failed"
}
