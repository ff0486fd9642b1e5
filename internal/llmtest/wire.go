package llmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// This file holds the Chat Completions wire format, written from OpenAI's
// published API reference rather than borrowed from a client library, so
// that tests using a client library check it against the documented format.

// ChatRequest is a chat completions request body as the server decoded it.
// Fields the server does not model individually are still available, as
// raw JSON, in Fields.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Tools               []Tool          `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	ResponseFormat      json.RawMessage `json:"response_format,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	User                string          `json:"user,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`

	// Fields holds every top-level field of the body as raw JSON, including
	// the ones decoded above and vendor extensions (for example OpenRouter's
	// "provider" or "usage").
	Fields map[string]json.RawMessage `json:"-"`
}

// IncludeUsage reports whether the request asked for a usage chunk at the
// end of the stream (stream_options.include_usage).
func (r *ChatRequest) IncludeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// StreamOptions is the request's stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Message is one entry of the request's messages array.
type Message struct {
	Role string `json:"role"`
	// Content is nil when the content was null or absent. When the content
	// was an array of parts, it is the concatenation of the text parts and
	// Parts holds the parts themselves.
	Content    *string           `json:"-"`
	Parts      []ContentPart     `json:"-"`
	Name       string            `json:"name,omitempty"`
	ToolCalls  []MessageToolCall `json:"tool_calls,omitempty"`
	ToolCallID string            `json:"tool_call_id,omitempty"`
	// Raw is the message exactly as it was sent.
	Raw json.RawMessage `json:"-"`
}

// Text returns the message's text content, or "" when it had none.
func (m *Message) Text() string {
	if m.Content == nil {
		return ""
	}
	return *m.Content
}

// ContentPart is one element of an array-valued message content.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// Raw is the part exactly as it was sent (image_url etc. live here).
	Raw json.RawMessage `json:"-"`
}

// UnmarshalJSON decodes a message whose content may be a string, null or an
// array of content parts.
func (m *Message) UnmarshalJSON(data []byte) error {
	type plain Message
	var aux struct {
		plain
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(data, &aux); err != nil {
		return err
	}
	*m = Message(aux.plain)
	m.Raw = append(json.RawMessage(nil), data...)
	content := bytes.TrimSpace(aux.Content)
	switch {
	case len(content) == 0 || bytes.Equal(content, []byte("null")):
	case content[0] == '"':
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return err
		}
		m.Content = &s
	case content[0] == '[':
		var raws []json.RawMessage
		if err := json.Unmarshal(content, &raws); err != nil {
			return err
		}
		var text strings.Builder
		for _, raw := range raws {
			var p ContentPart
			if err := json.Unmarshal(raw, &p); err != nil {
				return fmt.Errorf("content part: %w", err)
			}
			p.Raw = raw
			m.Parts = append(m.Parts, p)
			if p.Type == "text" {
				text.WriteString(p.Text)
			}
		}
		s := text.String()
		m.Content = &s
	default:
		return errors.New("content must be a string, an array of content parts or null")
	}
	return nil
}

// MessageToolCall is an entry of an assistant message's tool_calls.
type MessageToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function part of a tool call.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is an entry of the request's tools array.
type Tool struct {
	Type     string             `json:"type"`
	Function FunctionDefinition `json:"function"`
}

// FunctionDefinition describes a function tool offered to the model.
type FunctionDefinition struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// decodeChatRequest decodes and validates a request body.
func decodeChatRequest(body []byte) (ChatRequest, *apiError) {
	var req ChatRequest
	if !json.Valid(body) {
		return req, &apiError{Message: "We could not parse the JSON body of your request. (llmtest: body is not valid JSON)", Type: "invalid_request_error"}
	}
	if err := json.Unmarshal(body, &req.Fields); err != nil {
		return req, &apiError{Message: "llmtest: request body must be a JSON object: " + err.Error(), Type: "invalid_request_error"}
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return req, &apiError{Message: "llmtest: invalid request body: " + err.Error(), Type: "invalid_request_error"}
	}
	if req.Model == "" {
		return req, &apiError{Message: "you must provide a model parameter", Type: "invalid_request_error", Param: "model"}
	}
	if len(req.Messages) == 0 {
		return req, &apiError{Message: "'messages' must contain at least one message", Type: "invalid_request_error", Param: "messages"}
	}
	for i, m := range req.Messages {
		if m.Role == "" {
			return req, &apiError{Message: fmt.Sprintf("missing required parameter: 'messages[%d].role'", i), Type: "invalid_request_error", Param: fmt.Sprintf("messages[%d].role", i)}
		}
	}
	return req, nil
}

// decodeChatRequestLight decodes only the fields needed to answer.
func decodeChatRequestLight(body []byte) (ChatRequest, *apiError) {
	var req ChatRequest
	var light struct {
		Model         string         `json:"model"`
		Stream        bool           `json:"stream"`
		StreamOptions *StreamOptions `json:"stream_options"`
	}
	if err := json.Unmarshal(body, &light); err != nil {
		return req, &apiError{Message: "llmtest: invalid request body: " + err.Error(), Type: "invalid_request_error"}
	}
	if light.Model == "" {
		return req, &apiError{Message: "you must provide a model parameter", Type: "invalid_request_error", Param: "model"}
	}
	req.Model, req.Stream, req.StreamOptions = light.Model, light.Stream, light.StreamOptions
	return req, nil
}

// apiError is the "error" object of an OpenAI error body.
type apiError struct {
	Message string
	Type    string
	Param   string // "" = null
	Code    string // "" = null
}

func (e *apiError) MarshalJSON() ([]byte, error) {
	var out struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	out.Message, out.Type = e.Message, e.Type
	if e.Param != "" {
		out.Param = &e.Param
	}
	if e.Code != "" {
		out.Code = &e.Code
	}
	return json.Marshal(out)
}

// statusError builds the error object OpenAI sends with the given status.
func statusError(status int, msg string) *apiError {
	e := &apiError{Message: msg, Type: "invalid_request_error"}
	switch {
	case status == 401:
		e.Code = "invalid_api_key"
	case status == 429:
		e.Type, e.Code = "requests", "rate_limit_exceeded"
	case status >= 500:
		e.Type = "server_error"
	}
	return e
}

// --- responses ---

var jsonNull = json.RawMessage("null")

type usageJSON struct {
	PromptTokens        int               `json:"prompt_tokens"`
	CompletionTokens    int               `json:"completion_tokens"`
	TotalTokens         int               `json:"total_tokens"`
	PromptTokensDetails promptDetailsJSON `json:"prompt_tokens_details"`
	Cost                *float64          `json:"cost,omitempty"`
}

type promptDetailsJSON struct {
	CachedTokens     int `json:"cached_tokens"`
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
}

func toUsageJSON(u *Usage) *usageJSON {
	if u == nil {
		return nil
	}
	return &usageJSON{
		PromptTokens:        u.PromptTokens,
		CompletionTokens:    u.CompletionTokens,
		TotalTokens:         u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails: promptDetailsJSON{CachedTokens: u.CachedTokens, CacheWriteTokens: u.CacheWriteTokens},
		Cost:                u.Cost,
	}
}

// completionJSON is a non-streaming "chat.completion" object.
type completionJSON struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usageJSON         `json:"usage,omitempty"`
	SystemFingerprint json.RawMessage    `json:"system_fingerprint"`
}

type completionChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type responseMessage struct {
	Role      string            `json:"role"`
	Content   *string           `json:"content"`
	Refusal   json.RawMessage   `json:"refusal"`
	ToolCalls []MessageToolCall `json:"tool_calls,omitempty"`
}

// chunkJSON is a streaming "chat.completion.chunk" object.
type chunkJSON struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	Created           int64           `json:"created"`
	Model             string          `json:"model"`
	SystemFingerprint json.RawMessage `json:"system_fingerprint"`
	Choices           []chunkChoice   `json:"choices"`
	// Usage is omitted unless the request set stream_options.include_usage;
	// then it is null on every chunk but the last.
	Usage json.RawMessage `json:"usage,omitempty"`
}

type chunkChoice struct {
	Index        int             `json:"index"`
	Delta        deltaJSON       `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

type deltaJSON struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	Refusal   json.RawMessage `json:"refusal,omitempty"`
	ToolCalls []toolCallDelta `json:"tool_calls,omitempty"`
}

type toolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function functionCallDelta `json:"function"`
}

type functionCallDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type modelJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelListJSON struct {
	Object string      `json:"object"`
	Data   []modelJSON `json:"data"`
}

// marshal encodes v without HTML escaping, as OpenAI does.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic("llmtest: encoding response: " + err.Error())
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
