package proxy_test

import (
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
