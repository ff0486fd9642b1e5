// Package llmwire holds the wire formats of the two LLM APIs Amelia's proxy
// speaks, OpenAI's Chat Completions and Anthropic's Messages, written from
// their published API references rather than borrowed from a client
// library, and what works on them: an Accumulator that reassembles a
// response as it streams through, the tool results a request carries back
// (ToolResults), and translation from either API to the other: requests
// (TranslateRequest), whole responses (TranslateResponse), streamed
// responses as they arrive (NewStreamTranslator) and error bodies
// (TranslateError).
package llmwire

import "fmt"

// API names an LLM wire format.
type API string

// The wire formats.
const (
	OpenAI    API = "openai"    // chat completions
	Anthropic API = "anthropic" // messages
)

// Other is the API that is not a: Anthropic for OpenAI and the other way
// round.
func (a API) Other() API {
	if a == Anthropic {
		return OpenAI
	}
	return Anthropic
}

// Valid reports whether a is OpenAI or Anthropic.
func (a API) Valid() bool { return a == OpenAI || a == Anthropic }

// MaxKept bounds what an Accumulator or a translation keeps of one body or
// one server-sent event: anything bigger is dropped and reported as an
// error.
const MaxKept = 4 << 20

// ToolCall is one tool call the model made.
type ToolCall struct {
	ID, Name  string
	Arguments string // the JSON arguments as the model sent them (may be invalid JSON)
}

// Usage is the token usage a response reported, in the API's own terms:
// OpenAI's prompt_tokens (Input) include the cached ones (CacheRead),
// Anthropic's input_tokens do not include cache reads or writes.
type Usage struct{ Input, Output, CacheRead, CacheWrite int64 }

// Turn is one model response, reassembled.
type Turn struct {
	Text       string
	ToolCalls  []ToolCall
	Usage      Usage
	StopReason string // as the API said it
}

// ToolResult is the result of a tool call, as the next request carries it.
type ToolResult struct {
	ID      string // the tool call's id
	Content string // text content joined
	IsError bool
}

// APIError is an error body an API answered with, in either shape.
type APIError struct {
	Status  int    // the HTTP status, 0 when it came inside a stream
	Type    string // OpenAI's type or Anthropic's error.type
	Code    string // OpenAI's code, when a string
	Message string
}

func (e *APIError) Error() string {
	s := e.Message
	if e.Type != "" {
		s = e.Type + ": " + s
	}
	if e.Status != 0 {
		s = fmt.Sprintf("status %d: %s", e.Status, s)
	}
	return s
}
