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
