package proxy_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/llmwire"
	"github.com/amelia-sandbox/amelia/proxy"
)

// anthropicPost sends a messages request as Anthropic's clients do (the
// run token as x-api-key) and returns the response, read.
func anthropicPost(t *testing.T, url, token, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url, strings.NewReader(body))
	req.Header.Set("X-Api-Key", token)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	req.Header.Set("Anthropic-Beta", "fine-grained-tool-streaming-2025-05-14")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// sseEvents lists the event names of an Anthropic stream.
func sseEvents(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			out = append(out, name)
		}
	}
	return out
}

const readTool = `{"name":"read","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}`

// An Anthropic client (as Claude Code speaks) through a run whose only
// upstream speaks OpenAI's API.
func TestAnthropicClientOpenAIUpstream(t *testing.T) {
	up := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyOpenAI},
		llmtest.Turn{Text: "Let me look.", ToolCalls: []llmtest.ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a.go"}`}},
			Usage: &llmtest.Usage{PromptTokens: 50, CompletionTokens: 10, CachedTokens: 20}},
		llmtest.Turn{Text: "It declares package a.", Usage: &llmtest.Usage{PromptTokens: 70, CompletionTokens: 6}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "call_2", Name: "read", Arguments: `{"path":"b.go"}`}}, Usage: &llmtest.Usage{PromptTokens: 80, CompletionTokens: 9}},
		llmtest.Turn{Status: 429, Error: "Rate limit reached for gpt-test"},
		llmtest.Turn{Status: 500, Error: "The server had an error"},
	)
	p := newProxy(t, proxy.Options{})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey}, Model: "gpt-test", AuditDir: auditDir})
	url := p.URL + "/anthropic/v1/messages"
	first := `{"model":"claude-sonnet-4-5","max_tokens":2048,"system":"You are terse.","tools":[` + readTool + `],
		"messages":[{"role":"user","content":"What is in a.go?"}]`

	// Not streamed, with a tool call.
	resp, body := anthropicPost(t, url, run.Token(), first+`}`)
	var msg llmwire.MessagesResponse
	if err := json.Unmarshal([]byte(body), &msg); err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if msg.Type != "message" || msg.Role != "assistant" || len(msg.Content) != 2 || msg.Content[0].Type != "text" || msg.Content[0].Text != "Let me look." ||
		msg.Content[1].Type != "tool_use" || msg.Content[1].ID != "call_1" || msg.Content[1].Name != "read" || string(msg.Content[1].Input) != `{"path":"a.go"}` ||
		msg.StopReason == nil || *msg.StopReason != "tool_use" {
		t.Errorf("message %s", body)
	}
	if u := msg.Usage; u.InputTokens != 30 || u.OutputTokens != 10 || u.CacheReadInputTokens == nil || *u.CacheReadInputTokens != 20 {
		t.Errorf("usage %+v, want 30 in (50 less 20 cached), 10 out, 20 cache read", u)
	}

	// Streamed, with the tool's result.
	follow := strings.TrimSuffix(first, `]`) + `,{"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"call_1","name":"read","input":{"path":"a.go"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"package a"}]}],"stream":true}`
	resp, body = anthropicPost(t, url, run.Token(), follow)
	want := []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if got := sseEvents(body); resp.StatusCode != 200 || !slices.Equal(got, want) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d: events %q, want %q:\n%s", resp.StatusCode, got, want, body)
	}
	acc := llmwire.NewAccumulator(llmwire.Anthropic, "text/event-stream")
	acc.Write([]byte(body))
	turn, err := acc.Turn()
	if err != nil || turn.Text != "It declares package a." || turn.StopReason != "end_turn" || turn.Usage != (llmwire.Usage{Input: 70, Output: 6}) || len(turn.ToolCalls) != 0 {
		t.Errorf("streamed turn %+v, %v", turn, err)
	}

	// Streamed, a tool call.
	resp, body = anthropicPost(t, url, run.Token(), first+`,"stream":true}`)
	acc = llmwire.NewAccumulator(llmwire.Anthropic, "text/event-stream")
	acc.Write([]byte(body))
	turn, err = acc.Turn()
	if err != nil || resp.StatusCode != 200 || turn.StopReason != "tool_use" || !slices.Equal(turn.ToolCalls, []llmwire.ToolCall{{ID: "call_2", Name: "read", Arguments: `{"path":"b.go"}`}}) ||
		!strings.Contains(body, `"content_block":{"type":"tool_use","id":"call_2","name":"read","input":{}}`) {
		t.Errorf("streamed tool call %+v, %v:\n%s", turn, err, body)
	}

	// The upstream's errors, in Anthropic's shape.
	for _, tc := range []struct {
		status int
		typ    string
		stream string
	}{{429, "rate_limit_error", ""}, {500, "api_error", `,"stream":true`}} {
		resp, body = anthropicPost(t, url, run.Token(), first+tc.stream+`}`)
		var e llmwire.MessagesError
		if json.Unmarshal([]byte(body), &e) != nil || resp.StatusCode != tc.status || e.Type != "error" || e.Error.Type != tc.typ || e.Error.Message == "" {
			t.Errorf("upstream %d: %d %s", tc.status, resp.StatusCode, body)
		}
	}

	// Other Anthropic paths: 404, saying why; the models list is the run's model.
	resp, body = anthropicPost(t, p.URL+"/anthropic/v1/messages/count_tokens", run.Token(), first+`}`)
	if resp.StatusCode != 404 || !strings.Contains(body, `"not_found"`) || !strings.Contains(body, "speaks OpenAI's API") {
		t.Errorf("count_tokens: %d %s", resp.StatusCode, body)
	}
	if status, body := do(t, "GET", p.URL+"/anthropic/v1/models", run.Token(), ""); status != 200 || !strings.Contains(body, `"id":"gpt-test"`) {
		t.Errorf("models: %d %s", status, body)
	}

	// What the upstream got: OpenAI requests, with its key and the run's model.
	reqs := up.Requests()
	if len(reqs) != 5 {
		t.Fatalf("upstream got %d requests, want 5", len(reqs))
	}
	for i, r := range reqs {
		if r.Path != "/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer "+realKey || r.Header.Get("X-Api-Key") != "" ||
			r.Header.Get("Anthropic-Version") != "" || r.Header.Get("Anthropic-Beta") != "" || r.Chat.Model != "gpt-test" {
			t.Errorf("upstream request %d: %s %v model %q", i, r.Path, r.Header, r.Chat.Model)
		}
		if strings.Contains(string(r.Body), run.Token()) || strings.Contains(strings.Join(slices.Concat(slices.Collect(mapValues(r.Header))...), " "), run.Token()) {
			t.Errorf("upstream request %d holds the run token", i)
		}
	}
	r0, r1 := reqs[0].Chat, reqs[1].Chat
	if r0.Messages[0].Role != "system" || r0.Messages[0].Text() != "You are terse." || len(r0.Tools) != 1 || r0.Tools[0].Function.Name != "read" ||
		r0.MaxTokens == nil || *r0.MaxTokens != 2048 || r0.Stream {
		t.Errorf("first request %s", reqs[0].Body)
	}
	last := r1.Messages[len(r1.Messages)-1]
	if !r1.Stream || !r1.IncludeUsage() || last.Role != "tool" || last.ToolCallID != "call_1" || last.Text() != "package a" ||
		len(r1.Messages[2].ToolCalls) != 1 || r1.Messages[2].ToolCalls[0].Function.Arguments != `{"path":"a.go"}` {
		t.Errorf("follow-up request %s", reqs[1].Body)
	}

	// Usage counted as the upstream reported it; the translation noted.
	recs := readAudit(t, run)
	slices.SortFunc(recs, func(a, b proxy.Record) int { return a.Time.Compare(b.Time) })
	for i, want := range []struct{ in, out int64 }{{50, 10}, {70, 6}, {80, 9}} {
		rec := recs[i]
		if rec.Translated != "anthropic->openai" || rec.Route != "anthropic" || rec.Path != "/anthropic/v1/messages" ||
			rec.InputTokens == nil || *rec.InputTokens != want.in || rec.OutputTokens == nil || *rec.OutputTokens != want.out {
			t.Errorf("record %d: %+v (tokens %s/%s)", i, rec, shown(rec.InputTokens), shown(rec.OutputTokens))
		}
	}
	if c := recs[0].CacheReadTokens; c == nil || *c != 20 {
		t.Errorf("record 0: cache read %s, want 20", shown(c))
	}
	assertNoSecret(t, auditDir, realKey, run.Token())
}

func mapValues(h http.Header) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for _, v := range h {
			if !yield(v) {
				return
			}
		}
	}
}

// An OpenAI client (go-openai, as the worker) through a run whose only
// upstream speaks Anthropic's API.
func TestOpenAIClientAnthropicUpstream(t *testing.T) {
	up := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyAnthropic},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "read", Arguments: `{"path":"a.go"}`}}, Usage: &llmtest.Usage{PromptTokens: 40, CompletionTokens: 8, CachedTokens: 10}},
		llmtest.Turn{Text: "It declares package a.", Usage: &llmtest.Usage{PromptTokens: 60, CompletionTokens: 7, CachedTokens: 10}},
		llmtest.Turn{Status: 529, Error: "Overloaded"},
		llmtest.Turn{Status: 429, Error: "Number of request tokens has exceeded your rate limit"},
	)
	p := newProxy(t, proxy.Options{})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{Anthropic: &proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey}, Model: "claude-test", AuditDir: auditDir})
	client := openAIClient(p.URL, run.Token(), http.Header{"Openai-Organization": {"org-x"}})
	tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
		Name: "read", Description: "Read a file", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`),
	}}}
	req := openai.ChatCompletionRequest{Model: "gpt-4o", Tools: tools, Messages: []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are terse."},
		{Role: openai.ChatMessageRoleUser, Content: "What is in a.go?"},
	}}

	resp, err := client.CreateChatCompletion(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	c := resp.Choices[0]
	if c.FinishReason != openai.FinishReasonToolCalls || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].ID != "toolu_1" ||
		c.Message.ToolCalls[0].Function.Name != "read" || c.Message.ToolCalls[0].Function.Arguments != `{"path":"a.go"}` {
		t.Errorf("choice %+v", c)
	}
	if resp.Usage.PromptTokens != 40 || resp.Usage.CompletionTokens != 8 || resp.Usage.PromptTokensDetails == nil || resp.Usage.PromptTokensDetails.CachedTokens != 10 {
		t.Errorf("usage %+v", resp.Usage)
	}

	req.Messages = append(req.Messages, c.Message, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "toolu_1", Content: "package a"})
	req.Stream, req.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
	stream, err := client.CreateChatCompletionStream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var finish openai.FinishReason
	var usage *openai.Usage
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chunk.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
		}
		if chunk.Usage != nil {
			usage = chunk.Usage
		}
	}
	stream.Close()
	if text.String() != "It declares package a." || finish != openai.FinishReasonStop || usage == nil || usage.PromptTokens != 60 || usage.CompletionTokens != 7 {
		t.Errorf("stream: text %q, finish %q, usage %+v", text.String(), finish, usage)
	}

	// The upstream's errors reach go-openai in OpenAI's shape.
	for _, tc := range []struct {
		status int
		msg    string
	}{{529, "Overloaded"}, {429, "rate limit"}} {
		req.Stream, req.StreamOptions = false, nil
		_, err = client.CreateChatCompletion(t.Context(), req)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != tc.status || !strings.Contains(apiErr.Message, tc.msg) {
			t.Errorf("upstream %d: %v", tc.status, err)
		}
	}
	// n>1 is refused before the upstream sees it.
	req.N = 2
	_, err = client.CreateChatCompletion(t.Context(), req)
	if apiErr := (*openai.APIError)(nil); !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 400 || !strings.Contains(apiErr.Message, "n=2") {
		t.Errorf("n=2: %v", err)
	}
	// Other OpenAI paths: 404 saying why; the models list is the run's model.
	status, body := do(t, "POST", p.URL+"/v1/embeddings", run.Token(), `{"input":"x","model":"e"}`)
	if code, msg := apiError(t, body); status != 404 || code != "not_found" || !strings.Contains(msg, "speaks Anthropic's API") {
		t.Errorf("embeddings: %d %s", status, body)
	}
	models, err := client.ListModels(t.Context())
	if err != nil || len(models.Models) != 1 || models.Models[0].ID != "claude-test" {
		t.Errorf("models %+v, %v", models, err)
	}

	reqs := up.Requests()
	if len(reqs) != 4 {
		t.Fatalf("upstream got %d requests, want 4", len(reqs))
	}
	for i, r := range reqs {
		if r.Path != "/v1/messages" || r.Header.Get("X-Api-Key") != realKey || r.Header.Get("Anthropic-Version") != "2023-06-01" ||
			r.Header.Get("Authorization") != "" || r.Header.Get("Openai-Organization") != "" || r.Messages.Model != "claude-test" || r.Messages.MaxTokens != llmwire.DefaultMaxTokens {
			t.Errorf("upstream request %d: %s %v %s", i, r.Path, r.Header, r.Body)
		}
		if strings.Contains(string(r.Body), run.Token()) {
			t.Errorf("upstream request %d holds the run token", i)
		}
	}
	m := reqs[1].Messages
	if string(m.System) != `"You are terse."` || len(m.Messages) != 3 || !m.Stream {
		t.Fatalf("follow-up request %s", reqs[1].Body)
	}
	asst, result := m.Messages[1].Blocks(), m.Messages[2].Blocks()
	if len(asst) != 1 || asst[0]["type"] != "tool_use" || asst[0]["id"] != "toolu_1" || len(result) != 1 || result[0]["type"] != "tool_result" ||
		result[0]["tool_use_id"] != "toolu_1" || result[0]["content"] != "package a" {
		t.Errorf("follow-up messages %s", reqs[1].Body)
	}

	recs := readAudit(t, run)
	slices.SortFunc(recs, func(a, b proxy.Record) int { return a.Time.Compare(b.Time) })
	// Anthropic reported 30 in (40 less 10 cached) and 50 (60 less 10).
	for i, want := range []struct{ in, out int64 }{{30, 8}, {50, 7}} {
		rec := recs[i]
		if rec.Translated != "openai->anthropic" || rec.Route != "openai" || rec.InputTokens == nil || *rec.InputTokens != want.in ||
			rec.OutputTokens == nil || *rec.OutputTokens != want.out || rec.CacheReadTokens == nil || *rec.CacheReadTokens != 10 {
			t.Errorf("record %d: %+v (tokens %s/%s)", i, rec, shown(rec.InputTokens), shown(rec.OutputTokens))
		}
	}
	assertNoSecret(t, auditDir, realKey, run.Token())
}

// A translated stream is not buffered: each event reaches the client as
// soon as the upstream's event it comes from is complete.
func TestTranslatedStreamIsNotBuffered(t *testing.T) {
	gate := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"first\"},\"finish_reason\":null}]}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1"}})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+"/anthropic/v1/messages",
		strings.NewReader(`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", run.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	// The upstream waits at its gate: the text can only arrive if the
	// proxy translated and passed it on at once.
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("before the text delta: %v", err)
		}
		if strings.Contains(line, `"text_delta","text":"first"`) {
			break
		}
	}
	open()
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
		t.Fatalf("rest of the stream: %q, %v", rest, err)
	}
}
