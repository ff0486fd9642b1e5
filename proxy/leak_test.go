package proxy_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/proxy"
)

// The run's other secrets, beside realKey.
const (
	realAnthropicKey = "sk-ant-real-anthropic-key-81d2"
	realGitToken     = "ghp_realGitToken0123456789abcdef"
)

// reflectingUpstream is an LLM API that hands back the key it was sent:
// in response headers (announced trailers too) and in the body, as an
// error message, a stream of events that splits the key across writes,
// or a gzip-compressed body. It also knows the run's git token, as a
// gateway holding every credential might.
func reflectingUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Api-Key") + r.Header.Get("X-Goog-Api-Key")
		if key == "" {
			key = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
		h := w.Header()
		h.Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		h.Set("X-Echo-Api-Key", r.Header.Get("X-Api-Key")+r.Header.Get("X-Goog-Api-Key"))
		h.Set("Www-Authenticate", `Bearer realm="api", error="invalid_token", token="`+key+`"`)
		flush := func() { http.NewResponseController(w).Flush() }
		switch path := r.URL.Path; {
		case strings.HasSuffix(path, "/plain"):
			body := `{"error":{"message":"invalid key ` + key + `","type":"invalid_request_error"}}`
			h.Set("Content-Type", "application/json")
			h.Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, body)
		case strings.HasSuffix(path, "/gzip"):
			h.Set("Content-Type", "application/json")
			h.Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, `{"echo":"`+key+`"}`)
			zw.Close()
		default: // a stream
			h.Set("Content-Type", "text/event-stream")
			h.Set("Trailer", "X-Echo-Trailer")
			w.WriteHeader(http.StatusOK)
			for _, s := range []string{key, realGitToken} {
				for _, cut := range []int{1, len(s) / 2, len(s) - 1} {
					io.WriteString(w, `data: {"echo":"`+s[:cut])
					flush()
					time.Sleep(5 * time.Millisecond) // the proxy reads the halves apart
					io.WriteString(w, s[cut:]+`"}`+"\n\n")
					flush()
				}
			}
			io.WriteString(w, "data: [DONE]\n\n")
			h.Set("X-Echo-Trailer", key)
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// wireClient is an HTTP client that keeps every byte it receives.
type wireClient struct {
	*http.Client
	mu   sync.Mutex
	wire bytes.Buffer
}

func newWireClient() *wireClient {
	c := &wireClient{}
	dial := (&net.Dialer{}).DialContext
	c.Client = &http.Client{Transport: &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &recordingConn{Conn: conn, c: c}, nil
		},
	}}
	return c
}

func (c *wireClient) received() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.wire.Bytes())
}

type recordingConn struct {
	net.Conn
	c *wireClient
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.c.mu.Lock()
	r.c.wire.Write(p[:n])
	r.c.mu.Unlock()
	return n, err
}

// No response from an LLM route carries the run's keys or git token back
// to the sandbox: not in a header, a trailer, an error message, a plain
// or compressed body, nor a stream that splits them across writes.
func TestResponsesNeverCarryTheKeys(t *testing.T) {
	up := reflectingUpstream(t)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{
		OpenAI:    proxy.Upstream{BaseURL: up.URL + "/v1", Key: realKey},
		Anthropic: &proxy.Upstream{BaseURL: up.URL + "/v1", Key: realAnthropicKey},
		Gemini:    &proxy.Upstream{BaseURL: up.URL, Key: realGeminiKey},
		Git:       proxy.GitAuth{Token: realGitToken},
	})
	secrets := []string{realKey, realAnthropicKey, realGeminiKey, realGitToken}

	tests := []struct {
		name, path string
		status     int
		body       string // what the body must be, "" to check events
	}{
		{"error message with a content length", "/v1/plain", 401,
			`{"error":{"message":"invalid key [redacted]","type":"invalid_request_error"}}`},
		{"compressed body", "/v1/gzip", 200, `{"echo":"[redacted]"}`},
		{"stream", "/v1/chat/completions", 200, ""},
		{"anthropic stream", "/anthropic/v1/messages", 200, ""},
		{"gemini error message", "/gemini/v1beta/plain", 401,
			`{"error":{"message":"invalid key [redacted]","type":"invalid_request_error"}}`},
		{"gemini stream", "/gemini/v1beta/models/m:streamGenerateContent", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newWireClient()
			req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+tt.path, strings.NewReader(`{"stream":true}`))
			req.Header.Set("Authorization", "Bearer "+run.Token())
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("read body: %v (a wrong Content-Length?)", err)
			}
			wire := c.received()
			for _, s := range secrets {
				if bytes.Contains(wire, []byte(s)) {
					t.Errorf("the client received the secret %.10s...:\n%s", s, wire)
				}
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if cl := resp.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
				t.Errorf("Content-Length %s for a body of %d bytes", cl, len(body))
			}
			wantEcho := "Bearer [redacted]"
			if strings.HasPrefix(tt.path, "/anthropic/") || strings.HasPrefix(tt.path, "/gemini/") {
				wantEcho = ""
				if got := resp.Header.Get("X-Echo-Api-Key"); got != "[redacted]" {
					t.Errorf("X-Echo-Api-Key %q", got)
				}
			}
			if got := resp.Header.Get("X-Echo-Authorization"); got != wantEcho {
				t.Errorf("X-Echo-Authorization %q, want %q", got, wantEcho)
			}
			if got, want := resp.Header.Get("Www-Authenticate"), `token="[redacted]"`; !strings.Contains(got, want) {
				t.Errorf("Www-Authenticate %q, want it to hold %s", got, want)
			}
			if tt.body != "" {
				if string(body) != tt.body {
					t.Errorf("body %s, want %s", body, tt.body)
				}
				return
			}
			// Every event arrived whole, each secret in it redacted.
			var events int
			sc := bufio.NewScanner(bytes.NewReader(body))
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var ev struct{ Echo string }
				if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Echo != "[redacted]" {
					t.Errorf("event %q: %v", data, err)
				}
				events++
			}
			if events != 6 {
				t.Errorf("%d events, want 6:\n%s", events, body)
			}
			if got := resp.Trailer.Get("X-Echo-Trailer"); got != "[redacted]" {
				t.Errorf("trailer X-Echo-Trailer %q, want [redacted]", got)
			}
		})
	}
}
