package llmrelay_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/worker/llmrelay"
	"github.com/amelia-sandbox/amelia/proxy"
	"github.com/amelia-sandbox/amelia/proxy/proxytest"
)

const runModel = "run-model"

// shown collects what a relay emits.
type shown struct {
	mu   sync.Mutex
	msgs []protocol.AgenticMessage
}

func (s *shown) emit(m *protocol.AgenticMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, *m)
	return nil
}

func (s *shown) types() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t []string
	for _, m := range s.msgs {
		t = append(t, string(m.Type))
	}
	return strings.Join(t, " ")
}

// start starts a relay to the proxy at proxyURL.
func start(t *testing.T, proxyURL string, show bool, s *shown) *llmrelay.Relay {
	t.Helper()
	r, err := llmrelay.Start(llmrelay.Options{Proxy: proxyURL, Model: runModel, Show: show, Emit: s.emit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// post sends body to the relay's path with the key and reads the whole
// answer, as an agent would.
func post(t *testing.T, url, key string, header string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(header, key)
	if header == "X-Api-Key" {
		req.Header.Set("Anthropic-Version", "2023-06-01")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

var tools = []map[string]any{{"type": "function", "function": map[string]any{"name": "write", "parameters": map[string]any{"type": "object"}}}}

// An agent's chat completions, streamed and not, through the relay: the
// model becomes the run's, the answers come back as they were, and what
// the agent did is shown: the text before a tool call, the call, and its
// result from the next request; a request without tools is counted, not
// shown.
func TestRelayShowsOpenAITraffic(t *testing.T) {
	up := llmtest.New(t,
		llmtest.Turn{Text: "Writing.", ToolCalls: []llmtest.ToolCall{{ID: "call-1", Name: "write", Arguments: `{"file_path": "a.txt"}`}}, Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 3}},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 20, CompletionTokens: 2}},
		llmtest.Turn{Text: "A title", Usage: &llmtest.Usage{PromptTokens: 5, CompletionTokens: 1}},
	)
	var s shown
	r := start(t, up.URL(), true, &s)
	base := r.URL() + "/v1/chat/completions"
	user := map[string]any{"role": "user", "content": "write a.txt"}
	code, body := post(t, base, "Bearer tok", "Authorization", map[string]any{
		"model": "agent-model", "stream": true, "stream_options": map[string]any{"include_usage": true}, "tools": tools, "messages": []any{user}})
	if code != http.StatusOK || !strings.Contains(body, `"call-1"`) || !strings.Contains(body, "data: [DONE]") {
		t.Fatalf("streamed answer: %d %s", code, body)
	}
	code, body = post(t, base, "Bearer tok", "Authorization", map[string]any{
		"model": "agent-model", "tools": tools, "messages": []any{user,
			map[string]any{"role": "assistant", "content": "Writing.", "tool_calls": []any{map[string]any{"id": "call-1", "type": "function", "function": map[string]any{"name": "write", "arguments": `{"file_path": "a.txt"}`}}}},
			map[string]any{"role": "tool", "tool_call_id": "call-1", "content": "wrote a.txt"}}})
	if code != http.StatusOK || !strings.Contains(body, "Done.") {
		t.Fatalf("answer: %d %s", code, body)
	}
	if code, _ = post(t, base, "Bearer tok", "Authorization", map[string]any{"model": "agent-model", "messages": []any{user}}); code != http.StatusOK {
		t.Fatalf("title: %d", code)
	}
	r.Close()
	if got := s.types(); got != "thinking tool_call tool_result" {
		t.Fatalf("shown %q, want thinking, the call and its result", got)
	}
	call, res := s.msgs[1], s.msgs[2]
	if *s.msgs[0].Content != "Writing." || *call.ToolName != "write" || *call.ToolCallID != "call-1" || string(call.ToolInput) != `{"file_path": "a.txt"}` {
		t.Errorf("thinking %q, call %s %s %s", *s.msgs[0].Content, *call.ToolName, *call.ToolCallID, call.ToolInput)
	}
	if *res.ToolCallID != "call-1" || *res.ToolOutput != "wrote a.txt" || res.IsError {
		t.Errorf("result %+v", res)
	}
	if u := r.Usage(); u.Turns != 3 || u.Input != 35 || u.Output != 6 {
		t.Errorf("usage %+v, want 3 turns, 35 in, 6 out", u)
	}
	for i, req := range up.Requests() {
		if req.Chat.Model != runModel || req.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("request %d reached the proxy for model %q with %q", i, req.Chat.Model, req.Header.Get("Authorization"))
		}
	}
}

// The model listings agents ask for at start-up, without a key, name the
// run's model alone; nothing else is answered without the proxy.
func TestRelayListsTheRunsModel(t *testing.T) {
	up := llmtest.New(t)
	var s shown
	r := start(t, up.URL(), false, &s)
	for _, path := range []string{"/v1/models", "/api/v0/models"} {
		resp, err := http.Get(r.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Data []struct{ ID, Object, Type string }
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || len(list.Data) != 1 || list.Data[0].ID != runModel || list.Data[0].Object != "model" || list.Data[0].Type != "llm" {
			t.Errorf("%s: %+v, %v", path, list, err)
		}
	}
	if len(up.Requests()) != 0 {
		t.Error("a listing reached the proxy")
	}
}

// An agent on the Anthropic route, through the real proxy, which
// translates for an OpenAI upstream: the relay reads Anthropic's stream,
// shows the tool call, and the run's token reaches the proxy as the
// agent's key; a wrong key is the proxy's to refuse.
func TestRelayShowsAnthropicTraffic(t *testing.T) {
	up := llmtest.New(t,
		llmtest.Turn{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "call-9", Name: "write", Arguments: `{"x": 1}`}}, Usage: &llmtest.Usage{PromptTokens: 7, CompletionTokens: 4}},
	)
	proxyURL, run := proxytest.Start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1"}})
	var s shown
	r := start(t, proxyURL, true, &s)
	url := r.URL() + "/anthropic/v1/messages"
	msg := map[string]any{"model": "claude-x", "max_tokens": 100, "stream": true,
		"tools":    []any{map[string]any{"name": "write", "input_schema": map[string]any{"type": "object"}}},
		"messages": []any{map[string]any{"role": "user", "content": "look"}}}
	if code, body := post(t, url, "wrong", "X-Api-Key", msg); code != http.StatusUnauthorized {
		t.Errorf("a wrong key: %d %s", code, body)
	}
	code, body := post(t, url, run.Token(), "X-Api-Key", msg)
	if code != http.StatusOK || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("answer: %d %s", code, body)
	}
	r.Close()
	if got := s.types(); got != "thinking tool_call" {
		t.Fatalf("shown %q", got)
	}
	if c := s.msgs[1]; *c.ToolName != "write" || *c.ToolCallID != "call-9" {
		t.Errorf("call %s %s", *c.ToolName, *c.ToolCallID)
	}
	if u := r.Usage(); u.Turns != 1 || u.Input != 7 || u.Output != 4 {
		t.Errorf("usage %+v", u)
	}
	if reqs := up.Requests(); len(reqs) != 1 || reqs[0].Chat.Model != runModel {
		t.Errorf("the upstream got %d requests, the first for %q", len(reqs), reqs[0].Chat.Model)
	}
}
