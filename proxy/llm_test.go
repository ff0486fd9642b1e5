package proxy

import (
	"log/slog"
	"net/http/httptest"
	"net/http/httputil"
	"testing"
)

func TestRewrite(t *testing.T) {
	for _, tc := range []struct {
		name, route, base, in string
		wantURL               string
		wantHeader            map[string]string
	}{
		{"openai", routeOpenAI, "https://api.openai.com/v1", "/v1/chat/completions?x=1", "https://api.openai.com/v1/chat/completions?x=1",
			map[string]string{"Authorization": "Bearer sk-k", "X-Api-Key": "", "HTTP-Referer": "", "X-Amelia-Profile": "", "Accept-Encoding": ""}},
		{"base with trailing slash", routeOpenAI, "http://vllm:8000/v1/", "/v1/models", "http://vllm:8000/v1/models", nil},
		{"base path", routeOpenAI, "https://openrouter.ai/api/v1", "/v1/chat/completions", "https://openrouter.ai/api/v1/chat/completions",
			map[string]string{"HTTP-Referer": openRouterReferer, "X-Title": openRouterTitle, "Authorization": "Bearer sk-k"}},
		{"anthropic", routeAnthropic, "https://api.anthropic.com/v1", "/anthropic/v1/messages", "https://api.anthropic.com/v1/messages",
			map[string]string{"X-Api-Key": "sk-k", "Authorization": "", "Anthropic-Version": "2023-06-01"}},
		{"gemini", routeGemini, "https://gemini.test", "/gemini/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
			"https://gemini.test/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse",
			map[string]string{"X-Goog-Api-Key": "sk-k", "Authorization": "", "X-Api-Key": ""}},
		{"gemini's key parameter is dropped", routeGemini, "http://gemini.test/base/", "/gemini/v1beta/models?key=amr_token&pageSize=5",
			"http://gemini.test/base/v1beta/models?pageSize=5", map[string]string{"X-Goog-Api-Key": "sk-k"}},
		{"no goog key elsewhere", routeOpenAI, "https://api.openai.com/v1", "/v1/models?key=1", "https://api.openai.com/v1/models?key=1",
			map[string]string{"X-Goog-Api-Key": ""}},
	} {
		cfg := RunConfig{}
		cfg.check()
		u, err := newUpstream(tc.route, Upstream{BaseURL: tc.base, Key: "sk-k"}, cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		in := httptest.NewRequest("POST", tc.in, nil)
		in.Header.Set("Authorization", "Bearer amr_token")
		in.Header.Set("X-Api-Key", "amr_token")
		in.Header.Set("X-Goog-Api-Key", "amr_token")
		in.Header.Set("X-Amelia-Profile", "other")
		in.Header.Set("Accept-Encoding", "br")
		in.Header.Set("Anthropic-Version", "2023-06-01")
		pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
		u.rewrite(pr)
		if got := pr.Out.URL.String(); got != tc.wantURL {
			t.Errorf("%s: URL %s, want %s", tc.name, got, tc.wantURL)
		}
		for k, want := range tc.wantHeader {
			if got := pr.Out.Header.Get(k); got != want {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got, want)
			}
		}
		if pr.Out.Host != "" {
			t.Errorf("%s: Host %q: want the upstream's", tc.name, pr.Out.Host)
		}
	}
}

// A Gemini upstream without a key gets no key: the run token is not
// forwarded in its place.
func TestRewriteGeminiKeyless(t *testing.T) {
	cfg := RunConfig{}
	cfg.check()
	u, err := newUpstream(routeGemini, Upstream{BaseURL: "http://gemini.test"}, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	in := httptest.NewRequest("POST", "/gemini/v1beta/models/m:generateContent?key=amr_token", nil)
	in.Header.Set("X-Goog-Api-Key", "amr_token")
	pr := &httputil.ProxyRequest{In: in, Out: in.Clone(in.Context())}
	u.rewrite(pr)
	if h := pr.Out.Header.Values("X-Goog-Api-Key"); len(h) != 0 || pr.Out.URL.RawQuery != "" {
		t.Errorf("out: x-goog-api-key %q, query %q; want neither", h, pr.Out.URL.RawQuery)
	}
}

func TestGeminiStatus(t *testing.T) {
	for code, want := range map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
		413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 502: "UNAVAILABLE", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED", 418: "UNKNOWN"} {
		if got := geminiStatus(code); got != want {
			t.Errorf("geminiStatus(%d) = %s, want %s", code, got, want)
		}
	}
}
