package cliagent

import (
	"strings"
	"testing"
)

// opencode's answer is its last {"response": ...} object, whatever its
// MCP client printed on stdout before it (seen in CI: mcp-go prints
// "Error reading response: ..." when a server's stdout closes).
func TestOpencodeAnswer(t *testing.T) {
	for _, c := range []struct {
		name, stdout, want, err string
	}{
		{"alone", "{\n  \"response\": \"Done.\"\n}", "Done.", ""},
		{"after a stray line", "Error reading response: read |0: file already closed\n{\n  \"response\": \"Done.\"\n}", "Done.", ""},
		{"braces in the answer", "{\n  \"response\": \"use {x}\\n{\\\"a\\\": 1}\"\n}", "use {x}\n{\"a\": 1}", ""},
		{"empty answer", "{\"response\": \"\"}", "", ""},
		{"no object", "Error: no provider", "", "has no {\"response\": ...} object"},
		{"another object", "{\"error\": \"x\"}", "", "has no {\"response\": ...} object"},
		{"cut short", "{\n  \"response\": \"Do", "", "has no {\"response\": ...} object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, err := opencode{}.Answer([]byte(c.stdout))
			switch {
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("error %v, want one saying %q", err, c.err)
			case c.err == "" && err != nil:
				t.Errorf("error %v", err)
			case c.err == "" && o.Result != c.want:
				t.Errorf("answer %q, want %q", o.Result, c.want)
			}
		})
	}
}
