package llmtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// This file holds Anthropic's Messages API (POST /v1/messages), written
// from Anthropic's published API reference ("Messages" and "Streaming
// Messages"), answering from the same script of turns as chat
// completions. A Turn's Usage is given in OpenAI's terms; Anthropic's
// input_tokens count neither cache reads nor writes, so input_tokens is
// PromptTokens less CachedTokens and CacheWriteTokens.

// MessagesRequest is a messages request body as the server decoded it.
type MessagesRequest struct {
	Model         string            `json:"model"`
	MaxTokens     int               `json:"max_tokens"`
	System        json.RawMessage   `json:"system,omitempty"`
	Messages      []AnthropicMsg    `json:"messages"`
	Tools         []json.RawMessage `json:"tools,omitempty"`
	ToolChoice    json.RawMessage   `json:"tool_choice,omitempty"`
	StopSequences []string          `json:"stop_sequences,omitempty"`
	Stream        bool              `json:"stream,omitempty"`
	Temperature   *float64          `json:"temperature,omitempty"`
}

// AnthropicMsg is one message of a messages request; Content is a string
// or an array of content blocks, as sent.
type AnthropicMsg struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Blocks returns the message's content blocks, each as raw JSON with its
// type; a string content is one text block.
func (m *AnthropicMsg) Blocks() []map[string]any {
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []map[string]any{{"type": "text", "text": s}}
	}
	var bs []map[string]any
	_ = json.Unmarshal(m.Content, &bs)
	return bs
}

// decodeMessagesRequest decodes and validates a messages request body,
// with Anthropic's error messages.
func decodeMessagesRequest(body []byte) (MessagesRequest, string) {
	var req MessagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, "llmtest: invalid request body: " + err.Error()
	}
	switch {
	case req.Model == "":
		return req, "model: Field required"
	case req.MaxTokens <= 0:
		return req, "max_tokens: Field required"
	case len(req.Messages) == 0:
		return req, "messages: at least one message is required"
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return req, fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
		for _, b := range m.Blocks() {
			if b["type"] == "text" && b["text"] == "" {
				return req, fmt.Sprintf("messages.%d: text content blocks must be non-empty", i)
			}
		}
	}
	return req, ""
}

func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

// anthropicErrorType is the error type Anthropic answers status with.
func anthropicErrorType(status int) string {
	switch {
	case status == 401:
		return "authentication_error"
	case status == 403:
		return "permission_error"
	case status == 404:
		return "not_found_error"
	case status == 413:
		return "request_too_large"
	case status == 429:
		return "rate_limit_error"
	case status == 529:
		return "overloaded_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	// Anthropic wants a key (x-api-key, or a bearer token) and the
	// version before it reads the body.
	if r.Header.Get("X-Api-Key") == "" && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		s.recordError("llmtest: POST /v1/messages without x-api-key")
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "x-api-key header is required")
		return
	}
	if r.Header.Get("Anthropic-Version") == "" {
		s.recordError("llmtest: POST /v1/messages without anthropic-version")
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.recordError("llmtest: reading request body: %v", err)
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "llmtest: reading request body: "+err.Error())
		return
	}
	msgs, bad := decodeMessagesRequest(body)
	req := Request{Header: r.Header.Clone(), Path: r.URL.Path, Body: body, Messages: msgs}
	turn, i, status, msg := s.take(req, bad)
	switch {
	case status == http.StatusBadRequest:
		writeAnthropicError(w, status, "invalid_request_error", msg)
		return
	case status != 0:
		writeAnthropicError(w, status, "api_error", msg)
		return
	}
	switch {
	case turn.Status != 0:
		msg := turn.Error
		if msg == "" {
			msg = http.StatusText(turn.Status)
		}
		writeAnthropicError(w, turn.Status, anthropicErrorType(turn.Status), msg)
	case turn.RawSSE != "":
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, turn.RawSSE)
		_ = http.NewResponseController(w).Flush()
	case msgs.Stream:
		s.streamMessage(w, i, &msgs, &turn)
	default:
		s.message(w, i, &msgs, &turn)
	}
}

// stopReason is a turn's finish reason in Anthropic's terms.
func stopReason(t *Turn) string {
	switch f := finishReason(t); f {
	case "stop":
		return "end_turn"
	case "length":
		return "max_tokens"
	case "tool_calls":
		return "tool_use"
	default:
		return f
	}
}

func messageID(i int) string { return fmt.Sprintf("msg_llmtest%06d", i) }

func toolUseID(i, k int, tc ToolCall) string {
	if tc.ID != "" {
		return tc.ID
	}
	return fmt.Sprintf("toolu_llmtest_%d_%d", i, k)
}

// toolInput is a tool call's arguments as a tool_use block's input, which
// must be an object: arguments that are not one are kept as {"_raw": ...}.
func toolInput(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) == nil && obj != nil {
		var b bytes.Buffer
		_ = json.Compact(&b, []byte(args))
		return b.Bytes()
	}
	return marshal(map[string]string{"_raw": args})
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

func toAnthropicUsage(u *Usage) anthropicUsage {
	if u == nil {
		return anthropicUsage{}
	}
	return anthropicUsage{
		InputTokens:              max(0, u.PromptTokens-u.CachedTokens-u.CacheWriteTokens),
		CacheCreationInputTokens: u.CacheWriteTokens,
		CacheReadInputTokens:     u.CachedTokens,
		OutputTokens:             u.CompletionTokens,
	}
}

type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []any          `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type toolUseBlock struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// message writes a non-streaming message.
func (s *Server) message(w http.ResponseWriter, i int, req *MessagesRequest, t *Turn) {
	stop := stopReason(t)
	m := anthropicMessage{ID: messageID(i), Type: "message", Role: "assistant", Model: req.Model, Content: []any{}, StopReason: &stop, Usage: toAnthropicUsage(t.Usage)}
	if t.Text != "" {
		m.Content = append(m.Content, textBlock{"text", t.Text})
	}
	for k, tc := range t.ToolCalls {
		m.Content = append(m.Content, toolUseBlock{"tool_use", toolUseID(i, k, tc), tc.Name, toolInput(tc.Arguments)})
	}
	writeJSON(w, http.StatusOK, m)
}

// streamMessage writes the turn as Anthropic's event stream:
// message_start, a ping, each content block (start, deltas, stop),
// message_delta with the stop reason and the output tokens, message_stop.
func (s *Server) streamMessage(w http.ResponseWriter, i int, req *MessagesRequest, t *Turn) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(v map[string]any) bool {
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", v["type"], marshal(v)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	u := toAnthropicUsage(t.Usage)
	start := u
	start.OutputTokens = min(1, u.OutputTokens)
	if !send(map[string]any{"type": "message_start", "message": anthropicMessage{
		ID: messageID(i), Type: "message", Role: "assistant", Model: req.Model, Content: []any{}, Usage: start,
	}}) || !send(map[string]any{"type": "ping"}) {
		return
	}
	index := 0
	block := func(start any, deltas []map[string]any) bool {
		if !send(map[string]any{"type": "content_block_start", "index": index, "content_block": start}) {
			return false
		}
		for _, d := range deltas {
			if !send(map[string]any{"type": "content_block_delta", "index": index, "delta": d}) {
				return false
			}
		}
		ok := send(map[string]any{"type": "content_block_stop", "index": index})
		index++
		return ok
	}
	if t.Text != "" {
		var deltas []map[string]any
		for _, piece := range splitChunks(t.Text, s.chunkSize) {
			deltas = append(deltas, map[string]any{"type": "text_delta", "text": piece})
		}
		if !block(textBlock{"text", ""}, deltas) {
			return
		}
	}
	for k, tc := range t.ToolCalls {
		var deltas []map[string]any
		for _, piece := range splitChunks(string(toolInput(tc.Arguments)), s.chunkSize) {
			deltas = append(deltas, map[string]any{"type": "input_json_delta", "partial_json": piece})
		}
		if !block(toolUseBlock{"tool_use", toolUseID(i, k, tc), tc.Name, json.RawMessage("{}")}, deltas) {
			return
		}
	}
	if !send(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason(t), "stop_sequence": nil},
		"usage": map[string]int{"output_tokens": u.OutputTokens}}) {
		return
	}
	send(map[string]any{"type": "message_stop"})
}
