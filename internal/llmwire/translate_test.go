package llmwire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// jsonEq reports whether a and b are the same JSON value.
func jsonEq(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("not JSON: %s", a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return reflect.DeepEqual(x, y)
}

func TestTranslateRequest(t *testing.T) {
	for _, tc := range []struct {
		name string
		from API
		opts RequestOptions
		in   string
		want string
		info RequestInfo
	}{
		{"anthropic to openai", Anthropic, RequestOptions{Model: "gpt-x"},
			`{"model":"claude-sonnet","max_tokens":1000,"stream":true,"temperature":0.5,"stop_sequences":["END"],
			  "system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}},{"type":"text","text":"Be kind."}],
			  "tools":[{"name":"read","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}},{"type":"web_search_20250305","name":"web_search"}],
			  "tool_choice":{"type":"any","disable_parallel_tool_use":true},
			  "messages":[
			    {"role":"user","content":"read a"},
			    {"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"Reading."},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path": "a"}}]},
			    {"role":"user","content":[{"type":"text","text":"here:"},{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"A"}]},{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":"no"},
			      {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}}]}]}`,
			`{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"max_tokens":1000,"temperature":0.5,"stop":["END"],
			  "tools":[{"type":"function","function":{"name":"read","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}],
			  "tool_choice":"required","parallel_tool_calls":false,
			  "messages":[
			    {"role":"system","content":"You are terse.\n\nBe kind."},
			    {"role":"user","content":"read a"},
			    {"role":"assistant","content":"Reading.","tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}}]},
			    {"role":"tool","tool_call_id":"toolu_1","content":"A"},
			    {"role":"tool","tool_call_id":"toolu_2","content":"Error: no"},
			    {"role":"user","content":[{"type":"text","text":"here:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA"}}]}]}`,
			RequestInfo{From: Anthropic, Stream: true, Model: "claude-sonnet"}},
		{"anthropic tool choice by name, max_completion_tokens", Anthropic, RequestOptions{MaxCompletionTokens: true},
			`{"model":"m","max_tokens":5,"tools":[{"name":"a","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"a"},"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"a","input":{}}]}]}`,
			`{"model":"m","max_completion_tokens":5,"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}}],"tool_choice":{"type":"function","function":{"name":"a"}},
			  "messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"t","type":"function","function":{"name":"a","arguments":"{}"}}]}]}`,
			RequestInfo{From: Anthropic, Model: "m"}},
		{"openai to anthropic", OpenAI, RequestOptions{Model: "claude-x"},
			`{"model":"gpt","stream":true,"stream_options":{"include_usage":true},"temperature":1.5,"top_p":0.9,"stop":"END","user":"u1","parallel_tool_calls":false,
			  "tools":[{"type":"function","function":{"name":"read","description":"Read","parameters":{"type":"object"}}},{"type":"function","function":{"name":"now"}}],
			  "tool_choice":"auto",
			  "messages":[
			    {"role":"system","content":"Be terse."},{"role":"developer","content":[{"type":"text","text":"Be kind."}]},
			    {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://img.example/a.png"}}]},
			    {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}},{"id":"call_2","type":"function","function":{"name":"now","arguments":"not json"}}]},
			    {"role":"tool","tool_call_id":"call_1","content":"A"},
			    {"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"noon"}]},
			    {"role":"user","content":"thanks"}]}`,
			`{"model":"claude-x","stream":true,"max_tokens":4096,"temperature":1,"top_p":0.9,"stop_sequences":["END"],"metadata":{"user_id":"u1"},
			  "system":"Be terse.\n\nBe kind.",
			  "tools":[{"name":"read","description":"Read","input_schema":{"type":"object"}},{"name":"now","input_schema":{"type":"object","properties":{}}}],
			  "tool_choice":{"type":"auto","disable_parallel_tool_use":true},
			  "messages":[
			    {"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"url","url":"https://img.example/a.png"}}]},
			    {"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"read","input":{"path":"a"}},{"type":"tool_use","id":"call_2","name":"now","input":{"_raw":"not json"}}]},
			    {"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"A"},{"type":"tool_result","tool_use_id":"call_2","content":"noon"},{"type":"text","text":"thanks"}]}]}`,
			RequestInfo{From: OpenAI, Stream: true, IncludeUsage: true, Model: "gpt"}},
		{"openai max tokens and required tool", OpenAI, RequestOptions{},
			`{"model":"gpt","max_tokens":10,"max_completion_tokens":20,"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"a"}},"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"gpt","max_tokens":20,"tools":[{"name":"a","input_schema":{"type":"object","properties":{}}}],"tool_choice":{"type":"tool","name":"a"},"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
			RequestInfo{From: OpenAI, Model: "gpt"}},
	} {
		got, info, err := TranslateRequest(tc.from, []byte(tc.in), tc.opts)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !jsonEq(t, got, []byte(tc.want)) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, compact([]byte(tc.want)))
		}
		if info != tc.info {
			t.Errorf("%s: info %+v, want %+v", tc.name, info, tc.info)
		}
	}
}

func TestTranslateRequestRefuses(t *testing.T) {
	for _, tc := range []struct {
		from     API
		in, want string
	}{
		{OpenAI, `{"model":"m","n":2,"messages":[]}`, "n=2"},
		{OpenAI, `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, "robot"},
		{OpenAI, `[1]`, "not a chat completions request"},
		{Anthropic, `{"model":"m","messages":[{"role":"system","content":"x"}]}`, "want user or assistant"},
		{Anthropic, `{"model":"m","max_tokens":1,"tools":[{"name":"a","input_schema":{}}],"tool_choice":{"type":"maybe"},"messages":[]}`, "tool_choice.type"},
	} {
		_, _, err := TranslateRequest(tc.from, []byte(tc.in), RequestOptions{})
		re, ok := err.(*RequestError)
		if !ok || re.Status != 400 || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s: %v, want a 400 RequestError saying %q", tc.in, err, tc.want)
		}
	}
}

func TestTranslateResponse(t *testing.T) {
	for _, tc := range []struct {
		name string
		from API
		in   string
		want string
	}{
		{"openai to anthropic", OpenAI,
			`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":"Hi","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read","arguments":"{\"path\":\"a\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":9,"total_tokens":109,"prompt_tokens_details":{"cached_tokens":40}}}`,
			`{"id":"msg_chatcmpl-1","type":"message","role":"assistant","model":"gpt","content":[{"type":"text","text":"Hi"},{"type":"tool_use","id":"call_1","name":"read","input":{"path":"a"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":60,"output_tokens":9,"cache_read_input_tokens":40,"cache_creation_input_tokens":0}}`},
		{"openai length", OpenAI, `{"id":"c","model":"gpt","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"length"}]}`,
			`{"id":"msg_c","type":"message","role":"assistant","model":"gpt","content":[{"type":"text","text":"Hi"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}}`},
	} {
		got, err := TranslateResponse(tc.from, []byte(tc.in), RequestInfo{})
		if err != nil || !jsonEq(t, got, []byte(tc.want)) {
			t.Errorf("%s: %v\n got %s\nwant %s", tc.name, err, got, compact([]byte(tc.want)))
		}
	}
	// Anthropic to OpenAI has a creation time: compare what matters.
	got, err := TranslateResponse(Anthropic, []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"thinking","thinking":"x","signature":"s"},{"type":"text","text":"Hi"},{"type":"tool_use","id":"toolu_1","name":"read","input":{"path":"a"}}],"stop_reason":"tool_use","usage":{"input_tokens":60,"output_tokens":9,"cache_read_input_tokens":40,"cache_creation_input_tokens":5}}`), RequestInfo{})
	var c ChatCompletion
	if err != nil || json.Unmarshal(got, &c) != nil {
		t.Fatalf("anthropic to openai: %v %s", err, got)
	}
	want := ChatCompletion{ID: "chatcmpl-msg_1", Object: "chat.completion", Created: c.Created, Model: "claude", Choices: []ChatChoice{{Message: ChatMessage{
		Role: "assistant", Content: json.RawMessage(`"Hi"`), ToolCalls: []ChatToolCall{{ID: "toolu_1", Type: "function", Function: ChatFunctionCall{Name: "read", Arguments: `{"path":"a"}`}}},
	}, FinishReason: "tool_calls"}}, Usage: &ChatUsage{PromptTokens: 105, CompletionTokens: 9, TotalTokens: 114, PromptTokensDetails: &ChatPromptDetails{CachedTokens: 40, CacheWriteTokens: 5}}}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("anthropic to openai:\n got %+v\nwant %+v", c, want)
	}
}

func TestTranslateError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		from   API
		status int
		in     string
		want   string
	}{
		{"openai 429", OpenAI, 429, `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`,
			`{"type":"error","error":{"type":"rate_limit_error","message":"Rate limit reached"}}`},
		{"openai 500 not JSON", OpenAI, 500, `<html>oops</html>`,
			`{"type":"error","error":{"type":"api_error","message":"the upstream answered 500: <html>oops</html>"}}`},
		{"anthropic 529", Anthropic, 529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			`{"error":{"message":"Overloaded","type":"overloaded_error","param":null,"code":null}}`},
		{"anthropic 401", Anthropic, 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`,
			`{"error":{"message":"invalid x-api-key","type":"authentication_error","param":null,"code":"invalid_api_key"}}`},
	} {
		if got := TranslateError(tc.from, tc.status, []byte(tc.in)); !jsonEq(t, got, []byte(tc.want)) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// translateStream feeds body to a StreamTranslator in two writes, cut at
// cut, and returns what it wrote.
func translateStream(t *testing.T, from API, info RequestInfo, body string, cut int) string {
	t.Helper()
	var out bytes.Buffer
	st := NewStreamTranslator(from, &out, info)
	st.Write([]byte(body[:cut]))
	st.Write([]byte(body[cut:]))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// eventTypes lists the "event:" names of an Anthropic stream.
func eventTypes(s string) []string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			out = append(out, name)
		}
	}
	return out
}

// sequential is openAIStream with its tool calls one after the other, as
// OpenAI streams them: the second call's first chunk moved after the
// first call's last.
func sequential(s string) string {
	lines := strings.SplitAfter(s, "\n\n")
	for i, l := range lines {
		if strings.Contains(l, `"id":"call_2"`) {
			lines[i], lines[i+1] = lines[i+1], lines[i]
			break
		}
	}
	return strings.Join(lines, "")
}

func TestStreamTranslator(t *testing.T) {
	// A stream translated and reassembled is the turn the source stream
	// reassembles to, in the client's terms, however it is cut.
	for _, tc := range []struct {
		name   string
		from   API
		body   string
		want   Turn
		events []string
	}{
		{"openai to anthropic", OpenAI, sequential(openAIStream),
			Turn{Text: "Hello", ToolCalls: []ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a"}`}, {ID: "call_2", Name: "ls", Arguments: "{}"}}, Usage: Usage{Input: 15, Output: 7, CacheRead: 5}, StopReason: "tool_use"},
			nil},
		{"anthropic to openai", Anthropic, anthropicStream,
			Turn{Text: "Hello", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "read", Arguments: `{"path":"a"}`}, {ID: "toolu_2", Name: "ls", Arguments: "{}"}}, Usage: Usage{Input: 28, Output: 7, CacheRead: 3}, StopReason: "tool_calls"},
			nil},
	} {
		for cut := 0; cut <= len(tc.body); cut += 5 {
			out := translateStream(t, tc.from, RequestInfo{From: tc.from.Other(), Stream: true, IncludeUsage: true}, tc.body, cut)
			acc := NewAccumulator(tc.from.Other(), "text/event-stream")
			acc.Write([]byte(out))
			got, err := acc.Turn()
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%s, cut at %d: %v\n got %+v\nwant %+v\nstream:\n%s", tc.name, cut, err, got, tc.want, out)
			}
		}
	}
	// The OpenAI stream becomes Anthropic's documented event sequence.
	out := translateStream(t, OpenAI, RequestInfo{Stream: true}, sequential(openAIStream), 0)
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
		"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop"}
	if got := eventTypes(out); !reflect.DeepEqual(got, want) {
		t.Errorf("events %q,\nwant %q", got, want)
	}
	// The Anthropic stream ends as OpenAI's does; no usage chunk unless asked.
	out = translateStream(t, Anthropic, RequestInfo{Stream: true}, anthropicStream, 0)
	if !strings.HasSuffix(out, "\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n") || strings.Contains(out, "usage") {
		t.Errorf("end of the OpenAI stream:\n%s", out)
	}
}

func TestStreamTranslatorFailures(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		from       API
		want       string
	}{
		{"openai cut short", "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n", OpenAI,
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the upstream's stream ended before the response did\"}}\n\n"},
		{"openai error chunk", "data: {\"error\":{\"message\":\"busy\",\"type\":\"rate_limit_error\"}}\n\n", OpenAI,
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"busy\"}}\n\n"},
		{"openai interleaved tool calls", openAIStream, OpenAI, "the upstream interleaved the arguments of its tool calls"},
		{"openai without [DONE]", "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", OpenAI, "event: message_stop\n"},
		{"anthropic overloaded", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", Anthropic,
			"data: {\"error\":{\"message\":\"Overloaded\",\"type\":\"overloaded_error\",\"param\":null,\"code\":null}}\n\n"},
		{"anthropic cut short", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n", Anthropic,
			"stream ended before the response did"},
	} {
		if out := translateStream(t, tc.from, RequestInfo{Stream: true}, tc.body, 0); !strings.Contains(out, tc.want) {
			t.Errorf("%s: got\n%s\nwant it to hold %q", tc.name, out, tc.want)
		}
	}
}
