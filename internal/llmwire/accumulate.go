package llmwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
)

// An Accumulator reassembles a response body as it streams through: Write is
// fed the body's bytes in whatever pieces they come; Turn returns the response
// once the body ended. contentType picks JSON or SSE ("text/event-stream").
type Accumulator interface {
	Write(p []byte) (int, error)
	Turn() (Turn, error)
}

// NewAccumulator returns an Accumulator for a response body of api with the
// given Content-Type. It keeps at most MaxKept bytes of a JSON body or of
// one event; past that, Turn reports an error. An error body (OpenAI's or
// Anthropic's shape) or an error event makes Turn return an *APIError.
func NewAccumulator(api API, contentType string) Accumulator {
	a := &accumulator{api: api, calls: map[int]*callState{}}
	if isSSE(contentType) {
		a.sse = &sseParser{max: MaxKept, onEvent: a.event}
	}
	return a
}

// isSSE reports whether contentType is text/event-stream.
func isSSE(contentType string) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return mt == "text/event-stream"
}

type callState struct {
	id, name string
	args     strings.Builder
	input    json.RawMessage // an Anthropic tool_use block's input at its start
	isTool   bool
}

type accumulator struct {
	api  API
	sse  *sseParser
	body []byte
	over bool
	done bool

	text  strings.Builder
	calls map[int]*callState
	order []int
	turn  Turn
	err   error
}

func (a *accumulator) Write(p []byte) (int, error) {
	if a.sse != nil {
		a.sse.write(p)
		return len(p), nil
	}
	if a.over {
		return len(p), nil
	}
	if len(a.body)+len(p) > MaxKept {
		a.over, a.body = true, nil
		return len(p), nil
	}
	a.body = append(a.body, p...)
	return len(p), nil
}

func (a *accumulator) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

func (a *accumulator) Turn() (Turn, error) {
	if !a.done {
		a.done = true
		if a.sse != nil {
			a.sse.finish()
			if a.sse.err != nil {
				a.fail(a.sse.err)
			}
		} else {
			a.decodeBody()
		}
		a.turn.Text = a.text.String()
		for _, i := range a.order {
			c := a.calls[i]
			if !c.isTool {
				continue
			}
			args := c.args.String()
			if args == "" && len(c.input) > 0 {
				args = string(c.input)
			}
			a.turn.ToolCalls = append(a.turn.ToolCalls, ToolCall{ID: c.id, Name: c.name, Arguments: args})
		}
	}
	return a.turn, a.err
}

func (a *accumulator) call(i int) *callState {
	c := a.calls[i]
	if c == nil {
		c = &callState{}
		a.calls[i] = c
		a.order = append(a.order, i)
	}
	return c
}

func (a *accumulator) decodeBody() {
	if a.over {
		a.fail(fmt.Errorf("response body over %d bytes: not reassembled", MaxKept))
		return
	}
	if e := DecodeError(0, a.body); e != nil {
		a.fail(e)
		return
	}
	switch a.api {
	case OpenAI:
		var c ChatCompletion
		if err := json.Unmarshal(a.body, &c); err != nil {
			a.fail(fmt.Errorf("decode the chat completion: %w", err))
			return
		}
		if c.Usage != nil {
			a.turn.Usage = c.Usage.Usage()
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				continue
			}
			a.text.WriteString(ch.Message.Text())
			a.turn.StopReason = ch.FinishReason
			for k, tc := range ch.Message.ToolCalls {
				s := a.call(k)
				s.isTool, s.id, s.name = true, tc.ID, tc.Function.Name
				s.args.WriteString(tc.Function.Arguments)
			}
		}
	case Anthropic:
		var m MessagesResponse
		if err := json.Unmarshal(a.body, &m); err != nil {
			a.fail(fmt.Errorf("decode the message: %w", err))
			return
		}
		a.turn.Usage = m.Usage.Usage()
		if m.StopReason != nil {
			a.turn.StopReason = *m.StopReason
		}
		for k, b := range m.Content {
			switch b.Type {
			case "text":
				a.text.WriteString(b.Text)
			case "tool_use":
				s := a.call(k)
				s.isTool, s.id, s.name, s.input = true, b.ID, b.Name, compact(b.Input)
			}
		}
	default:
		a.fail(fmt.Errorf("unknown API %q", a.api))
	}
}

func (a *accumulator) event(name string, data []byte) {
	switch a.api {
	case OpenAI:
		a.chatChunk(data)
	case Anthropic:
		a.messagesEvent(data)
	}
}

// isDone reports whether an event's data is OpenAI's "[DONE]".
func isDone(data []byte) bool { return string(bytes.TrimSpace(data)) == "[DONE]" }

func (a *accumulator) chatChunk(data []byte) {
	if isDone(data) {
		return
	}
	var c ChatChunk
	if err := json.Unmarshal(data, &c); err != nil {
		a.fail(fmt.Errorf("decode a chat completion chunk: %w", err))
		return
	}
	if c.Error != nil {
		a.fail(&APIError{Type: c.Error.Type, Code: c.Error.CodeString(), Message: c.Error.Message})
		return
	}
	if c.Usage != nil {
		a.turn.Usage = c.Usage.Usage()
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 {
			continue
		}
		if ch.Delta.Content != nil {
			a.text.WriteString(*ch.Delta.Content)
		}
		for _, tc := range ch.Delta.ToolCalls {
			s := a.call(a.toolIndex(tc))
			s.isTool = true
			if tc.ID != "" {
				s.id = tc.ID
			}
			if tc.Function.Name != "" {
				s.name = tc.Function.Name
			}
			s.args.WriteString(tc.Function.Arguments)
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.turn.StopReason = *ch.FinishReason
		}
	}
}

// toolIndex is the index of a streamed tool call piece: its index, or,
// from a server that sends none, the call with its id, a new call for a
// new id, else the last call.
func (a *accumulator) toolIndex(tc ChatToolCall) int {
	if tc.Index != nil {
		return *tc.Index
	}
	if tc.ID != "" {
		for _, i := range a.order {
			if a.calls[i].id == tc.ID {
				return i
			}
		}
		return len(a.order)
	}
	if n := len(a.order); n > 0 {
		return a.order[n-1]
	}
	return 0
}

func (a *accumulator) messagesEvent(data []byte) {
	var ev MessagesStreamEvent
	if err := json.Unmarshal(data, &ev); err != nil {
		a.fail(fmt.Errorf("decode a message stream event: %w", err))
		return
	}
	idx := 0
	if ev.Index != nil {
		idx = *ev.Index
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			a.turn.Usage = ev.Message.Usage.Usage()
		}
	case "content_block_start":
		if b := ev.ContentBlock; b != nil && b.Type == "tool_use" {
			s := a.call(idx)
			s.isTool, s.id, s.name, s.input = true, b.ID, b.Name, compact(b.Input)
		} else if b != nil && b.Type == "text" {
			a.text.WriteString(b.Text)
		}
	case "content_block_delta":
		if ev.Delta == nil {
			return
		}
		switch ev.Delta.Type {
		case "text_delta":
			a.text.WriteString(ev.Delta.Text)
		case "input_json_delta":
			a.call(idx).args.WriteString(ev.Delta.PartialJSON)
		}
	case "message_delta":
		if ev.Delta != nil && ev.Delta.StopReason != nil {
			a.turn.StopReason = *ev.Delta.StopReason
		}
		if u := ev.Usage; u != nil {
			mergeMessagesUsage(&a.turn.Usage, u)
		}
	case "error":
		if ev.Error != nil {
			a.fail(&APIError{Type: ev.Error.Type, Message: ev.Error.Message})
		} else {
			a.fail(errors.New("the stream ended with an error event"))
		}
	}
}

// mergeMessagesUsage takes a message_delta's usage: its output tokens are
// cumulative; the input and cache counts, which Anthropic may repeat
// there, replace the message_start's when reported.
func mergeMessagesUsage(dst *Usage, u *MessagesUsage) {
	dst.Output = u.OutputTokens
	if u.InputTokens != 0 {
		dst.Input = u.InputTokens
	}
	if u.CacheReadInputTokens != nil {
		dst.CacheRead = *u.CacheReadInputTokens
	}
	if u.CacheCreationInputTokens != nil {
		dst.CacheWrite = *u.CacheCreationInputTokens
	}
}

// compact is raw without insignificant space, or raw if it is not JSON.
func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// DecodeError returns the API error body holds, in either API's shape, or
// nil if it holds none. status is the response's HTTP status (0 if not
// known).
func DecodeError(status int, body []byte) *APIError {
	var probe struct {
		Type  string          `json:"type"`
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &probe) != nil || len(probe.Error) == 0 || string(probe.Error) == "null" {
		return nil
	}
	if probe.Type == "error" {
		var e MessagesErrorBody
		if json.Unmarshal(probe.Error, &e) == nil {
			return &APIError{Status: status, Type: e.Type, Message: e.Message}
		}
	}
	var e ChatErrorBody
	if json.Unmarshal(probe.Error, &e) == nil {
		return &APIError{Status: status, Type: e.Type, Code: e.CodeString(), Message: e.Message}
	}
	var s string
	if json.Unmarshal(probe.Error, &s) == nil {
		return &APIError{Status: status, Message: s}
	}
	return nil
}
