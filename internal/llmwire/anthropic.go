package llmwire

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Anthropic Messages, from Anthropic's API reference (POST /v1/messages,
// "Streaming Messages" for the events). Fields this package does not use
// are left out; a translation drops them.

// AnthropicVersion is the anthropic-version header the proxy sends when it
// translates a request to Anthropic's API.
const AnthropicVersion = "2023-06-01"

// MessagesRequest is a messages request body.
type MessagesRequest struct {
	Model         string              `json:"model"`
	Messages      []Message           `json:"messages"`
	System        json.RawMessage     `json:"system,omitempty"` // a string or an array of text blocks
	MaxTokens     int64               `json:"max_tokens"`
	StopSequences []string            `json:"stop_sequences,omitempty"`
	Stream        bool                `json:"stream,omitempty"`
	Temperature   *float64            `json:"temperature,omitempty"`
	TopP          *float64            `json:"top_p,omitempty"`
	TopK          *int64              `json:"top_k,omitempty"`
	Tools         []MessagesTool      `json:"tools,omitempty"`
	ToolChoice    *MessagesToolChoice `json:"tool_choice,omitempty"`
	Metadata      *MessagesMetadata   `json:"metadata,omitempty"`
}

// MessagesMetadata is a request's metadata.
type MessagesMetadata struct {
	UserID string `json:"user_id,omitempty"`
}

// Message is one message of a request: its content is a string or an
// array of content blocks.
type Message struct {
	Role    string          `json:"role"` // user, assistant
	Content json.RawMessage `json:"content"`
}

// Blocks returns the message's content as blocks: a string content is one
// text block.
func (m *Message) Blocks() ([]ContentBlock, error) {
	return blocks(m.Content)
}

// blocks decodes a content that is a string or an array of blocks.
func blocks(raw json.RawMessage) ([]ContentBlock, error) {
	c := bytes.TrimSpace(raw)
	switch {
	case len(c) == 0 || string(c) == "null":
		return nil, nil
	case c[0] == '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return nil, err
		}
		return []ContentBlock{{Type: "text", Text: s}}, nil
	}
	var bs []ContentBlock
	err := json.Unmarshal(c, &bs)
	return bs, err
}

// blocksText joins the text of the text blocks of a content that is a
// string or an array of blocks.
func blocksText(raw json.RawMessage) string {
	bs, _ := blocks(raw)
	var b strings.Builder
	for _, bl := range bs {
		if bl.Type == "text" {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// ContentBlock is one block of a message's content, of any type: the
// fields set depend on Type. It is encoded with the fields of its type
// only, as Anthropic sends them (a text block always has "text", a
// tool_use block always has "input").
type ContentBlock struct {
	Type string `json:"type"` // text, image, tool_use, tool_result, thinking, redacted_thinking, ...
	// text
	Text string `json:"text,omitempty"`
	// image
	Source *ImageSource `json:"source,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result: Content is a string or an array of text and image blocks.
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
	// thinking
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
	// redacted_thinking
	Data string `json:"data,omitempty"`
}

// MarshalJSON encodes the block with its type's fields.
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case "text":
		return json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{b.Type, b.Text})
	case "tool_use":
		in := b.Input
		if len(bytes.TrimSpace(in)) == 0 {
			in = json.RawMessage("{}")
		}
		return json.Marshal(struct {
			Type  string          `json:"type"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}{b.Type, b.ID, b.Name, in})
	case "thinking":
		return json.Marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, b.Signature})
	}
	type plain ContentBlock
	return json.Marshal(plain(b))
}

// ImageSource is an image block's image: base64 data or a URL.
type ImageSource struct {
	Type      string `json:"type"` // base64, url
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// MessagesTool is a tool offered to the model. Anthropic's server tools
// (web search...) have a Type and no InputSchema.
type MessagesTool struct {
	Type        string          `json:"type,omitempty"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
}

// MessagesToolChoice is a request's tool_choice.
type MessagesToolChoice struct {
	Type                   string `json:"type"` // auto, any, tool, none
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse *bool  `json:"disable_parallel_tool_use,omitempty"`
}

// MessagesResponse is a non-streaming response (type "message"), and the
// message of a stream's message_start event.
type MessagesResponse struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // message
	Role         string         `json:"role"` // assistant
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"` // end_turn, max_tokens, stop_sequence, tool_use, pause_turn, refusal
	StopSequence *string        `json:"stop_sequence"`
	Usage        MessagesUsage  `json:"usage"`
}

// MessagesUsage is a response's token usage. input_tokens count neither
// cache reads nor cache writes.
type MessagesUsage struct {
	InputTokens              int64  `json:"input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens,omitempty"`
}

// Usage is u in this package's terms.
func (u *MessagesUsage) Usage() Usage {
	out := Usage{Input: u.InputTokens, Output: u.OutputTokens}
	if u.CacheReadInputTokens != nil {
		out.CacheRead = *u.CacheReadInputTokens
	}
	if u.CacheCreationInputTokens != nil {
		out.CacheWrite = *u.CacheCreationInputTokens
	}
	return out
}

// MessagesStreamEvent is one event of a streamed response: message_start
// (Message), content_block_start (Index, ContentBlock),
// content_block_delta (Index, Delta), content_block_stop (Index),
// message_delta (Delta with the stop reason, Usage), message_stop, ping,
// error (Error).
type MessagesStreamEvent struct {
	Type         string             `json:"type"`
	Message      *MessagesResponse  `json:"message,omitempty"`
	Index        *int               `json:"index,omitempty"`
	ContentBlock *ContentBlock      `json:"content_block,omitempty"`
	Delta        *StreamDelta       `json:"delta,omitempty"`
	Usage        *MessagesUsage     `json:"usage,omitempty"`
	Error        *MessagesErrorBody `json:"error,omitempty"`
}

// StreamDelta is a content_block_delta's delta (Type text_delta,
// input_json_delta, thinking_delta or signature_delta) or a message_delta's
// (no Type: StopReason and StopSequence).
type StreamDelta struct {
	Type         string  `json:"type,omitempty"`
	Text         string  `json:"text,omitempty"`
	PartialJSON  string  `json:"partial_json,omitempty"`
	Thinking     string  `json:"thinking,omitempty"`
	Signature    string  `json:"signature,omitempty"`
	StopReason   *string `json:"stop_reason,omitempty"`
	StopSequence *string `json:"stop_sequence,omitempty"`
}

// MarshalJSON encodes the delta with its type's fields.
func (d StreamDelta) MarshalJSON() ([]byte, error) {
	switch d.Type {
	case "":
		return json.Marshal(struct {
			StopReason   *string `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		}{d.StopReason, d.StopSequence})
	case "text_delta":
		return json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{d.Type, d.Text})
	case "input_json_delta":
		return json.Marshal(struct {
			Type        string `json:"type"`
			PartialJSON string `json:"partial_json"`
		}{d.Type, d.PartialJSON})
	}
	type plain StreamDelta
	return json.Marshal(plain(d))
}

// MessagesError is Anthropic's error body.
type MessagesError struct {
	Type  string            `json:"type"` // error
	Error MessagesErrorBody `json:"error"`
}

// MessagesErrorBody is the error object of a MessagesError: Type is
// invalid_request_error, authentication_error, permission_error,
// not_found_error, request_too_large, rate_limit_error, api_error or
// overloaded_error.
type MessagesErrorBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// MessagesModelList is GET /v1/models's answer.
type MessagesModelList struct {
	Data    []MessagesModel `json:"data"`
	HasMore bool            `json:"has_more"`
	FirstID *string         `json:"first_id"`
	LastID  *string         `json:"last_id"`
}

// MessagesModel is one model of a MessagesModelList.
type MessagesModel struct {
	Type        string `json:"type"` // model
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"` // RFC 3339
}
