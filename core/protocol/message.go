package protocol

import (
	"encoding/json"
	"errors"
)

// MessageType says what an [AgenticMessage] carries.
type MessageType string

// The message types, as in the Python AgenticMessageType.
const (
	// Thinking is the model's reasoning or commentary, in Content.
	Thinking MessageType = "thinking"
	// ToolCall is a call of the tool ToolName with the arguments ToolInput,
	// identified by ToolCallID.
	ToolCall MessageType = "tool_call"
	// ToolResult is the output of the tool call ToolCallID, in ToolOutput;
	// IsError says whether the tool failed.
	ToolResult MessageType = "tool_result"
	// Result is the final answer, in Content.
	Result MessageType = "result"
	// Usage reports the run's token usage and cost, in Usage. It is the last
	// line the worker writes.
	Usage MessageType = "usage"
)

// allowedTypes lists the message types for error messages.
const allowedTypes = "thinking, tool_call, tool_result, result, usage"

// Valid reports whether t is one of the five message types.
func (t MessageType) Valid() bool {
	switch t {
	case Thinking, ToolCall, ToolResult, Result, Usage:
		return true
	}
	return false
}

// AgenticMessage is one line of the protocol: one event of an agentic run.
//
// Its JSON form has the keys type, content, tool_name, tool_input,
// tool_output, tool_call_id, session_id, is_error, model and usage, always
// all of them and in that order; a nil pointer is written as null.
type AgenticMessage struct {
	Type       MessageType
	Content    *string
	ToolName   *string
	ToolInput  json.RawMessage // a JSON object, or nil for null
	ToolOutput *string
	ToolCallID *string
	SessionID  *string
	IsError    bool
	Model      *string
	Usage      *DriverUsage
}

// DriverUsage is the token usage and cost of a run, carried by a message of
// type [Usage]. Its JSON keys are input_tokens, output_tokens,
// cache_read_tokens, cache_creation_tokens, cost_usd, duration_ms, num_turns
// and model, in that order, as the worker's model writes them; a nil pointer
// is written as null.
//
// The Python host's own DriverUsage (amelia.drivers.base) has five more
// keys after model: context_tokens, context_window_tokens,
// context_utilization, context_warning_threshold and context_window_warning.
// They are kept, so that a line decoded and encoded again is the same bytes
// whichever of the two models wrote it: ContextFields says whether the JSON
// form has them.
type DriverUsage struct {
	InputTokens         *int64
	OutputTokens        *int64
	CacheReadTokens     *int64
	CacheCreationTokens *int64
	CostUSD             *float64
	DurationMs          *int64
	NumTurns            *int64
	Model               *string

	// The Python host's fields; the worker never writes them.
	ContextTokens           *int64
	ContextWindowTokens     *int64
	ContextUtilization      *float64
	ContextWarningThreshold *float64
	ContextWindowWarning    *bool
	// ContextFields is set by decoding when the object has any of the five
	// keys above, null or not; encoding writes all five when it is set or
	// any of them is not nil, and none otherwise.
	ContextFields bool
}

// hasContext reports whether u's JSON form has the Python host's five
// context keys.
func (u *DriverUsage) hasContext() bool {
	return u.ContextFields || u.ContextTokens != nil || u.ContextWindowTokens != nil ||
		u.ContextUtilization != nil || u.ContextWarningThreshold != nil || u.ContextWindowWarning != nil
}

// ErrInvalid is matched, with [errors.Is], by every error about what a line
// or a message contains: JSON that does not parse, a missing or unknown type,
// a value of the wrong JSON type, a tool_input that is not an object.
var ErrInvalid = errors.New("invalid message")

// ErrLineTooLong is matched, with [errors.Is], by the error a [Decoder]
// returns for a line longer than its limit (see [WithMaxLineBytes]).
var ErrLineTooLong = errors.New("line too long")

// MarshalJSON returns the JSON form of m, exactly as pydantic writes it,
// without a trailing newline. It fails if m.Type is not one of the five types
// or m.ToolInput is not a JSON object (nil and null are fine).
func (m AgenticMessage) MarshalJSON() ([]byte, error) {
	return AppendJSON(nil, &m)
}

// UnmarshalJSON sets *m from the JSON object data, replacing all of its
// fields (keys missing from data are reset to their zero values). As the
// encoding/json convention asks, the JSON null leaves *m unchanged. The rules
// are those of [Decoder.Decode].
func (m *AgenticMessage) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		return nil
	}
	var p parser
	res, err := p.parseMessage(data)
	if err != nil {
		return err
	}
	*m = *res
	return nil
}

// MarshalJSON returns the JSON form of u, exactly as pydantic writes it.
func (u DriverUsage) MarshalJSON() ([]byte, error) {
	return appendUsage(nil, &u), nil
}

// UnmarshalJSON sets *u from the JSON object data, replacing all of its
// fields. The JSON null leaves *u unchanged.
func (u *DriverUsage) UnmarshalJSON(data []byte) error {
	if isNull(data) {
		return nil
	}
	var p parser
	res, err := p.parseUsageDocument(data)
	if err != nil {
		return err
	}
	*u = *res
	return nil
}

// isNull reports whether data is the JSON null, possibly surrounded by
// whitespace.
func isNull(data []byte) bool {
	i, j := 0, len(data)
	for i < j && isSpace(data[i]) {
		i++
	}
	for j > i && isSpace(data[j-1]) {
		j--
	}
	return string(data[i:j]) == "null"
}
