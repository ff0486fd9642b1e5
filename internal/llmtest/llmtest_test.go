package llmtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

const testModel = "test-model"

func newClient(srv *Server, token string) *openai.Client {
	cfg := openai.DefaultConfig(token)
	cfg.BaseURL = srv.URL() + "/v1"
	return openai.NewClientWithConfig(cfg)
}

func userRequest(text string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:    testModel,
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}},
	}
}

// post sends body to the chat completions endpoint with plain net/http.
func post(t *testing.T, srv *Server, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(srv.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// chunk is a generic view of a streamed chunk for wire-level assertions.
type chunk struct {
	Raw     map[string]json.RawMessage
	Choices []struct {
		Index        int                        `json:"index"`
		Delta        map[string]json.RawMessage `json:"delta"`
		FinishReason *string                    `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		TotalTokens         int `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens     int  `json:"cached_tokens"`
			CacheWriteTokens *int `json:"cache_write_tokens"`
		} `json:"prompt_tokens_details"`
		Cost *float64 `json:"cost"`
	} `json:"usage"`
}

type rawToolDelta struct {
	Index    int     `json:"index"`
	ID       *string `json:"id"`
	Type     *string `json:"type"`
	Function struct {
		Name      *string `json:"name"`
		Arguments *string `json:"arguments"`
	} `json:"function"`
}

// parseSSE checks the framing of an event stream ("data: {json}\n\n" events
// ending with "data: [DONE]\n\n") and decodes its chunks.
func parseSSE(t *testing.T, body []byte) []chunk {
	t.Helper()
	s := string(body)
	if !strings.HasSuffix(s, "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with data: [DONE]: %q", s)
	}
	events := strings.Split(strings.TrimSuffix(s, "\n\n"), "\n\n")
	if events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("last event = %q", events[len(events)-1])
	}
	var out []chunk
	for _, ev := range events[:len(events)-1] {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		var c chunk
		if err := json.Unmarshal([]byte(data), &c.Raw); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		out = append(out, c)
	}
	return out
}

func streamAll(t *testing.T, client *openai.Client, req openai.ChatCompletionRequest) []openai.ChatCompletionStreamResponse {
	t.Helper()
	st, err := client.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatalf("CreateChatCompletionStream: %v", err)
	}
	defer st.Close()
	var out []openai.ChatCompletionStreamResponse
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		out = append(out, r)
	}
}

func TestStreamingText(t *testing.T) {
	tests := []struct {
		name      string
		text      string
		chunkSize int
		// maxPiece is the largest piece allowed (chunk size, or the widest
		// rune when that is wider).
		maxPiece   int
		wantPieces int
	}{
		{name: "empty", text: "", wantPieces: 0, maxPiece: 7},
		{name: "one chunk", text: "Hi!", wantPieces: 1, maxPiece: 7},
		{name: "default chunk size", text: "Hello, world! How are you today?", wantPieces: 5, maxPiece: 7},
		{name: "exact multiple", text: "abcdefghijklmn", wantPieces: 2, maxPiece: 7},
		{name: "custom chunk size", text: "abcdefghij", chunkSize: 3, wantPieces: 4, maxPiece: 3},
		{name: "multibyte on rune boundaries", text: "héllo wörld ✓ 日本語 <tag> & \"quotes\"\n", chunkSize: 4, maxPiece: 4, wantPieces: -1},
		{name: "rune wider than chunk", text: "日本語", chunkSize: 1, maxPiece: 3, wantPieces: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := NewWithOptions(t, Options{ChunkSize: tc.chunkSize}, Turn{Text: tc.text})
			resps := streamAll(t, newClient(srv, "sk-test"), userRequest("hi"))
			if len(resps) == 0 || resps[0].Choices[0].Delta.Role != openai.ChatMessageRoleAssistant {
				t.Fatalf("first chunk has no assistant role: %+v", resps)
			}
			var got strings.Builder
			pieces := 0
			var finish openai.FinishReason
			for _, r := range resps {
				if r.Model != testModel || r.Object != "chat.completion.chunk" || !strings.HasPrefix(r.ID, "chatcmpl-") {
					t.Errorf("chunk header = %q %q %q", r.ID, r.Object, r.Model)
				}
				if r.Usage != nil {
					t.Errorf("usage without include_usage: %+v", r.Usage)
				}
				c := r.Choices[0].Delta.Content
				if c != "" {
					pieces++
					if !utf8.ValidString(c) || len(c) > tc.maxPiece {
						t.Errorf("piece %q: invalid UTF-8 or longer than %d bytes", c, tc.maxPiece)
					}
				}
				got.WriteString(c)
				if r.Choices[0].FinishReason != "" {
					finish = r.Choices[0].FinishReason
				}
			}
			if got.String() != tc.text {
				t.Errorf("text = %q, want %q", got.String(), tc.text)
			}
			if tc.wantPieces >= 0 && pieces != tc.wantPieces {
				t.Errorf("%d content pieces, want %d", pieces, tc.wantPieces)
			}
			if tc.wantPieces < 0 && pieces < 2 {
				t.Errorf("%d content pieces, want several", pieces)
			}
			if finish != openai.FinishReasonStop {
				t.Errorf("finish reason = %q, want stop", finish)
			}
			if errs := srv.Errors(); len(errs) != 0 {
				t.Errorf("Errors() = %q", errs)
			}
		})
	}
}

func TestStreamingToolCalls(t *testing.T) {
	calls := []ToolCall{
		{ID: "call_abc", Name: "read_file", Arguments: `{"path":"README.md","limit":100,"note":"naïve ✓"}`},
		{Name: "shell", Arguments: `{"cmd": "ls -la", `}, // deliberately invalid JSON
		{Name: "no_args", Arguments: ""},
	}
	tests := []struct {
		name       string
		turn       Turn
		wantFinish string
	}{
		{name: "tool calls only", turn: Turn{ToolCalls: calls}, wantFinish: "tool_calls"},
		{name: "text then tool calls", turn: Turn{Text: "Let me look at that.", ToolCalls: calls}, wantFinish: "tool_calls"},
		{name: "explicit finish reason", turn: Turn{ToolCalls: calls[:1], FinishReason: "length"}, wantFinish: "length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := New(t, tc.turn, tc.turn)

			// 1. The real client reassembles the calls exactly.
			resps := streamAll(t, newClient(srv, "sk-test"), userRequest("go"))
			type acc struct{ id, typ, name, args string }
			var got []acc
			var text strings.Builder
			var finish string
			for _, r := range resps {
				if len(r.Choices) == 0 {
					continue
				}
				text.WriteString(r.Choices[0].Delta.Content)
				for _, d := range r.Choices[0].Delta.ToolCalls {
					if d.Index == nil {
						t.Fatalf("tool call delta without index: %+v", d)
					}
					for len(got) <= *d.Index {
						got = append(got, acc{})
					}
					a := &got[*d.Index]
					if d.ID != "" {
						a.id = d.ID
					}
					if d.Type != "" {
						a.typ = string(d.Type)
					}
					a.name += d.Function.Name
					a.args += d.Function.Arguments
				}
				if r.Choices[0].FinishReason != "" {
					finish = string(r.Choices[0].FinishReason)
				}
			}
			if text.String() != tc.turn.Text {
				t.Errorf("text = %q, want %q", text.String(), tc.turn.Text)
			}
			if finish != tc.wantFinish {
				t.Errorf("finish reason = %q, want %q", finish, tc.wantFinish)
			}
			if len(got) != len(tc.turn.ToolCalls) {
				t.Fatalf("got %d tool calls, want %d", len(got), len(tc.turn.ToolCalls))
			}
			for k, want := range tc.turn.ToolCalls {
				g := got[k]
				if g.name != want.Name || g.args != want.Arguments || g.typ != "function" {
					t.Errorf("call %d = %+v, want %+v", k, g, want)
				}
				if want.ID != "" && g.id != want.ID || g.id == "" {
					t.Errorf("call %d id = %q, want %q", k, g.id, want.ID)
				}
			}

			// 2. On the wire, each call starts with an id/type/name chunk with
			// empty arguments, and its arguments are split over several chunks.
			resp, body := post(t, srv, `{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			argChunks := map[int]int{}
			wireArgs := map[int]string{}
			for _, c := range parseSSE(t, body) {
				raw, ok := c.Choices[0].Delta["tool_calls"]
				if !ok {
					continue
				}
				var ds []rawToolDelta
				if err := json.Unmarshal(raw, &ds); err != nil {
					t.Fatal(err)
				}
				if len(ds) != 1 {
					t.Fatalf("want one tool call per chunk, got %s", raw)
				}
				d := ds[0]
				if d.Function.Arguments == nil {
					t.Fatalf("tool call delta without arguments: %s", raw)
				}
				if d.ID != nil { // first chunk of a call
					if d.Type == nil || *d.Type != "function" || d.Function.Name == nil || *d.Function.Name != tc.turn.ToolCalls[d.Index].Name || *d.Function.Arguments != "" {
						t.Errorf("first chunk of call %d = %s", d.Index, raw)
					}
					if _, seen := wireArgs[d.Index]; seen {
						t.Errorf("call %d started twice", d.Index)
					}
					wireArgs[d.Index] = ""
					continue
				}
				if d.Type != nil || d.Function.Name != nil {
					t.Errorf("later chunk of call %d repeats type/name: %s", d.Index, raw)
				}
				if _, seen := wireArgs[d.Index]; !seen {
					t.Errorf("arguments for call %d before its first chunk", d.Index)
				}
				argChunks[d.Index]++
				wireArgs[d.Index] += *d.Function.Arguments
			}
			for k, want := range tc.turn.ToolCalls {
				if wireArgs[k] != want.Arguments {
					t.Errorf("wire arguments of call %d = %q, want %q", k, wireArgs[k], want.Arguments)
				}
				if len(want.Arguments) > DefaultChunkSize && argChunks[k] < 2 {
					t.Errorf("call %d arguments sent in %d chunks, want several", k, argChunks[k])
				}
			}
		})
	}
}

func TestStreamingUsage(t *testing.T) {
	cost := 0.00123
	usage := &Usage{PromptTokens: 100, CompletionTokens: 20, CachedTokens: 60, CacheWriteTokens: 30, Cost: &cost}
	tests := []struct {
		name         string
		includeUsage bool
		usage        *Usage
		wantUsage    bool
	}{
		{name: "include_usage with usage", includeUsage: true, usage: usage, wantUsage: true},
		{name: "include_usage with plain usage", includeUsage: true, usage: &Usage{PromptTokens: 5, CompletionTokens: 1}, wantUsage: true},
		{name: "include_usage without usage", includeUsage: true},
		{name: "no include_usage", usage: usage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			turn := Turn{Text: "some answer text", Usage: tc.usage}
			srv := New(t, turn, turn)

			req := userRequest("hi")
			if tc.includeUsage {
				req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
			}
			resps := streamAll(t, newClient(srv, "sk-test"), req)
			for i, r := range resps[:len(resps)-1] {
				if r.Usage != nil {
					t.Errorf("chunk %d has usage", i)
				}
			}
			last := resps[len(resps)-1]
			if !tc.wantUsage {
				if last.Usage != nil {
					t.Errorf("last chunk has usage %+v", last.Usage)
				}
			} else {
				if last.Usage == nil || len(last.Choices) != 0 {
					t.Fatalf("last chunk = %+v, want usage and no choices", last)
				}
				u := last.Usage
				if u.PromptTokens != tc.usage.PromptTokens || u.CompletionTokens != tc.usage.CompletionTokens ||
					u.TotalTokens != tc.usage.PromptTokens+tc.usage.CompletionTokens ||
					u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != tc.usage.CachedTokens {
					t.Errorf("usage = %+v, want %+v", u, tc.usage)
				}
			}

			// On the wire: "usage" is null on every chunk but the last when
			// include_usage is set, and absent otherwise; the extension
			// fields appear only when set.
			body := fmt.Sprintf(`{"model":"m","stream":true,"stream_options":{"include_usage":%t},"messages":[{"role":"user","content":"hi"}]}`, tc.includeUsage)
			_, raw := post(t, srv, body)
			chunks := parseSSE(t, raw)
			for i, c := range chunks {
				u, present := c.Raw["usage"]
				isLast := i == len(chunks)-1
				switch {
				case !tc.includeUsage && present:
					t.Errorf("chunk %d has usage %s without include_usage", i, u)
				case tc.includeUsage && !present:
					t.Errorf("chunk %d has no usage key", i)
				case tc.includeUsage && !(isLast && tc.wantUsage) && string(u) != "null":
					t.Errorf("chunk %d usage = %s, want null", i, u)
				}
			}
			if tc.wantUsage {
				last := chunks[len(chunks)-1]
				if string(last.Raw["choices"]) != "[]" {
					t.Errorf("usage chunk choices = %s, want []", last.Raw["choices"])
				}
				u := last.Usage
				if (u.Cost != nil) != (tc.usage.Cost != nil) || u.Cost != nil && *u.Cost != *tc.usage.Cost {
					t.Errorf("cost = %v, want %v", u.Cost, tc.usage.Cost)
				}
				wantCW := tc.usage.CacheWriteTokens
				if (u.PromptTokensDetails.CacheWriteTokens != nil) != (wantCW != 0) || wantCW != 0 && *u.PromptTokensDetails.CacheWriteTokens != wantCW {
					t.Errorf("cache_write_tokens = %v, want %d", u.PromptTokensDetails.CacheWriteTokens, wantCW)
				}
			}
		})
	}
}

func TestNonStreaming(t *testing.T) {
	cost := 0.5
	tests := []struct {
		name        string
		turn        Turn
		wantContent string // raw JSON of choices[0].message.content
		wantFinish  string
	}{
		{name: "text", turn: Turn{Text: "Hello <world> & co"}, wantContent: `"Hello <world> & co"`, wantFinish: "stop"},
		{name: "empty text", turn: Turn{}, wantContent: `""`, wantFinish: "stop"},
		{name: "tool calls", turn: Turn{ToolCalls: []ToolCall{{ID: "call_1", Name: "f", Arguments: `{"a":1}`}, {Name: "g", Arguments: `not json`}}}, wantContent: `null`, wantFinish: "tool_calls"},
		{name: "text and tool calls", turn: Turn{Text: "ok", ToolCalls: []ToolCall{{Name: "f", Arguments: `{}`}}}, wantContent: `"ok"`, wantFinish: "tool_calls"},
		{name: "usage", turn: Turn{Text: "x", Usage: &Usage{PromptTokens: 10, CompletionTokens: 2, CachedTokens: 4, CacheWriteTokens: 3, Cost: &cost}}, wantContent: `"x"`, wantFinish: "stop"},
		{name: "finish reason", turn: Turn{Text: "trunc", FinishReason: "length"}, wantContent: `"trunc"`, wantFinish: "length"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := New(t, tc.turn, tc.turn)
			resp, err := newClient(srv, "sk-test").CreateChatCompletion(context.Background(), userRequest("hi"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Object != "chat.completion" || resp.Model != testModel || !strings.HasPrefix(resp.ID, "chatcmpl-") || len(resp.Choices) != 1 {
				t.Fatalf("response = %+v", resp)
			}
			ch := resp.Choices[0]
			if ch.Message.Role != "assistant" || ch.Message.Content != tc.turn.Text || string(ch.FinishReason) != tc.wantFinish {
				t.Errorf("choice = %+v", ch)
			}
			if len(ch.Message.ToolCalls) != len(tc.turn.ToolCalls) {
				t.Fatalf("tool calls = %+v", ch.Message.ToolCalls)
			}
			for k, want := range tc.turn.ToolCalls {
				g := ch.Message.ToolCalls[k]
				if g.Type != "function" || g.Function.Name != want.Name || g.Function.Arguments != want.Arguments || g.ID == "" || want.ID != "" && g.ID != want.ID {
					t.Errorf("tool call %d = %+v, want %+v", k, g, want)
				}
			}
			if u := tc.turn.Usage; u != nil {
				g := resp.Usage
				if g.PromptTokens != u.PromptTokens || g.CompletionTokens != u.CompletionTokens || g.TotalTokens != u.PromptTokens+u.CompletionTokens ||
					g.PromptTokensDetails == nil || g.PromptTokensDetails.CachedTokens != u.CachedTokens {
					t.Errorf("usage = %+v, want %+v", g, u)
				}
			}

			// Wire-level checks.
			hr, raw := post(t, srv, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
			if ct := hr.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
			var w struct {
				Choices []struct {
					Message map[string]json.RawMessage `json:"message"`
				} `json:"choices"`
				Usage             map[string]json.RawMessage `json:"usage"`
				SystemFingerprint json.RawMessage            `json:"system_fingerprint"`
			}
			if err := json.Unmarshal(raw, &w); err != nil {
				t.Fatal(err)
			}
			if got := string(w.Choices[0].Message["content"]); got != tc.wantContent {
				t.Errorf("content = %s, want %s", got, tc.wantContent)
			}
			if _, has := w.Choices[0].Message["tool_calls"]; has != (len(tc.turn.ToolCalls) > 0) {
				t.Errorf("tool_calls present = %v", has)
			}
			if string(w.SystemFingerprint) != "null" {
				t.Errorf("system_fingerprint = %s", w.SystemFingerprint)
			}
			if tc.turn.Usage == nil {
				if w.Usage != nil {
					t.Errorf("usage = %v, want none", w.Usage)
				}
			} else {
				if string(w.Usage["cost"]) != "0.5" || !strings.Contains(string(w.Usage["prompt_tokens_details"]), `"cache_write_tokens":3`) {
					t.Errorf("usage = %v", w.Usage)
				}
			}
		})
	}
}

func TestStatusTurns(t *testing.T) {
	tests := []struct {
		name     string
		turn     Turn
		wantMsg  string
		wantType string
		wantCode any // go-openai decodes a null code as the int 0
	}{
		{name: "unauthorized", turn: Turn{Status: 401, Error: "Incorrect API key provided"}, wantMsg: "Incorrect API key provided", wantType: "invalid_request_error", wantCode: "invalid_api_key"},
		{name: "rate limited", turn: Turn{Status: 429, Error: "Rate limit reached"}, wantMsg: "Rate limit reached", wantType: "requests", wantCode: "rate_limit_exceeded"},
		{name: "bad request", turn: Turn{Status: 400, Error: "context too long"}, wantMsg: "context too long", wantType: "invalid_request_error", wantCode: 0},
		{name: "server error default message", turn: Turn{Status: 503}, wantMsg: "Service Unavailable", wantType: "server_error", wantCode: 0},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%t", tc.name, stream), func(t *testing.T) {
				srv := New(t, tc.turn)
				client := newClient(srv, "sk-test")
				var err error
				if stream {
					var st *openai.ChatCompletionStream
					st, err = client.CreateChatCompletionStream(context.Background(), userRequest("hi"))
					if err == nil {
						st.Close()
					}
				} else {
					_, err = client.CreateChatCompletion(context.Background(), userRequest("hi"))
				}
				var apiErr *openai.APIError
				if !errors.As(err, &apiErr) {
					t.Fatalf("err = %v (%T), want *openai.APIError", err, err)
				}
				if apiErr.HTTPStatusCode != tc.turn.Status || apiErr.Message != tc.wantMsg || apiErr.Type != tc.wantType || !reflect.DeepEqual(apiErr.Code, tc.wantCode) {
					t.Errorf("APIError = %+v (code %#v)", apiErr, apiErr.Code)
				}
				if errs := srv.Errors(); len(errs) != 0 {
					t.Errorf("Errors() = %q", errs)
				}
			})
		}
	}
}

func TestScriptExhausted(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			srv := New(t, Turn{Text: "only"})
			client := newClient(srv, "sk-test")
			if _, err := client.CreateChatCompletion(context.Background(), userRequest("1")); err != nil {
				t.Fatal(err)
			}
			var err error
			if stream {
				var st *openai.ChatCompletionStream
				if st, err = client.CreateChatCompletionStream(context.Background(), userRequest("2")); err == nil {
					st.Close()
				}
			} else {
				_, err = client.CreateChatCompletion(context.Background(), userRequest("2"))
			}
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 500 || !strings.Contains(apiErr.Message, "script exhausted") {
				t.Fatalf("err = %v, want a 500 APIError about the exhausted script", err)
			}
			errs := srv.Errors()
			if len(errs) != 1 || !strings.Contains(errs[0], "script exhausted") {
				t.Errorf("Errors() = %q", errs)
			}
			if n := len(srv.Requests()); n != 2 {
				t.Errorf("%d requests recorded, want 2", n)
			}
		})
	}
}

func TestRequestsRecorded(t *testing.T) {
	srv := New(t, Turn{Text: "a"}, Turn{Text: "b"})
	client := newClient(srv, "sk-secret-123")
	params := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)
	maxTokens := 50
	req := openai.ChatCompletionRequest{
		Model: "vendor/model-x",
		Messages: []openai.ChatCompletionMessage{
			{Role: "system", Content: "be brief"},
			{Role: "user", MultiContent: []openai.ChatMessagePart{{Type: "text", Text: "read "}, {Type: "text", Text: "it"}}},
			{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "call_1", Type: "function", Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"a.go"}`}}}},
			{Role: "tool", ToolCallID: "call_1", Name: "read_file", Content: "package a"},
		},
		Tools: []openai.Tool{{Type: "function", Function: &openai.FunctionDefinition{
			Name: "read_file", Description: "Read a file", Parameters: params,
		}}},
		ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject},
		//lint:ignore SA1019 clients still send max_tokens; the server must record it
		MaxTokens:     maxTokens,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	}
	streamAll(t, client, req)
	if _, err := client.CreateChatCompletion(context.Background(), userRequest("second")); err != nil {
		t.Fatal(err)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	r := reqs[0]
	if got := r.Header.Get("Authorization"); got != "Bearer sk-secret-123" {
		t.Errorf("Authorization = %q", got)
	}
	if !json.Valid(r.Body) || !bytes.Contains(r.Body, []byte(`"vendor/model-x"`)) {
		t.Errorf("Body = %s", r.Body)
	}
	c := r.Chat
	if c.Model != "vendor/model-x" || !c.Stream || !c.IncludeUsage() || c.MaxTokens == nil || *c.MaxTokens != maxTokens {
		t.Errorf("Chat = %+v", c)
	}
	if !bytes.Contains(c.ResponseFormat, []byte(`"json_object"`)) {
		t.Errorf("ResponseFormat = %s", c.ResponseFormat)
	}
	if _, ok := c.Fields["max_tokens"]; !ok {
		t.Errorf("Fields = %v", c.Fields)
	}
	if len(c.Messages) != 4 {
		t.Fatalf("messages = %+v", c.Messages)
	}
	m := c.Messages
	if m[0].Role != "system" || m[0].Content == nil || *m[0].Content != "be brief" {
		t.Errorf("system message = %+v", m[0])
	}
	if m[1].Role != "user" || m[1].Text() != "read it" || len(m[1].Parts) != 2 || m[1].Parts[1].Text != "it" {
		t.Errorf("user message = %+v", m[1])
	}
	if m[2].Role != "assistant" || m[2].Content != nil || len(m[2].ToolCalls) != 1 {
		t.Errorf("assistant message = %+v", m[2])
	} else if tc := m[2].ToolCalls[0]; tc.ID != "call_1" || tc.Type != "function" || tc.Function.Name != "read_file" || tc.Function.Arguments != `{"path":"a.go"}` {
		t.Errorf("assistant tool call = %+v", tc)
	}
	if m[3].Role != "tool" || m[3].ToolCallID != "call_1" || m[3].Name != "read_file" || m[3].Text() != "package a" {
		t.Errorf("tool message = %+v", m[3])
	}
	if len(c.Tools) != 1 {
		t.Fatalf("tools = %+v", c.Tools)
	}
	tool := c.Tools[0]
	var gotParams, wantParams any
	_ = json.Unmarshal(tool.Function.Parameters, &gotParams)
	_ = json.Unmarshal(params, &wantParams)
	if tool.Type != "function" || tool.Function.Name != "read_file" || tool.Function.Description != "Read a file" || !reflect.DeepEqual(gotParams, wantParams) {
		t.Errorf("tool = %+v (parameters %s)", tool, tool.Function.Parameters)
	}
	if reqs[1].Chat.Stream || reqs[1].Chat.Messages[0].Text() != "second" {
		t.Errorf("second request = %+v", reqs[1].Chat)
	}

	// Requests returns a copy.
	reqs[0].Header.Set("Authorization", "changed")
	reqs[0].Body[0] = 'X'
	if again := srv.Requests()[0]; again.Header.Get("Authorization") != "Bearer sk-secret-123" || again.Body[0] != '{' {
		t.Errorf("Requests() exposes internal state")
	}
}

func TestBadRequests(t *testing.T) {
	tests := []struct {
		name string
		body string
	}{
		{name: "invalid JSON", body: `{"model":`},
		{name: "not an object", body: `[1,2]`},
		{name: "missing model", body: `{"messages":[{"role":"user","content":"hi"}]}`},
		{name: "empty model", body: `{"model":"","messages":[{"role":"user","content":"hi"}]}`},
		{name: "missing messages", body: `{"model":"m"}`},
		{name: "empty messages", body: `{"model":"m","messages":[]}`},
		{name: "message without role", body: `{"model":"m","messages":[{"content":"hi"}]}`},
		{name: "content of wrong type", body: `{"model":"m","messages":[{"role":"user","content":42}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := New(t, Turn{Text: "first turn"})
			resp, body := post(t, srv, tc.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400", resp.StatusCode)
			}
			var e struct {
				Error map[string]json.RawMessage `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := e.Error[k]; !ok {
					t.Errorf("error body %s lacks %q", body, k)
				}
			}
			if string(e.Error["type"]) != `"invalid_request_error"` {
				t.Errorf("type = %s", e.Error["type"])
			}
			if len(srv.Errors()) != 1 || len(srv.Requests()) != 1 || string(srv.Requests()[0].Body) != tc.body {
				t.Errorf("Errors() = %q, Requests() = %d", srv.Errors(), len(srv.Requests()))
			}
			// A bad request does not use up a turn.
			got, err := newClient(srv, "k").CreateChatCompletion(context.Background(), userRequest("hi"))
			if err != nil || got.Choices[0].Message.Content != "first turn" {
				t.Errorf("next request: %v, %+v", err, got)
			}
		})
	}
}

func TestOtherRoutes(t *testing.T) {
	srv := New(t)
	models, err := newClient(srv, "k").ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(models.Models) != 1 || models.Models[0].ID != ModelID || models.Models[0].Object != "model" {
		t.Errorf("models = %+v", models)
	}

	for _, tc := range []struct{ method, path string }{
		{"GET", "/v1/chat/completions"},
		{"POST", "/v1/models"},
		{"POST", "/chat/completions"},
		{"POST", "/v1/completions"},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL()+tc.path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 || !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, body)
		}
	}
	if n := len(srv.Errors()); n != 4 {
		t.Errorf("Errors() = %q", srv.Errors())
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("%d requests recorded", n)
	}
}

func TestRawSSE(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr bool // go-openai fails while reading the stream
	}{
		{name: "truncated JSON", raw: "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"id\":\n\n", wantErr: true},
		{name: "no DONE", raw: "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"},
		{name: "error event", raw: "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := New(t, Turn{RawSSE: tc.raw}, Turn{RawSSE: tc.raw}, Turn{RawSSE: tc.raw})
			for _, reqBody := range []string{
				`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
				`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
			} {
				resp, body := post(t, srv, reqBody)
				if string(body) != tc.raw || resp.Header.Get("Content-Type") != "text/event-stream" {
					t.Errorf("got %q (%s), want %q verbatim", body, resp.Header.Get("Content-Type"), tc.raw)
				}
			}

			st, err := newClient(srv, "k").CreateChatCompletionStream(context.Background(), userRequest("hi"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var lastErr error
			for {
				if _, lastErr = st.Recv(); lastErr != nil {
					break
				}
			}
			if gotErr := !errors.Is(lastErr, io.EOF); gotErr != tc.wantErr {
				t.Errorf("stream ended with %v, wantErr %v", lastErr, tc.wantErr)
			}
		})
	}
}

func TestScript(t *testing.T) {
	srv := NewWithOptions(t, Options{ChunkSize: 2, Script: func(i int, req *Request) Turn {
		last := req.Chat.Messages[len(req.Chat.Messages)-1]
		if last.Text() == "fail" {
			return Turn{Status: 500, Error: "boom"}
		}
		return Turn{Text: fmt.Sprintf("%d:%s:%s", i, req.Header.Get("Authorization"), last.Text())}
	}})
	client := newClient(srv, "tok")
	for i, msg := range []string{"a", "bb", "ccc"} {
		var got strings.Builder
		for _, r := range streamAll(t, client, userRequest(msg)) {
			got.WriteString(r.Choices[0].Delta.Content)
		}
		if want := fmt.Sprintf("%d:Bearer tok:%s", i, msg); got.String() != want {
			t.Errorf("reply %d = %q, want %q", i, got.String(), want)
		}
	}
	_, err := client.CreateChatCompletion(context.Background(), userRequest("fail"))
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.Message != "boom" {
		t.Errorf("err = %v", err)
	}
}

// With Forget the server keeps no request however long the conversation
// grows (each request holds all of it, so kept they would grow with the
// square of its turns), and a Script still gets each one decoded; with
// Light too, it decodes only what answering needs.
func TestForget(t *testing.T) {
	for _, light := range []bool{false, true} {
		t.Run(fmt.Sprintf("light=%v", light), func(t *testing.T) {
			srv := NewWithOptions(t, Options{Forget: true, Light: light, Script: func(i int, req *Request) Turn {
				msgs := req.Chat.Messages
				if len(msgs) == 0 {
					return Turn{Text: fmt.Sprintf("%d: no messages", i)}
				}
				return Turn{Text: fmt.Sprintf("%d: %d messages, the last %.6s", i, len(msgs), msgs[len(msgs)-1].Text())}
			}})
			client := newClient(srv, "k")
			const turns = 100
			var conv []openai.ChatCompletionMessage
			for i := range turns {
				ask := fmt.Sprintf("ask%03d", i) + strings.Repeat(".", 1<<10)
				conv = append(conv, openai.ChatCompletionMessage{Role: "user", Content: ask})
				resp, err := client.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: testModel, Messages: conv})
				if err != nil {
					t.Fatal(err)
				}
				got := resp.Choices[0].Message.Content
				want := fmt.Sprintf("%d: %d messages, the last %.6s", i, len(conv), ask)
				if light {
					want = fmt.Sprintf("%d: no messages", i)
				}
				if got != want {
					t.Fatalf("answer %d: %q, want %q", i, got, want)
				}
				conv = append(conv, openai.ChatCompletionMessage{Role: "assistant", Content: got})
			}
			if n := len(srv.Requests()); n != 0 {
				t.Errorf("%d of %d requests kept, want none", n, turns)
			}
			if errs := srv.Errors(); len(errs) != 0 {
				t.Errorf("server errors: %v", errs)
			}
		})
	}
}

func TestConcurrentRequests(t *testing.T) {
	const n = 16
	srv := NewWithOptions(t, Options{Script: func(i int, req *Request) Turn {
		return Turn{Text: "echo " + req.Chat.Messages[0].Text(), Usage: &Usage{PromptTokens: i}}
	}})
	client := newClient(srv, "k")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range n {
		wg.Go(func() {
			msg := fmt.Sprint(g)
			if g%2 == 0 {
				resp, err := client.CreateChatCompletion(context.Background(), userRequest(msg))
				if err == nil && resp.Choices[0].Message.Content != "echo "+msg {
					err = fmt.Errorf("got %q", resp.Choices[0].Message.Content)
				}
				errs <- err
				return
			}
			st, err := client.CreateChatCompletionStream(context.Background(), userRequest(msg))
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			var got strings.Builder
			for {
				r, err := st.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					errs <- err
					return
				}
				got.WriteString(r.Choices[0].Delta.Content)
			}
			if got.String() != "echo "+msg {
				errs <- fmt.Errorf("got %q", got.String())
				return
			}
			errs <- nil
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := len(srv.Requests()); got != n {
		t.Errorf("%d requests recorded, want %d", got, n)
	}
	if srv.HandlerTime() <= 0 {
		t.Errorf("HandlerTime = %v", srv.HandlerTime())
	}
}

// TestStreamWireFormat pins the exact shape of each streamed chunk.
func TestStreamWireFormat(t *testing.T) {
	srv := New(t, Turn{Text: "Hello there", ToolCalls: []ToolCall{{ID: "call_x", Name: "f", Arguments: `{"k":"v"}`}}, Usage: &Usage{PromptTokens: 3, CompletionTokens: 4}})
	resp, body := post(t, srv, `{"model":"the-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	chunks := parseSSE(t, body)
	var deltas []string
	var id string
	for i, c := range chunks {
		for _, k := range []string{"id", "object", "created", "model", "system_fingerprint", "choices", "usage"} {
			if _, ok := c.Raw[k]; !ok {
				t.Errorf("chunk %d lacks %q", i, k)
			}
		}
		if i == 0 {
			id = string(c.Raw["id"])
		}
		if string(c.Raw["id"]) != id || string(c.Raw["object"]) != `"chat.completion.chunk"` || string(c.Raw["model"]) != `"the-model"` || string(c.Raw["system_fingerprint"]) != "null" {
			t.Errorf("chunk %d header: %v", i, c.Raw)
		}
		if i == len(chunks)-1 {
			continue // usage chunk
		}
		var choices []map[string]json.RawMessage
		if err := json.Unmarshal(c.Raw["choices"], &choices); err != nil || len(choices) != 1 {
			t.Fatalf("chunk %d choices = %s", i, c.Raw["choices"])
		}
		ch := choices[0]
		if string(ch["index"]) != "0" || string(ch["logprobs"]) != "null" {
			t.Errorf("chunk %d choice = %v", i, ch)
		}
		wantFinish := "null"
		if i == len(chunks)-2 {
			wantFinish = `"tool_calls"`
		}
		if string(ch["finish_reason"]) != wantFinish {
			t.Errorf("chunk %d finish_reason = %s, want %s", i, ch["finish_reason"], wantFinish)
		}
		deltas = append(deltas, string(ch["delta"]))
	}
	want := []string{
		`{"role":"assistant","content":"","refusal":null}`,
		`{"content":"Hello t"}`,
		`{"content":"here"}`,
		`{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"f","arguments":""}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"{\"k\":\"v"}}]}`,
		`{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]}`,
		`{}`,
	}
	if !reflect.DeepEqual(deltas, want) {
		t.Errorf("deltas:\n%s\nwant:\n%s", strings.Join(deltas, "\n"), strings.Join(want, "\n"))
	}
	last := chunks[len(chunks)-1]
	if got, want := string(last.Raw["usage"]), `{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}`; got != want {
		t.Errorf("usage = %s, want %s", got, want)
	}
}

func TestSplitChunks(t *testing.T) {
	tests := []struct {
		s    string
		n    int
		want []string
	}{
		{"", 7, nil},
		{"abc", 7, []string{"abc"}},
		{"abcdefg", 7, []string{"abcdefg"}},
		{"abcdefgh", 7, []string{"abcdefg", "h"}},
		{"aé", 2, []string{"a", "é"}},
		{"日本語", 4, []string{"日", "本", "語"}},
		{"日本語", 6, []string{"日本", "語"}},
		{"✓", 1, []string{"✓"}},
	}
	for _, tc := range tests {
		if got := splitChunks(tc.s, tc.n); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitChunks(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
