package llmwire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// StopToAnthropic maps an OpenAI finish_reason to Anthropic's stop_reason.
func StopToAnthropic(finish string) string {
	switch finish {
	case "length":
		return "max_tokens"
	case "tool_calls", "function_call":
		return "tool_use"
	case "content_filter":
		return "refusal"
	}
	return "end_turn"
}

// StopToOpenAI maps an Anthropic stop_reason to OpenAI's finish_reason.
func StopToOpenAI(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop" // end_turn, stop_sequence, pause_turn
}

// UsageToAnthropic is OpenAI's usage in Anthropic's terms: input_tokens
// count neither cache reads nor cache writes.
func UsageToAnthropic(u *ChatUsage) MessagesUsage {
	if u == nil {
		u = &ChatUsage{}
	}
	v := u.Usage()
	read, write := v.CacheRead, v.CacheWrite
	return MessagesUsage{
		InputTokens:              max(0, v.Input-read-write),
		OutputTokens:             v.Output,
		CacheReadInputTokens:     &read,
		CacheCreationInputTokens: &write,
	}
}

// UsageToOpenAI is Anthropic's usage in OpenAI's terms: prompt_tokens
// count the cached ones too.
func UsageToOpenAI(u Usage) *ChatUsage {
	prompt := u.Input + u.CacheRead + u.CacheWrite
	return &ChatUsage{
		PromptTokens:        prompt,
		CompletionTokens:    u.Output,
		TotalTokens:         prompt + u.Output,
		PromptTokensDetails: &ChatPromptDetails{CachedTokens: u.CacheRead, CacheWriteTokens: u.CacheWrite},
	}
}

// TranslateResponse translates a non-streaming response body of from's
// API (the upstream's) into the other API's (the client's).
func TranslateResponse(from API, body []byte, info RequestInfo) ([]byte, error) {
	switch from {
	case OpenAI:
		var c ChatCompletion
		if err := json.Unmarshal(body, &c); err != nil {
			return nil, fmt.Errorf("decode the upstream's chat completion: %w", err)
		}
		if len(c.Choices) == 0 {
			return nil, fmt.Errorf("the upstream's chat completion has no choices")
		}
		ch := c.Choices[0]
		out := MessagesResponse{ID: messageID(c.ID), Type: "message", Role: "assistant", Model: c.Model, Content: []ContentBlock{}, Usage: UsageToAnthropic(c.Usage)}
		if t := ch.Message.Text(); t != "" {
			out.Content = append(out.Content, ContentBlock{Type: "text", Text: t})
		}
		for _, tc := range ch.Message.ToolCalls {
			out.Content = append(out.Content, ContentBlock{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: ToolInput(tc.Function.Arguments)})
		}
		stop := StopToAnthropic(ch.FinishReason)
		out.StopReason = &stop
		return marshal(out)
	case Anthropic:
		var m MessagesResponse
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, fmt.Errorf("decode the upstream's message: %w", err)
		}
		msg := ChatMessage{Role: "assistant"}
		var text strings.Builder
		for _, b := range m.Content {
			switch b.Type {
			case "text":
				text.WriteString(b.Text)
			case "tool_use":
				msg.ToolCalls = append(msg.ToolCalls, ChatToolCall{ID: b.ID, Type: "function", Function: ChatFunctionCall{Name: b.Name, Arguments: string(ToolArguments(b.Input))}})
			}
		}
		msg.Content = json.RawMessage("null")
		if text.Len() > 0 || len(msg.ToolCalls) == 0 {
			msg.Content = jsonString(text.String())
		}
		stop := ""
		if m.StopReason != nil {
			stop = *m.StopReason
		}
		return marshal(ChatCompletion{
			ID: completionID(m.ID), Object: "chat.completion", Created: time.Now().Unix(), Model: m.Model,
			Choices: []ChatChoice{{Index: 0, Message: msg, FinishReason: StopToOpenAI(stop)}},
			Usage:   UsageToOpenAI(m.Usage.Usage()),
		})
	}
	return nil, fmt.Errorf("unknown API %q", from)
}

// ToolArguments is a tool_use block's input as an OpenAI tool call's
// arguments: compact JSON, {} when empty.
func ToolArguments(input json.RawMessage) json.RawMessage {
	if c := compact(input); len(c) > 0 {
		return c
	}
	return json.RawMessage("{}")
}

func messageID(id string) string {
	if strings.HasPrefix(id, "msg_") {
		return id
	}
	return "msg_" + id
}

func completionID(id string) string {
	if strings.HasPrefix(id, "chatcmpl-") {
		return id
	}
	return "chatcmpl-" + id
}

// TranslateError translates an error body of from's API (the upstream's,
// or anything else an upstream answered with status) into the other API's
// error shape, keeping the message.
func TranslateError(from API, status int, body []byte) []byte {
	e := DecodeError(status, body)
	if e == nil {
		msg := strings.TrimSpace(string(body))
		if len(msg) > 512 {
			msg = msg[:512] + "..."
		}
		if msg == "" {
			msg = http.StatusText(status)
		}
		e = &APIError{Status: status, Message: fmt.Sprintf("the upstream answered %d: %s", status, msg)}
	}
	return ErrorBody(from.Other(), status, e.Type, e.Message)
}

// ErrorBody is an error body in api's shape for an answer with status:
// OpenAI's {"error": {"message", "type", "param", "code"}} or Anthropic's
// {"type": "error", "error": {"type", "message"}}. typ is the error's type
// in either API's terms; "" or the other API's picks one by status.
func ErrorBody(api API, status int, typ, msg string) []byte {
	var b []byte
	if api == Anthropic {
		if !anthropicErrorTypes[typ] {
			typ = anthropicErrorType(status)
		}
		b, _ = marshal(MessagesError{Type: "error", Error: MessagesErrorBody{Type: typ, Message: msg}})
	} else {
		code := openAIErrorCode(status)
		if typ == "" {
			typ = openAIErrorType(status)
		}
		body := ChatError{Error: ChatErrorBody{Message: msg, Type: typ, Code: json.RawMessage("null")}}
		if code != "" {
			body.Error.Code = jsonString(code)
		}
		b, _ = marshal(body)
	}
	return b
}

var anthropicErrorTypes = map[string]bool{
	"invalid_request_error": true, "authentication_error": true, "permission_error": true, "not_found_error": true,
	"request_too_large": true, "rate_limit_error": true, "api_error": true, "overloaded_error": true,
}

func anthropicErrorType(status int) string {
	switch status {
	case 401:
		return "authentication_error"
	case 402, 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 529, 503:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

func openAIErrorType(status int) string {
	switch {
	case status == 429:
		return "requests"
	case status >= 500 || status == 0:
		return "server_error"
	}
	return "invalid_request_error"
}

func openAIErrorCode(status int) string {
	switch status {
	case 401:
		return "invalid_api_key"
	case 404:
		return "not_found"
	case 429:
		return "rate_limit_exceeded"
	}
	return ""
}
