package cliagent

// Scripted upstreams for the stand-ins' end-to-end tests: the Anthropic
// Messages API, the OpenAI Responses API and the Gemini API, each
// streaming (server-sent events) as its published reference describes.
// internal/llmtest serves only chat completions today; once it serves
// /v1/messages, the claude test can take its server instead.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// call is a tool call the scripted model makes.
type call struct{ ID, Name, Args string }

// turn is the scripted answer to one request.
type turn struct {
	Thinking, Text string
	Calls          []call
	// Status, when set, is an error answer with Error as its message.
	Status int
	Error  string
}

// turnUsage is what every turn reports.
const turnIn, turnOut, turnCached = 100, 10, 40

// request is a request a scripted server received.
type request struct {
	Path   string
	Header http.Header
	Body   string
}

// scripted is a scripted LLM server of one API.
type scripted struct {
	srv *httptest.Server

	mu    sync.Mutex
	turns []turn
	reqs  []request
	errs  []string
}

// newScripted starts a server answering requests whose path ends in
// suffix with turns, written by write.
func newScripted(t *testing.T, suffix string, write func(w http.ResponseWriter, i int, tu turn), turns ...turn) *scripted {
	s := &scripted{turns: turns}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, request{Path: r.URL.Path, Header: r.Header.Clone(), Body: string(body)})
		i := len(s.reqs) - 1
		ok := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, suffix) && json.Valid(body) && i < len(s.turns)
		if !ok {
			s.errs = append(s.errs, fmt.Sprintf("unexpected request %d: %s %s", i, r.Method, r.URL.Path))
		}
		s.mu.Unlock()
		if !ok {
			http.Error(w, "not scripted", http.StatusNotFound)
			return
		}
		tu := s.turns[i]
		if tu.Status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(tu.Status)
			fmt.Fprintf(w, `{"error":{"message":%q,"type":"authentication_error"}}`, tu.Error)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		write(w, i, tu)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *scripted) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.reqs...)
}

func (s *scripted) errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}

// sse writes one server-sent event; event "" writes only data.
func sse(w http.ResponseWriter, event string, data any) {
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	b, _ := json.Marshal(data)
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

type obj = map[string]any

// writeAnthropic streams a turn as a Messages API response.
func writeAnthropic(w http.ResponseWriter, i int, tu turn) {
	sse(w, "message_start", obj{"type": "message_start", "message": obj{
		"id": fmt.Sprintf("msg_%d", i), "type": "message", "role": "assistant", "model": "scripted", "content": []any{},
		"stop_reason": nil, "usage": obj{"input_tokens": turnIn, "output_tokens": 1, "cache_read_input_tokens": turnCached, "cache_creation_input_tokens": 0},
	}})
	k := 0
	block := func(start obj, deltas ...obj) {
		sse(w, "content_block_start", obj{"type": "content_block_start", "index": k, "content_block": start})
		for _, d := range deltas {
			sse(w, "content_block_delta", obj{"type": "content_block_delta", "index": k, "delta": d})
		}
		sse(w, "content_block_stop", obj{"type": "content_block_stop", "index": k})
		k++
	}
	if tu.Thinking != "" {
		block(obj{"type": "thinking", "thinking": ""}, obj{"type": "thinking_delta", "thinking": tu.Thinking}, obj{"type": "signature_delta", "signature": "sig"})
	}
	if tu.Text != "" {
		half := len(tu.Text) / 2
		block(obj{"type": "text", "text": ""}, obj{"type": "text_delta", "text": tu.Text[:half]}, obj{"type": "text_delta", "text": tu.Text[half:]})
	}
	for _, c := range tu.Calls {
		block(obj{"type": "tool_use", "id": c.ID, "name": c.Name, "input": obj{}}, obj{"type": "input_json_delta", "partial_json": c.Args})
	}
	stop := "end_turn"
	if len(tu.Calls) > 0 {
		stop = "tool_use"
	}
	sse(w, "message_delta", obj{"type": "message_delta", "delta": obj{"stop_reason": stop, "stop_sequence": nil}, "usage": obj{"output_tokens": turnOut}})
	sse(w, "message_stop", obj{"type": "message_stop"})
}

// writeResponses streams a turn as a Responses API response.
func writeResponses(w http.ResponseWriter, i int, tu turn) {
	id := fmt.Sprintf("resp_%d", i)
	sse(w, "response.created", obj{"type": "response.created", "response": obj{"id": id, "status": "in_progress"}})
	n := 0
	item := func(it obj) {
		sse(w, "response.output_item.added", obj{"type": "response.output_item.added", "output_index": n, "item": it})
		sse(w, "response.output_item.done", obj{"type": "response.output_item.done", "output_index": n, "item": it})
		n++
	}
	if tu.Thinking != "" {
		item(obj{"type": "reasoning", "id": fmt.Sprintf("rs_%d", i), "summary": []obj{{"type": "summary_text", "text": tu.Thinking}}})
	}
	if tu.Text != "" {
		item(obj{"type": "message", "id": fmt.Sprintf("msg_%d", i), "role": "assistant", "status": "completed",
			"content": []obj{{"type": "output_text", "text": tu.Text, "annotations": []any{}}}})
	}
	for _, c := range tu.Calls {
		item(obj{"type": "function_call", "id": "fc_" + c.ID, "call_id": c.ID, "name": c.Name, "arguments": c.Args, "status": "completed"})
	}
	sse(w, "response.completed", obj{"type": "response.completed", "response": obj{"id": id, "status": "completed", "usage": obj{
		"input_tokens": turnIn, "input_tokens_details": obj{"cached_tokens": turnCached}, "output_tokens": turnOut, "total_tokens": turnIn + turnOut,
	}}})
}

// writeGemini streams a turn as a streamGenerateContent response.
func writeGemini(w http.ResponseWriter, _ int, tu turn) {
	chunk := func(parts []obj, last bool) {
		c := obj{"candidates": []obj{{"content": obj{"role": "model", "parts": parts}, "index": 0}}}
		if last {
			c["candidates"].([]obj)[0]["finishReason"] = "STOP"
			c["usageMetadata"] = obj{"promptTokenCount": turnIn, "candidatesTokenCount": turnOut, "cachedContentTokenCount": turnCached, "totalTokenCount": turnIn + turnOut}
		}
		sse(w, "", c)
	}
	if tu.Thinking != "" {
		chunk([]obj{{"text": tu.Thinking, "thought": true}}, false)
	}
	if tu.Text != "" {
		half := len(tu.Text) / 2
		chunk([]obj{{"text": tu.Text[:half]}}, false)
		chunk([]obj{{"text": tu.Text[half:]}}, false)
	}
	var calls []obj
	for _, c := range tu.Calls {
		calls = append(calls, obj{"functionCall": obj{"name": c.Name, "args": json.RawMessage(c.Args)}})
	}
	chunk(calls, true)
}
