package llmwire

import (
	"encoding/json"
	"fmt"
	"slices"
)

// ToolResults returns the tool results in the LAST message(s) of a request body
// of api (OpenAI: trailing role "tool" messages; Anthropic: tool_result blocks of
// the last user message).
func ToolResults(api API, requestBody []byte) ([]ToolResult, error) {
	switch api {
	case OpenAI:
		var req struct {
			Messages []ChatMessage `json:"messages"`
		}
		if err := json.Unmarshal(requestBody, &req); err != nil {
			return nil, fmt.Errorf("decode the chat completions request: %w", err)
		}
		var out []ToolResult
		for i := len(req.Messages) - 1; i >= 0 && req.Messages[i].Role == "tool"; i-- {
			m := &req.Messages[i]
			out = append(out, ToolResult{ID: m.ToolCallID, Content: m.Text()})
		}
		slices.Reverse(out)
		return out, nil
	case Anthropic:
		var req struct {
			Messages []Message `json:"messages"`
		}
		if err := json.Unmarshal(requestBody, &req); err != nil {
			return nil, fmt.Errorf("decode the messages request: %w", err)
		}
		if len(req.Messages) == 0 || req.Messages[len(req.Messages)-1].Role != "user" {
			return nil, nil
		}
		bs, err := req.Messages[len(req.Messages)-1].Blocks()
		if err != nil {
			return nil, fmt.Errorf("decode the last message's content: %w", err)
		}
		var out []ToolResult
		for _, b := range bs {
			if b.Type == "tool_result" {
				out = append(out, ToolResult{ID: b.ToolUseID, Content: blocksText(b.Content), IsError: b.IsError})
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown API %q", api)
}
