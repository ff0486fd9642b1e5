package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/proxy"
)

// The host's Gemini API key: only the test upstreams may ever see it.
const realGeminiKey = "AIza-real-gemini-key-5c1e07"

// geminiBody is a generateContent request as Gemini CLI sends it.
const geminiBody = `{"contents":[{"role":"user","parts":[{"text":"hello"}]}],"systemInstruction":{"role":"user","parts":[{"text":"be brief"}]},
	"tools":[{"functionDeclarations":[{"name":"run_shell_command","parametersJsonSchema":{"type":"object"}}]}]}`

// gemini sends a request on the proxy's Gemini route with header set,
// and returns the response; its body is closed when the test ends.
func (p *testProxy) gemini(t *testing.T, method, path string, header http.Header, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, p.URL+"/gemini"+path, strings.NewReader(body))
	for k, vs := range header {
		req.Header[k] = vs
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// googleError is Google's error body.
type googleError struct {
	Error struct {
		Code    int
		Message string
		Status  string
	}
}

func decodeGoogleError(t *testing.T, resp *http.Response) googleError {
	t.Helper()
	body := readBody(t, resp)
	var e googleError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != resp.StatusCode || e.Error.Status == "" || e.Error.Message == "" {
		t.Errorf("not Google's error shape (%v): %d %s", err, resp.StatusCode, body)
	}
	return e
}

// Gemini's API through the proxy: a stream comes back event by event, a
// plain answer and the models list as they are; the upstream sees the
// host's key and never the run token, whichever way the client sent it;
// the audit log counts each answer's usageMetadata.
func TestGeminiThroughTheProxy(t *testing.T) {
	usage := &llmtest.Usage{PromptTokens: 120, CompletionTokens: 12, CachedTokens: 64}
	up := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyGemini, ChunkSize: 5},
		llmtest.Turn{Text: "I'll look.", ToolCalls: []llmtest.ToolCall{{Name: "run_shell_command", Arguments: `{"command":"ls"}`}}, Usage: usage},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 150, CompletionTokens: 3}},
		llmtest.Turn{Text: "As an array.", Usage: &llmtest.Usage{PromptTokens: 9, CompletionTokens: 4}},
	)
	p := newProxy(t, proxy.Options{})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{
		OpenAI:   proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey},
		Gemini:   &proxy.Upstream{BaseURL: up.URL(), Key: realGeminiKey},
		AuditDir: auditDir,
	})
	goog := http.Header{"X-Goog-Api-Key": {run.Token()}, "X-Goog-Api-Client": {"google-genai-sdk/1.0 gl-node/22"}}

	// Gemini CLI's request: streamed as server-sent events.
	resp := p.gemini(t, "POST", "/v1beta/models/gemini-test:streamGenerateContent?alt=sse", goog, geminiBody)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), readBody(t, resp))
	}
	var text strings.Builder
	var calls []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var chunk struct {
			Candidates []struct{ Content llmtest.GeminiContent }
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		for _, part := range chunk.Candidates[0].Content.Parts {
			text.WriteString(part.Text)
			if part.FunctionCall != nil {
				calls = append(calls, part.FunctionCall.Name+" "+string(part.FunctionCall.Args))
			}
		}
	}
	if text.String() != "I'll look." || !slices.Equal(calls, []string{`run_shell_command {"command":"ls"}`}) {
		t.Errorf("streamed %q and calls %q", text.String(), calls)
	}

	// A plain answer, the token as a bearer token.
	resp = p.gemini(t, "POST", "/v1beta/models/gemini-test:generateContent", http.Header{"Authorization": {"Bearer " + run.Token()}}, geminiBody)
	if body := readBody(t, resp); resp.StatusCode != 200 || !strings.Contains(body, `"text":"Done."`) {
		t.Errorf("generateContent: %d %s", resp.StatusCode, body)
	}
	// The stream as one JSON array, the token in Amelia's header.
	resp = p.gemini(t, "POST", "/v1beta/models/gemini-test:streamGenerateContent", http.Header{"X-Amelia-Proxy-Token": {run.Token()}}, geminiBody)
	if body := readBody(t, resp); resp.StatusCode != 200 || !strings.HasPrefix(body, "[") || !strings.Contains(body, `"text":"y."`) {
		t.Errorf("streamGenerateContent without alt=sse: %d %s", resp.StatusCode, body)
	}
	// The models and a token count, as they are.
	resp = p.gemini(t, "GET", "/v1beta/models", goog, "")
	if body := readBody(t, resp); resp.StatusCode != 200 || !strings.Contains(body, `"name":"models/`+llmtest.ModelID+`"`) {
		t.Errorf("models: %d %s", resp.StatusCode, body)
	}
	resp = p.gemini(t, "POST", "/v1beta/models/gemini-test:countTokens", goog, geminiBody)
	if body := readBody(t, resp); resp.StatusCode != 200 || !strings.Contains(body, `"totalTokens"`) {
		t.Errorf("countTokens: %d %s", resp.StatusCode, body)
	}

	reqs := up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the upstream got %d generate requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if got := r.Header.Get("X-Goog-Api-Key"); got != realGeminiKey {
			t.Errorf("request %d: the upstream got x-goog-api-key %q, want the host's key", i, got)
		}
		for _, h := range []string{"Authorization", "X-Amelia-Proxy-Token"} {
			if v := r.Header.Values(h); len(v) > 0 {
				t.Errorf("request %d: %s was forwarded", i, h)
			}
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, run.Token()) || strings.Contains(v, realKey) {
					t.Errorf("request %d: the run token or the OpenAI key reached the Gemini upstream in %s", i, k)
				}
			}
		}
		if r.Path != "/v1beta/models/gemini-test:"+r.Gemini.Method || r.Gemini.Contents[0].Text() != "hello" {
			t.Errorf("request %d: path %s, contents %+v", i, r.Path, r.Gemini.Contents)
		}
	}
	if got := reqs[0].Header.Get("X-Goog-Api-Client"); got == "" {
		t.Errorf("the client's x-goog-api-client did not reach the upstream")
	}
	if errs := up.Errors(); len(errs) > 0 {
		t.Errorf("the upstream met: %v", errs)
	}

	recs := readAudit(t, run)
	if len(recs) != 5 {
		t.Fatalf("audit has %d records, want 5: %+v", len(recs), recs)
	}
	slices.SortFunc(recs, func(a, b proxy.Record) int { return a.Time.Compare(b.Time) })
	for i, want := range []struct {
		path          string
		in, out, read int64 // -1: not reported
	}{
		{"/gemini/v1beta/models/gemini-test:streamGenerateContent", 120, 12, 64},
		{"/gemini/v1beta/models/gemini-test:generateContent", 150, 3, -1},
		{"/gemini/v1beta/models/gemini-test:streamGenerateContent", 9, 4, -1},
		{"/gemini/v1beta/models", -1, -1, -1},
		{"/gemini/v1beta/models/gemini-test:countTokens", -1, -1, -1},
	} {
		rec := recs[i]
		if rec.Route != "gemini" || rec.Path != want.path || rec.Status != 200 || rec.Upstream != strings.TrimPrefix(up.URL(), "http://") || rec.Translated != "" {
			t.Errorf("record %d: %+v", i, rec)
		}
		same := func(p *int64, v int64) bool { return (p == nil && v < 0) || (p != nil && *p == v) }
		if !same(rec.InputTokens, want.in) || !same(rec.OutputTokens, want.out) || !same(rec.CacheReadTokens, want.read) {
			t.Errorf("record %d: tokens in %s out %s cache read %s, want %d %d %d", i,
				shown(rec.InputTokens), shown(rec.OutputTokens), shown(rec.CacheReadTokens), want.in, want.out, want.read)
		}
	}
	assertNoSecret(t, auditDir, realKey, realGeminiKey, run.Token())
}

// What the Gemini route refuses, each in Google's error shape, before
// anything reaches the upstream.
func TestGeminiRefusals(t *testing.T) {
	up := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyGemini}, llmtest.Turn{Text: "never"})
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{
		ID:     "run-gemini",
		OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey},
		Gemini: &proxy.Upstream{BaseURL: up.URL(), Key: realGeminiKey},
	})
	noGemini := p.start(t, proxy.RunConfig{ID: "run-plain", OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey}})
	const path = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
	for _, tc := range []struct {
		name   string
		path   string
		header http.Header
		status int
		want   string
	}{
		{"no token", path, nil, 401, "missing or invalid run token"},
		{"a wrong token", path, http.Header{"X-Goog-Api-Key": {"amr_" + strings.Repeat("A", 43)}}, 401, "missing or invalid run token"},
		{"the host's key", path, http.Header{"X-Goog-Api-Key": {realGeminiKey}}, 401, "missing or invalid run token"},
		// A token in the URL is never taken: it would end up in logs.
		{"the token as ?key=", path + "&key=" + run.Token(), nil, 401, "missing or invalid run token"},
		{"the token as x-api-key", path, http.Header{"X-Api-Key": {run.Token()}}, 401, "missing or invalid run token"},
		{"a run without llm.gemini", path, http.Header{"X-Goog-Api-Key": {noGemini.Token()}}, 404, "has no llm.gemini block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := p.gemini(t, "POST", tc.path, tc.header, geminiBody)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if e := decodeGoogleError(t, resp); !strings.Contains(e.Error.Message, tc.want) || strings.Contains(e.Error.Message, run.Token()) {
				t.Errorf("message %q, want it to say %q", e.Error.Message, tc.want)
			}
		})
	}
	if reqs := up.Requests(); len(reqs) != 0 {
		t.Errorf("the upstream got %d requests", len(reqs))
	}
	recs := readAudit(t, noGemini)
	if len(recs) != 1 || recs[0].Route != "gemini" || recs[0].Status != 404 {
		t.Errorf("the run without llm.gemini logged %+v", recs)
	}
}

// The upstream's key, given in ?key= by a client, is not forwarded; the
// host's goes in x-goog-api-key. An unreachable upstream is a 502 in
// Google's shape.
func TestGeminiKeyParamAndUnreachableUpstream(t *testing.T) {
	type seen struct{ uri, key string }
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.RequestURI, r.Header.Get("X-Goog-Api-Key")}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"candidates":[]}`)
	}))
	t.Cleanup(up.Close)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1"}, Gemini: &proxy.Upstream{BaseURL: up.URL + "/google", Key: realGeminiKey}})
	resp := p.gemini(t, "POST", "/v1beta/models/m:generateContent?key=AIza-the-sandbox-guess&alt=json", http.Header{"X-Goog-Api-Key": {run.Token()}}, geminiBody)
	if body := readBody(t, resp); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if s := <-got; s != (seen{"/google/v1beta/models/m:generateContent?alt=json", realGeminiKey}) {
		t.Errorf("the upstream got %s with x-goog-api-key %q", s.uri, s.key)
	}

	dead := p.start(t, proxy.RunConfig{ID: "run-dead", OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1"}, Gemini: &proxy.Upstream{BaseURL: "http://127.0.0.1:1", Key: realGeminiKey}})
	resp = p.gemini(t, "POST", "/v1beta/models/m:generateContent", http.Header{"X-Goog-Api-Key": {dead.Token()}}, geminiBody)
	if e := decodeGoogleError(t, resp); resp.StatusCode != 502 || e.Error.Status != "UNAVAILABLE" || !strings.Contains(e.Error.Message, "cannot reach upstream") {
		t.Errorf("unreachable: %d %+v", resp.StatusCode, e)
	}
}

// The proxy passes a Gemini stream's events on as they come.
func TestGeminiStreamIsNotBuffered(t *testing.T) {
	up := newGatedUpstream(t)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1"}, Gemini: &proxy.Upstream{BaseURL: up.URL, Key: realGeminiKey}})
	resp := p.gemini(t, "POST", "/v1beta/models/m:streamGenerateContent?alt=sse", http.Header{"X-Goog-Api-Key": {run.Token()}}, geminiBody)
	br := bufio.NewReader(resp.Body)
	// The upstream is still waiting at its gate: this line can only arrive
	// if the proxy passed it on at once.
	line, err := br.ReadString('\n')
	if err != nil || line != "data: {\"first\":true}\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	up.open()
	if rest, err := io.ReadAll(br); err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of the stream: %q, %v", rest, err)
	}
}
