package proxy_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/proxy"
)

// The real upstream key: only the test upstreams may ever see it.
const realKey = "sk-real-upstream-key-3f9a7c"

// workerBin is amelia-worker, git's credential helper in the git tests.
var workerBin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerBin, err = testbin.BuildWorker(dir)
		return err
	}))
}

// testProxy is a proxy serving on loopback for one test.
type testProxy struct {
	*proxy.Server
	URL string
}

func newProxy(t *testing.T, opts proxy.Options) *testProxy {
	t.Helper()
	srv := proxy.New(opts)
	addr, err := srv.ListenAndServe("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &testProxy{Server: srv, URL: "http://" + addr}
}

// start starts a run with cfg, filling in an id, a profile, an audit
// directory and the network policy when cfg leaves them empty.
func (p *testProxy) start(t *testing.T, cfg proxy.RunConfig) *proxy.Run {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = "run-1"
	}
	if cfg.Profile == "" {
		cfg.Profile = "dev"
	}
	if cfg.AuditDir == "" {
		cfg.AuditDir = t.TempDir()
	}
	if cfg.Network == "" {
		cfg.Network = sdk.NetworkAllowlist
	}
	r, err := p.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// openAIClient is go-openai as the worker uses it: the proxy's /v1 as its
// base URL and the run token as its key. extra headers are added to every
// request, as a sandbox trying its luck would.
func openAIClient(base, token string, extra http.Header) *openai.Client {
	cfg := openai.DefaultConfig(token)
	cfg.BaseURL = base + "/v1"
	cfg.HTTPClient = &http.Client{Transport: headerTransport{extra}}
	return openai.NewClientWithConfig(cfg)
}

type headerTransport struct{ h http.Header }

func (t headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, vs := range t.h {
		req.Header[k] = vs
	}
	return http.DefaultTransport.RoundTrip(req)
}

func chatRequest(text string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:    "test-model",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}},
	}
}

// readAudit ends run r, which completes its audit log, and returns the
// log's records.
func readAudit(t *testing.T, r *proxy.Run) []proxy.Record {
	t.Helper()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(r.AuditPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []proxy.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec proxy.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Bytes(), err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// assertNoSecret fails if any file under dir holds one of the secrets.
func assertNoSecret(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("%s holds a secret (%.8s...)", path, s)
			}
		}
		return nil
	})
}

func TestChatCompletionsThroughTheProxy(t *testing.T) {
	up := llmtest.New(t,
		llmtest.Turn{Text: "plain answer", Usage: &llmtest.Usage{PromptTokens: 11, CompletionTokens: 3}},
		llmtest.Turn{Text: "streamed answer", Usage: &llmtest.Usage{PromptTokens: 21, CompletionTokens: 5, CachedTokens: 4}},
	)
	p := newProxy(t, proxy.Options{})
	auditDir := t.TempDir()
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey}, AuditDir: auditDir})
	sneaky := http.Header{
		"X-Amelia-Profile": {"other"},
		"X-Amelia-Run":     {"run-2"},
		"X-Api-Key":        {"sk-from-the-sandbox"},
		"Cookie":           {"session=abc"},
	}
	client := openAIClient(p.URL, run.Token(), sneaky)

	resp, err := client.CreateChatCompletion(t.Context(), chatRequest("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "plain answer" {
		t.Errorf("answer %q", got)
	}

	req := chatRequest("stream please")
	req.Stream = true
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	stream, err := client.CreateChatCompletionStream(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(chunk.Choices) > 0 {
			text.WriteString(chunk.Choices[0].Delta.Content)
		}
	}
	stream.Close()
	if text.String() != "streamed answer" {
		t.Errorf("streamed %q", text.String())
	}

	// The upstream saw the real key and nothing the sandbox sent to
	// authenticate or steer the proxy.
	for i, r := range up.Requests() {
		if got := r.Header.Get("Authorization"); got != "Bearer "+realKey {
			t.Errorf("request %d: upstream got Authorization %q, want the real key", i, got)
		}
		for _, h := range []string{"X-Amelia-Profile", "X-Amelia-Run", "X-Api-Key", "Cookie"} {
			if v := r.Header.Values(h); len(v) > 0 {
				t.Errorf("request %d: %s %q was forwarded", i, h, v)
			}
		}
		for k, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, run.Token()) {
					t.Errorf("request %d: the run token reached the upstream in %s", i, k)
				}
			}
		}
	}

	recs := readAudit(t, run)
	if len(recs) != 2 {
		t.Fatalf("audit has %d records, want 2: %+v", len(recs), recs)
	}
	// Records are written as requests end, and the first one's handler
	// may end after the second: take them in the order they began.
	slices.SortFunc(recs, func(a, b proxy.Record) int { return a.Time.Compare(b.Time) })
	for i, want := range []struct{ in, out int64 }{{11, 3}, {21, 5}} {
		rec := recs[i]
		if rec.Route != "openai" || rec.Method != "POST" || rec.Path != "/v1/chat/completions" || rec.Status != 200 ||
			rec.Run != "run-1" || rec.Profile != "dev" || rec.Upstream != strings.TrimPrefix(up.URL(), "http://") {
			t.Errorf("record %d: %+v", i, rec)
		}
		if rec.RequestBytes == 0 || rec.ResponseBytes == 0 || rec.DurationMS <= 0 {
			t.Errorf("record %d: sizes and duration not recorded: %+v", i, rec)
		}
		if rec.InputTokens == nil || *rec.InputTokens != want.in || rec.OutputTokens == nil || *rec.OutputTokens != want.out {
			t.Errorf("record %d: tokens %s/%s, want %d/%d", i, shown(rec.InputTokens), shown(rec.OutputTokens), want.in, want.out)
		}
	}
	if c := recs[1].CacheReadTokens; c == nil || *c != 4 {
		t.Errorf("streamed record: cache read tokens %s, want 4", shown(c))
	}
	assertNoSecret(t, auditDir, realKey, run.Token())
}

// gatedUpstream sends one SSE event, then waits for the test before it
// sends the rest: a client behind a buffering proxy would see nothing
// until the gate opens.
type gatedUpstream struct {
	*httptest.Server
	gate chan struct{}
	once sync.Once
}

func newGatedUpstream(t *testing.T) *gatedUpstream {
	u := &gatedUpstream{gate: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"first\":true}\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-u.gate:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(u.Close)
	t.Cleanup(u.open)
	return u
}

func (u *gatedUpstream) open() { u.once.Do(func() { close(u.gate) }) }

// stream posts body to chat completions with run's token and returns the
// response body as it arrives; it is closed when the test ends.
func (p *testProxy) stream(t *testing.T, run *proxy.Run, body string) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+run.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return bufio.NewReader(resp.Body)
}

func TestStreamingIsNotBuffered(t *testing.T) {
	up := newGatedUpstream(t)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1", Key: realKey}})
	br := p.stream(t, run, `{"stream":true}`)
	// The upstream is still waiting at its gate: this line can only arrive
	// if the proxy passed it on at once.
	line, err := br.ReadString('\n')
	if err != nil || line != "data: {\"first\":true}\n" {
		t.Fatalf("first event: %q, %v", line, err)
	}
	up.open()
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of the stream: %q, %v", rest, err)
	}
}

func TestAnthropicMessages(t *testing.T) {
	var got http.Header
	var gotPath string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, gotPath = r.Header.Clone(), r.URL.Path
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":7,\"output_tokens\":1}}}\n\n")
		io.WriteString(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n")
		io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n")
	}))
	t.Cleanup(up.Close)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{
		OpenAI:    proxy.Upstream{BaseURL: "http://127.0.0.1:1/v1", Key: "sk-openai"},
		Anthropic: &proxy.Upstream{BaseURL: up.URL + "/v1", Key: realKey},
	})
	// Anthropic's clients send their key as x-api-key: the run token works
	// there.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+"/anthropic/v1/messages?beta=true", strings.NewReader(`{"stream":true}`))
	req.Header.Set("X-Api-Key", run.Token())
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"text":"hi"`) {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if gotPath != "/v1/messages" || got.Get("X-Api-Key") != realKey || got.Get("Anthropic-Version") != "2023-06-01" || got.Get("Authorization") != "" {
		t.Errorf("upstream got path %q, x-api-key %q, version %q, authorization %q", gotPath, got.Get("X-Api-Key"), got.Get("Anthropic-Version"), got.Get("Authorization"))
	}
	rec := readAudit(t, run)[0]
	if rec.Route != "anthropic" || rec.InputTokens == nil || *rec.InputTokens != 25 || rec.OutputTokens == nil || *rec.OutputTokens != 15 ||
		rec.CacheReadTokens == nil || *rec.CacheReadTokens != 7 {
		t.Errorf("audit record %+v", rec)
	}

	// A profile without an Anthropic upstream: its messages are
	// translated (see translate_test.go), anything else is 404 in
	// Anthropic's error shape, naming the setting.
	other := p.start(t, proxy.RunConfig{ID: "run-2", OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1"}})
	status, errBody := do(t, "POST", p.URL+"/anthropic/v1/complete", other.Token(), "{}")
	if status != 404 || !strings.Contains(errBody, `"type":"error"`) || !strings.Contains(errBody, "llm.anthropic") {
		t.Errorf("no anthropic upstream: %d %s", status, errBody)
	}
}

// do sends a request with the bearer token (none if "") and returns the
// status and body.
func do(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// apiError decodes an OpenAI-style error body.
func apiError(t *testing.T, body string) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an OpenAI-style error body: %q (%v)", body, err)
	}
	return e.Error.Code, e.Error.Message
}

func TestTokens(t *testing.T) {
	upA, upB := llmtest.New(t, llmtest.Turn{Text: "from A"}), llmtest.New(t, llmtest.Turn{Text: "from B"})
	p := newProxy(t, proxy.Options{})
	a := p.start(t, proxy.RunConfig{ID: "run-a", Profile: "a", OpenAI: proxy.Upstream{BaseURL: upA.URL() + "/v1", Key: "sk-a"}})
	b := p.start(t, proxy.RunConfig{ID: "run-b", Profile: "b", OpenAI: proxy.Upstream{BaseURL: upB.URL() + "/v1", Key: "sk-b"}})
	elsewhere := newProxy(t, proxy.Options{}).start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: upA.URL() + "/v1"}})

	if a.Token() == b.Token() || len(a.Token()) < 43 {
		t.Fatalf("tokens %q and %q: want distinct, at least 256 bits", a.Token(), b.Token())
	}
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, token string
	}{
		{"no token", ""},
		{"wrong token", "amr_" + strings.Repeat("A", 43)},
		{"a token with one character changed", a.Token()[:len(a.Token())-1] + "x"},
		{"another proxy's run token", elsewhere.Token()},
	} {
		status, body := do(t, "POST", p.URL+"/v1/chat/completions", tc.token, chat)
		if status != 401 {
			t.Errorf("%s: status %d, want 401", tc.name, status)
			continue
		}
		if code, _ := apiError(t, body); code != "unauthorized" {
			t.Errorf("%s: error code %q", tc.name, code)
		}
	}
	// Unknown routes are not even named without a token.
	if status, _ := do(t, "GET", p.URL+"/admin", "", ""); status != 401 {
		t.Errorf("unknown route without a token: %d, want 401", status)
	}

	// The token picks the run's profile: no header can pick another.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+"/v1/chat/completions", strings.NewReader(chat))
	req.Header.Set("Authorization", "Bearer "+a.Token())
	req.Header.Set("X-Amelia-Profile", "b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "from A") || len(upB.Requests()) != 0 {
		t.Errorf("run a's token with X-Amelia-Profile: b answered %q; upstream B got %d requests", body, len(upB.Requests()))
	}
	if status, body := do(t, "POST", p.URL+"/v1/chat/completions", b.Token(), chat); status != 200 || !strings.Contains(body, "from B") {
		t.Errorf("run b: %d %q", status, body)
	}

	// A run's token dies with the run; the other run is untouched.
	a.Close()
	if status, _ := do(t, "GET", p.URL+"/v1/models", a.Token(), ""); status != 401 {
		t.Errorf("ended run's token: %d, want 401", status)
	}
	if status, _ := do(t, "GET", p.URL+"/v1/models", b.Token(), ""); status != 200 {
		t.Errorf("the other run after the first ended: %d, want 200", status)
	}
}

// Ending a run ends its streams still in flight.
func TestRunCloseEndsStreams(t *testing.T) {
	up := newGatedUpstream(t)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1"}})
	br := p.stream(t, run, `{}`)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	run.Close()
	// Without the cut, this read would wait for the gate forever.
	rest, _ := io.ReadAll(br)
	if strings.Contains(string(rest), "[DONE]") {
		t.Errorf("the stream went on after the run ended: %q", rest)
	}
}

func TestRequestLimitsAndErrors(t *testing.T) {
	up := llmtest.New(t)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Never answers. (With the body read, the server notices when the
		// proxy hangs up.)
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	t.Cleanup(slow.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1", Key: realKey}, MaxRequestBytes: 1024})
	slowRun := p.start(t, proxy.RunConfig{ID: "slow", OpenAI: proxy.Upstream{BaseURL: slow.URL + "/v1", Key: realKey}, Timeout: 300 * time.Millisecond})
	downRun := p.start(t, proxy.RunConfig{ID: "down", OpenAI: proxy.Upstream{BaseURL: closed.URL + "/v1", Key: realKey}})

	big := strings.Repeat("x", 1025)
	status, body := do(t, "POST", p.URL+"/v1/chat/completions", run.Token(), big)
	if code, msg := apiError(t, body); status != 413 || code != "request_too_large" || !strings.Contains(msg, "proxy.max_request_bytes") {
		t.Errorf("oversized body: %d %s", status, body)
	}
	// The same without a Content-Length (chunked).
	req, _ := http.NewRequestWithContext(t.Context(), "POST", p.URL+"/v1/chat/completions", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Authorization", "Bearer "+run.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || req.ContentLength != 0 {
		t.Errorf("oversized chunked body: %d (content length %d)", resp.StatusCode, req.ContentLength)
	}
	if n := len(up.Requests()); n != 0 {
		t.Errorf("the upstream got %d oversized requests", n)
	}
	status, body = do(t, "GET", p.URL+"/v1/../git/credentials", run.Token(), "")
	if status != 400 {
		t.Errorf("dot-dot path: %d %s", status, body)
	}

	status, body = do(t, "POST", p.URL+"/v1/chat/completions", slowRun.Token(), "{}")
	if code, msg := apiError(t, body); status != 504 || code != "upstream_timeout" || !strings.Contains(msg, "llm.timeout") {
		t.Errorf("slow upstream: %d %s", status, body)
	}
	status, body = do(t, "POST", p.URL+"/v1/chat/completions", downRun.Token(), "{}")
	if code, msg := apiError(t, body); status != 502 || code != "upstream_unreachable" || !strings.Contains(msg, "connection refused") {
		t.Errorf("unreachable upstream: %d %s", status, body)
	}
	// go-openai, as the worker uses it, shows the proxy's message.
	_, err = openAIClient(p.URL, downRun.Token(), nil).CreateChatCompletion(t.Context(), chatRequest("hi"))
	if err == nil || !strings.Contains(err.Error(), "cannot reach upstream") {
		t.Errorf("go-openai's error: %v", err)
	}
	for _, r := range []*proxy.Run{run, slowRun, downRun} {
		for _, rec := range readAudit(t, r) {
			if strings.Contains(rec.Error, realKey) {
				t.Errorf("audit error holds the key: %q", rec.Error)
			}
		}
	}
	if strings.Contains(body, realKey) {
		t.Errorf("error body holds the key")
	}
}

// Paths that are not plain never reach an upstream, with the key or
// without: each is refused with 400, as the client wrote it (sent here
// byte for byte, as no HTTP client would clean it first).
func TestNonCanonicalPathsAreRefused(t *testing.T) {
	var got atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		w.Write([]byte(`{}`))
	}))
	t.Cleanup(up.Close)
	p := newProxy(t, proxy.Options{})
	run := p.start(t, proxy.RunConfig{OpenAI: proxy.Upstream{BaseURL: up.URL + "/v1", Key: realKey}, Anthropic: &proxy.Upstream{BaseURL: up.URL + "/v1", Key: realKey}})
	for _, path := range []string{
		"/v1/%2F%2Fevil", "/v1%2fmodels", "/v1/models;..;/x", "/v1/..;/x", "/v1/%252e%252e/x", "/v1/%5c..%5cx",
		"/v1/../git/credentials", "/v1/./models", "/v1//models", "/v1/models/", "/anthropic/v1/%2e%2e/x", "/proxy/v1/%2e%2e/models",
		"/v1/mod%65ls", "/v1/models\\..\\x",
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(p.URL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", path, run.Token())
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		if code, _ := apiError(t, string(body)); resp.StatusCode != 400 || code != "invalid_path" {
			t.Errorf("GET %s: %d %s; want 400 invalid_path", path, resp.StatusCode, body)
		}
	}
	if n := got.Load(); n != 0 {
		t.Errorf("the upstream got %d requests", n)
	}
	// A plain path goes through.
	if status, body := do(t, "GET", p.URL+"/v1/models", run.Token(), ""); status != 200 || got.Load() != 1 {
		t.Errorf("GET /v1/models: %d %s, upstream got %d", status, body, got.Load())
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.10:0", "localhost:0", "host.example:80"} {
		if ln, err := proxy.Listen(addr); err == nil {
			ln.Close()
			t.Errorf("Listen(%q) succeeded; the proxy must listen on loopback only", addr)
		}
	}
	ln, err := proxy.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}

func TestStartValidates(t *testing.T) {
	srv := proxy.New(proxy.Options{})
	for _, tc := range []struct {
		name string
		cfg  proxy.RunConfig
		want string
	}{
		{"bad id", proxy.RunConfig{ID: "../x", AuditDir: t.TempDir(), OpenAI: proxy.Upstream{BaseURL: "http://x/v1"}}, "run id"},
		{"relative audit dir", proxy.RunConfig{ID: "r", AuditDir: "audit", OpenAI: proxy.Upstream{BaseURL: "http://x/v1"}}, "not an absolute path"},
		{"bad base URL", proxy.RunConfig{ID: "r", AuditDir: t.TempDir(), OpenAI: proxy.Upstream{BaseURL: "ftp://x"}}, "not an absolute http(s) URL"},
	} {
		if _, err := srv.Start(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// Close right after ListenAndServe stops the serving it started (no window
// in which a Close is missed) and can be called again.
func TestCloseStopsServing(t *testing.T) {
	srv := proxy.New(proxy.Options{})
	addr, err := srv.ListenAndServe("")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Error("the proxy still accepts connections after Close")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := srv.ListenAndServe("0.0.0.0:0"); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("ListenAndServe on 0.0.0.0: %v, want the loopback refusal", err)
	}
}

// shown is what p points at, or nil.
func shown[T any](p *T) string {
	if p == nil {
		return "nil"
	}
	return fmt.Sprint(*p)
}
