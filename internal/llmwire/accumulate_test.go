package llmwire

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const (
	openAIStream = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\r\n\r\n" +
		": keep-alive\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"pa\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"th\\\":\\\"a\\\"}\"}}]},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n" +
		"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":20,\"completion_tokens\":7,\"total_tokens\":27,\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\n" +
		"data: [DONE]\n\n"
	anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":3,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\r\n\r\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"pa\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"th\\\":\\\"a\\\"}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"ls\",\"input\":{}}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":3}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func TestAccumulator(t *testing.T) {
	toolTurn := func(stop string, u Usage, id1, id2 string) Turn {
		return Turn{Text: "Hello", ToolCalls: []ToolCall{{ID: id1, Name: "read", Arguments: `{"path":"a"}`}, {ID: id2, Name: "ls", Arguments: "{}"}}, Usage: u, StopReason: stop}
	}
	for _, tc := range []struct {
		name        string
		api         API
		contentType string
		body        string
		want        Turn
		wantErr     string
	}{
		{"openai stream", OpenAI, "text/event-stream; charset=utf-8", openAIStream,
			toolTurn("tool_calls", Usage{Input: 20, Output: 7, CacheRead: 5}, "call_1", "call_2"), ""},
		{"anthropic stream", Anthropic, "text/event-stream", anthropicStream,
			toolTurn("tool_use", Usage{Input: 25, Output: 7, CacheRead: 3}, "toolu_1", "toolu_2"), ""},
		{"openai json", OpenAI, "application/json",
			`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}},{"id":"call_2","type":"function","function":{"name":"ls","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":7,"total_tokens":27,"prompt_tokens_details":{"cached_tokens":5}}}`,
			toolTurn("tool_calls", Usage{Input: 20, Output: 7, CacheRead: 5}, "call_1", "call_2"), ""},
		{"anthropic json", Anthropic, "application/json",
			`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Hello"},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path": "a"}},{"type":"tool_use","id":"toolu_2","name":"ls","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":25,"output_tokens":7,"cache_read_input_tokens":3}}`,
			toolTurn("tool_use", Usage{Input: 25, Output: 7, CacheRead: 3}, "toolu_1", "toolu_2"), ""},
		{"openai error body", OpenAI, "application/json", `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded","param":null}}`, Turn{}, "requests: slow down"},
		{"anthropic error event", Anthropic, "text/event-stream", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", Turn{}, "overloaded_error: Overloaded"},
		{"openai error in stream", OpenAI, "text/event-stream", "data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"code\":500}}\n\n", Turn{}, "server_error: boom"},
		{"malformed chunk", OpenAI, "text/event-stream", "data: {nope\n\n", Turn{}, "decode a chat completion chunk"},
		{"last event without its blank line", OpenAI, "text/event-stream", "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}", Turn{Text: "x", StopReason: "stop"}, ""},
	} {
		// Every way of splitting the body into two writes gives the same.
		step := 1
		if len(tc.body) > 600 {
			step = 7
		}
		for cut := 0; cut <= len(tc.body); cut += step {
			acc := NewAccumulator(tc.api, tc.contentType)
			acc.Write([]byte(tc.body[:cut]))
			acc.Write([]byte(tc.body[cut:]))
			got, err := acc.Turn()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s, split at %d: error %v, want %q", tc.name, cut, err, tc.wantErr)
				}
				continue
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s, split at %d:\n got %+v, %v\nwant %+v", tc.name, cut, got, err, tc.want)
			}
		}
	}
}

func TestAccumulatorBounds(t *testing.T) {
	acc := NewAccumulator(OpenAI, "text/event-stream")
	acc.Write([]byte("data: " + strings.Repeat("x", MaxKept+10)))
	acc.Write([]byte("\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"after\"}}]}\n\n"))
	turn, err := acc.Turn()
	if err == nil || turn.Text != "after" {
		t.Errorf("after an oversized line: %+v, %v; want the rest read and an error", turn, err)
	}
	if a := acc.(*accumulator); cap(a.sse.line) > 2*MaxKept {
		t.Errorf("kept %d bytes of an oversized line", cap(a.sse.line))
	}
	acc = NewAccumulator(Anthropic, "application/json")
	acc.Write([]byte(`{"content":[{"type":"text","text":"`))
	acc.Write([]byte(strings.Repeat("x", MaxKept)))
	if _, err := acc.Turn(); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("oversized body: %v", err)
	}
	var apiErr *APIError
	acc = NewAccumulator(Anthropic, "application/json")
	acc.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"later"}}`))
	if _, err := acc.Turn(); !errors.As(err, &apiErr) || apiErr.Type != "rate_limit_error" {
		t.Errorf("error body: %v", err)
	}
}

func TestToolResults(t *testing.T) {
	for _, tc := range []struct {
		name string
		api  API
		body string
		want []ToolResult
	}{
		{"openai trailing tool messages", OpenAI, `{"messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"old","content":"x"},{"role":"assistant","content":null,"tool_calls":[]},{"role":"tool","tool_call_id":"call_1","content":"one"},{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"tw"},{"type":"text","text":"o"}]}]}`,
			[]ToolResult{{ID: "call_1", Content: "one"}, {ID: "call_2", Content: "two"}}},
		{"openai none", OpenAI, `{"messages":[{"role":"user","content":"hi"}]}`, nil},
		{"anthropic last user message", Anthropic, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"a","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"out"},{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"bad"},{"type":"text","text":"worse"}]},{"type":"text","text":"go on"}]}]}`,
			[]ToolResult{{ID: "toolu_1", Content: "out"}, {ID: "toolu_2", Content: "bad\nworse", IsError: true}}},
		{"anthropic last is assistant", Anthropic, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}]}`, nil},
	} {
		got, err := ToolResults(tc.api, []byte(tc.body))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	if _, err := ToolResults(OpenAI, []byte("{")); err == nil {
		t.Error("malformed body: no error")
	}
}
