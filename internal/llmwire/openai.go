package llmwire

import (
	"bytes"
	"encoding/json"
	"strings"
)

// OpenAI Chat Completions, from OpenAI's API reference
// (POST /v1/chat/completions). Fields this package does not use are left
// out; a translation drops them.

// ChatRequest is a chat completions request body.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Tools               []ChatTool      `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"` // "none", "auto", "required" or {"type":"function","function":{"name"}}
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int64          `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"` // a string or an array of strings
	N                   *int            `json:"n,omitempty"`
	User                string          `json:"user,omitempty"`
}

// StreamOptions is a request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one message of a request, or a response's message.
type ChatMessage struct {
	Role string `json:"role"` // system, developer, user, assistant, tool
	// Content is a string, an array of ChatContentParts, or null.
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ChatToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Refusal    *string         `json:"refusal,omitempty"`
}

// Parts returns the message's content as parts: a string content is one
// text part; null or absent content is none.
func (m *ChatMessage) Parts() ([]ChatContentPart, error) {
	c := bytes.TrimSpace(m.Content)
	switch {
	case len(c) == 0 || string(c) == "null":
		return nil, nil
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return nil, err
		}
		return []ChatContentPart{{Type: "text", Text: s}}, nil
	}
	var parts []ChatContentPart
	err := json.Unmarshal(c, &parts)
	return parts, err
}

// Text returns the message's text parts joined.
func (m *ChatMessage) Text() string {
	parts, _ := m.Parts()
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// ChatContentPart is one part of an array content.
type ChatContentPart struct {
	Type     string        `json:"type"` // text, image_url, ...
	Text     string        `json:"text,omitempty"`
	ImageURL *ChatImageURL `json:"image_url,omitempty"`
}

// ChatImageURL is an image_url part's image: a URL or a data: URL.
type ChatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

// ChatToolCall is a tool call of an assistant message, or a piece of one
// in a stream's delta (with Index).
type ChatToolCall struct {
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"` // function
	Function ChatFunctionCall `json:"function"`
}

// ChatFunctionCall is a tool call's function and its arguments (JSON text).
type ChatFunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ChatTool is a tool offered to the model.
type ChatTool struct {
	Type     string       `json:"type"` // function
	Function ChatFunction `json:"function"`
}

// ChatFunction describes a function tool.
type ChatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"` // JSON Schema
	Strict      *bool           `json:"strict,omitempty"`
}

// ChatCompletion is a non-streaming response ("chat.completion").
type ChatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []ChatChoice `json:"choices"`
	Usage   *ChatUsage   `json:"usage,omitempty"`
}

// ChatChoice is one choice of a ChatCompletion.
type ChatChoice struct {
	Index        int         `json:"index"`
	Message      ChatMessage `json:"message"`
	FinishReason string      `json:"finish_reason"` // stop, length, tool_calls, content_filter
}

// ChatChunk is one event of a streamed response ("chat.completion.chunk").
// The last one, when the request set stream_options.include_usage, has no
// choices and the usage. Some compatible servers send an error inside the
// stream as {"error": {...}}.
type ChatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []ChatChunkChoice `json:"choices"`
	Usage   *ChatUsage        `json:"usage,omitempty"`
	Error   *ChatErrorBody    `json:"error,omitempty"`
}

// ChatChunkChoice is one choice of a ChatChunk.
type ChatChunkChoice struct {
	Index        int       `json:"index"`
	Delta        ChatDelta `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
}

// ChatDelta is what a chunk adds to its choice's message.
type ChatDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []ChatToolCall `json:"tool_calls,omitempty"`
	Refusal   *string        `json:"refusal,omitempty"`
}

// ChatUsage is a response's token usage.
type ChatUsage struct {
	PromptTokens        int64              `json:"prompt_tokens"`
	CompletionTokens    int64              `json:"completion_tokens"`
	TotalTokens         int64              `json:"total_tokens"`
	PromptTokensDetails *ChatPromptDetails `json:"prompt_tokens_details,omitempty"`
}

// ChatPromptDetails breaks down the prompt tokens: cached_tokens, and
// cache_write_tokens as OpenRouter reports them.
type ChatPromptDetails struct {
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
}

// Usage is u in this package's terms.
func (u *ChatUsage) Usage() Usage {
	out := Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
	if d := u.PromptTokensDetails; d != nil {
		out.CacheRead, out.CacheWrite = d.CachedTokens, d.CacheWriteTokens
	}
	return out
}

// ChatError is OpenAI's error body.
type ChatError struct {
	Error ChatErrorBody `json:"error"`
}

// ChatErrorBody is the error object of a ChatError. Code is a string in
// OpenAI's answers, but some compatible servers send a number.
type ChatErrorBody struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   *string         `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// CodeString is the error's code as text, "" when null or absent.
func (e *ChatErrorBody) CodeString() string {
	c := bytes.TrimSpace(e.Code)
	if len(c) == 0 || string(c) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(c, &s) == nil {
		return s
	}
	return string(c)
}

// ChatModelList is GET /v1/models's answer.
type ChatModelList struct {
	Object string      `json:"object"` // list
	Data   []ChatModel `json:"data"`
}

// ChatModel is one model of a ChatModelList.
type ChatModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // model
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}
