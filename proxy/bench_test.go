package proxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/proxy"
)

// BenchmarkRedactThroughProxy streams the same 200-event SSE response
// through the proxy for a run with keys, which are redacted, and for one
// without, which has nothing to redact, in alternating rounds over
// loopback with a real client; it reports the time per stream of each and
// their ratio.
func BenchmarkRedactThroughProxy(b *testing.B) {
	event := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token token token"}}]}` + "\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for range 200 {
			io.WriteString(w, event)
			rc.Flush()
		}
	}))
	b.Cleanup(up.Close)
	srv := proxy.New(proxy.Options{})
	addr, err := srv.ListenAndServe("")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	start := func(id string, cfg proxy.RunConfig) *proxy.Run {
		cfg.ID, cfg.AuditDir, cfg.OpenAI.BaseURL = id, b.TempDir(), up.URL+"/v1"
		r, err := srv.Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	redacted := start("redacted", proxy.RunConfig{
		OpenAI:    proxy.Upstream{Key: realKey},
		Anthropic: &proxy.Upstream{BaseURL: up.URL + "/v1", Key: realAnthropicKey},
		Git:       proxy.GitAuth{Token: realGitToken},
	})
	plain := start("plain", proxy.RunConfig{})
	stream := func(run *proxy.Run) time.Duration {
		t0 := time.Now()
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(`{"stream":true}`))
		req.Header.Set("Authorization", "Bearer "+run.Token())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != int64(200*len(event)) {
			b.Fatalf("read %d bytes, want %d: %v", n, 200*len(event), err)
		}
		return time.Since(t0)
	}
	var ours, base time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // neither always goes first
			base += stream(plain)
			ours += stream(redacted)
		} else {
			ours += stream(redacted)
			base += stream(plain)
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(ours), "stream-ms")
	b.ReportMetric(ms(base), "baseline-stream-ms")
	b.ReportMetric(float64(ours)/float64(base), "x-baseline")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkTranslateThroughProxy streams the same realistic response — 1500
// text deltas of a token each and a tool call whose arguments come in 40
// pieces, then the usage — from an OpenAI upstream through the proxy to an
// Anthropic client, translated event by event, and to an OpenAI client,
// passed through untranslated, in alternating rounds over loopback with a
// real client; it reports the time per response of each and their ratio.
func BenchmarkTranslateThroughProxy(b *testing.B) {
	var events []string
	chunk := func(delta string) string {
		return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
	}
	events = append(events, chunk(`{"role":"assistant","content":""}`))
	for i := range 1500 {
		events = append(events, chunk(fmt.Sprintf(`{"content":" tok%d"}`, i%100)))
	}
	events = append(events, chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write_file","arguments":""}}]}`))
	for range 40 {
		events = append(events, chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"line of code\\n"}}]}`))
	}
	events = append(events,
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`+"\n\n",
		`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-test","choices":[],"usage":{"prompt_tokens":9000,"completion_tokens":1600,"total_tokens":10600}}`+"\n\n",
		"data: [DONE]\n\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, e := range events {
			io.WriteString(w, e)
			rc.Flush()
		}
	}))
	b.Cleanup(up.Close)
	srv := proxy.New(proxy.Options{})
	addr, err := srv.ListenAndServe("")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	run, err := srv.Start(proxy.RunConfig{ID: "bench", AuditDir: b.TempDir(), OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1", Key: realKey}, Model: "gpt-test"})
	if err != nil {
		b.Fatal(err)
	}
	stream := func(path, body, want string) time.Duration {
		t0 := time.Now()
		req, _ := http.NewRequest("POST", "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+run.Token())
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(string(got), want) {
			b.Fatalf("%s: %d, %v, ends %q", path, resp.StatusCode, err, got[max(0, len(got)-80):])
		}
		return time.Since(t0)
	}
	translated := func() time.Duration {
		return stream("/anthropic/v1/messages", `{"model":"claude-x","max_tokens":4096,"stream":true,"messages":[{"role":"user","content":"write it"}]}`,
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	}
	passed := func() time.Duration {
		return stream("/v1/chat/completions", `{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"write it"}]}`,
			"data: [DONE]\n\n")
	}
	var ours, base time.Duration
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 { // neither always goes first
			base += passed()
			ours += translated()
		} else {
			ours += translated()
			base += passed()
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(ours), "response-ms")
	b.ReportMetric(ms(base), "baseline-response-ms")
	b.ReportMetric(float64(ours)/float64(base), "x-baseline")
	b.ReportMetric(0, "ns/op")
}
