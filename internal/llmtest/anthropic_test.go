package llmtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// postMessages posts body to the server's /v1/messages as Anthropic's
// clients do and returns the status and body.
func postMessages(t *testing.T, url string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/messages", strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var anthropicHeaders = map[string]string{"X-Api-Key": "sk-ant-test", "Anthropic-Version": "2023-06-01"}

func TestMessages(t *testing.T) {
	srv := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyAnthropic, ChunkSize: 4},
		llmtest.Turn{Text: "Hello there", Usage: &llmtest.Usage{PromptTokens: 30, CompletionTokens: 5, CachedTokens: 10}},
		llmtest.Turn{Text: "Hi", ToolCalls: []llmtest.ToolCall{{ID: "toolu_1", Name: "read", Arguments: `{"path":"a"}`}}, Usage: &llmtest.Usage{PromptTokens: 8, CompletionTokens: 3}},
	)
	body := `{"model":"claude-test","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`
	status, got := postMessages(t, srv.URL(), anthropicHeaders, body)
	var m struct {
		Type, Model string
		StopReason  string `json:"stop_reason"`
		Content     []struct{ Type, Text string }
		Usage       struct {
			InputTokens     int `json:"input_tokens"`
			OutputTokens    int `json:"output_tokens"`
			CacheReadTokens int `json:"cache_read_input_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(got), &m); err != nil || status != 200 {
		t.Fatalf("%d %s", status, got)
	}
	if m.Type != "message" || m.Model != "claude-test" || m.StopReason != "end_turn" || len(m.Content) != 1 || m.Content[0].Text != "Hello there" ||
		m.Usage.InputTokens != 20 || m.Usage.CacheReadTokens != 10 || m.Usage.OutputTokens != 5 {
		t.Errorf("message %+v", m)
	}

	status, got = postMessages(t, srv.URL(), anthropicHeaders, strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	var types []string
	for line := range strings.SplitSeq(got, "\n") {
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			types = append(types, name)
		}
	}
	want := "message_start ping content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if status != 200 || strings.Join(types, " ") != want {
		t.Errorf("stream %d: events %q, want %q\n%s", status, types, want, got)
	}
	for _, s := range []string{`"content_block":{"type":"text","text":""}`, `"content_block":{"type":"tool_use","id":"toolu_1","name":"read","input":{}}`,
		`"partial_json":"{\"pa"`, `"stop_reason":"tool_use"`, `"usage":{"output_tokens":3}`} {
		if !strings.Contains(got, s) {
			t.Errorf("stream lacks %s:\n%s", s, got)
		}
	}
	if reqs := srv.Requests(); len(reqs) != 2 || reqs[0].Path != "/v1/messages" || reqs[0].Messages.MaxTokens != 100 {
		t.Errorf("requests %+v", reqs)
	}

	// As Anthropic: no version, no key, bad body; and no chat completions.
	for _, tc := range []struct {
		header map[string]string
		body   string
		status int
		want   string
	}{
		{map[string]string{"X-Api-Key": "k"}, body, 400, "anthropic-version"},
		{map[string]string{"Anthropic-Version": "2023-06-01"}, body, 401, "authentication_error"},
		{anthropicHeaders, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 400, "max_tokens: Field required"},
	} {
		if status, got := postMessages(t, srv.URL(), tc.header, tc.body); status != tc.status || !strings.Contains(got, tc.want) || !strings.Contains(got, `"type":"error"`) {
			t.Errorf("%v %s: %d %s; want %d with %q", tc.header, tc.body, status, got, tc.status, tc.want)
		}
	}
	resp, err := http.Post(srv.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("chat completions on an Anthropic-only server: %d", resp.StatusCode)
	}
	openaiOnly := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyOpenAI})
	if status, _ := postMessages(t, openaiOnly.URL(), anthropicHeaders, body); status != 404 {
		t.Errorf("messages on an OpenAI-only server: %d", status)
	}
}
