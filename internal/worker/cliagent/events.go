package cliagent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// maxEventBytes bounds one line of an agent's event stream.
const maxEventBytes = 64 << 20

// eachEvent calls fn with every JSON object line of an agent's stdout.
// Lines that are not JSON objects (a warning an agent prints on stdout)
// are skipped; a line that starts like one but does not parse is an error.
func eachEvent(stdout io.Reader, agent string, fn func(line []byte) error) error {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), maxEventBytes)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		if !json.Valid(line) {
			return fmt.Errorf("%s's event on line %d is not JSON: %q", agent, n, clip(line))
		}
		if err := fn(line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s's events: %w", agent, err)
	}
	return nil
}

// narrator writes an agent's messages. It holds back the latest text the
// model wrote until something else happens, so that the final answer,
// which the worker writes as the result, is not also shown as thinking.
type narrator struct {
	emit    func(*protocol.AgenticMessage) error
	pending *string
}

// say notes the model's text; it is written once something follows it.
func (n *narrator) say(text string) error {
	if strings.TrimSpace(text) == "" {
		return nil
	}
	if err := n.flush(); err != nil {
		return err
	}
	n.pending = &text
	return nil
}

// flush writes the text held back, if any.
func (n *narrator) flush() error {
	if n.pending == nil {
		return nil
	}
	text := *n.pending
	n.pending = nil
	return n.emit(&protocol.AgenticMessage{Type: protocol.Thinking, Content: &text})
}

// finish ends the stream: the text held back is dropped when it is the
// final answer, and written otherwise.
func (n *narrator) finish(result string) error {
	if n.pending != nil && strings.TrimSpace(*n.pending) == strings.TrimSpace(result) {
		n.pending = nil
	}
	return n.flush()
}

// call writes a tool call.
func (n *narrator) call(id, name string, input json.RawMessage) error {
	if err := n.flush(); err != nil {
		return err
	}
	return n.emit(&protocol.AgenticMessage{Type: protocol.ToolCall, ToolName: &name, ToolInput: toolInput(input), ToolCallID: &id})
}

// result writes a tool's result.
func (n *narrator) result(id, output string, isError bool) error {
	if err := n.flush(); err != nil {
		return err
	}
	return n.emit(&protocol.AgenticMessage{Type: protocol.ToolResult, ToolOutput: &output, ToolCallID: &id, IsError: isError})
}

// toolInput is input as the protocol's tool_input, a JSON object: an
// absent or null input is {}, and any other value is {"input": value}.
func toolInput(input json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(input)
	switch {
	case len(t) == 0 || string(t) == "null":
		return json.RawMessage("{}")
	case t[0] == '{':
		return t
	default:
		return json.RawMessage(`{"input":` + string(t) + `}`)
	}
}

// mustJSON is v as JSON, for values that always marshal.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("cliagent: marshal %T: %v", v, err))
	}
	return b
}
