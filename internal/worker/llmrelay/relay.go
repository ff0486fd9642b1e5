// Package llmrelay is the worker's relay between a CLI agent and the
// run's tunnel to the Amelia proxy: an HTTP server on the sandbox's
// loopback that forwards the agent's LLM requests as they are, but for
// the model, which becomes the run's, and watches them go by.
//
// From what it sees it counts the run's usage (every answer the
// upstream gave), and, for an agent that shows nothing of what it does
// (Options.Show), derives the protocol's messages: the model's text
// before a tool call as thinking, each tool call, and each tool's
// result, which the agent sends back to the model in its next request.
// Requests without tools (an agent's title or summary calls) are
// counted, not shown.
//
// It answers the model listings agents ask for at start-up (OpenAI's
// /v1/models, LM Studio's /api/v0/models) itself, with the run's model
// alone: the only thing it answers without the proxy, and nothing
// secret. Every other request goes to the proxy, which checks the run's
// token the agent sends as its API key.
package llmrelay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmwire"
)

// Options configure a Relay.
type Options struct {
	// Proxy is the proxy's root URL in the sandbox (AMELIA_PROXY_URL).
	Proxy string
	// Model is the run's model: listed, and asked for in every request.
	Model string
	// Show derives messages from the traffic and passes them to Emit.
	Show bool
	Emit func(*protocol.AgenticMessage) error
	// MaxBody bounds a request body the relay reads; default 32 MiB.
	MaxBody int64
	Logger  *slog.Logger
}

// Usage is what the upstream reported over the run.
type Usage struct {
	Turns                                int64
	Input, Output, CacheRead, CacheWrite int64
}

// Relay is a running relay.
type Relay struct {
	opts  Options
	proxy *url.URL
	srv   *http.Server
	ln    net.Listener
	done  chan struct{}
	rp    *httputil.ReverseProxy

	mu      sync.Mutex
	usage   Usage
	calls   map[string]bool // tool call ids shown, true once their result was
	emitErr error
}

// Start starts a relay on a loopback port.
func Start(opts Options) (*Relay, error) {
	pu, err := url.Parse(opts.Proxy)
	if err != nil || pu.Scheme != "http" || pu.Host == "" {
		return nil, fmt.Errorf("the proxy's URL %q is not an http URL", opts.Proxy)
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = 32 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the agent's LLM requests: %w", err)
	}
	r := &Relay{opts: opts, proxy: pu, ln: ln, done: make(chan struct{}), calls: map[string]bool{}}
	r.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(r.proxy)
			pr.Out.Host = r.proxy.Host
		},
		FlushInterval:  -1,
		ModifyResponse: r.watchResponse,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug),
	}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: time.Minute}
	go func() {
		defer close(r.done)
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			opts.Logger.Error("the LLM relay stopped", "err", err)
		}
	}()
	return r, nil
}

// URL is the relay's root URL: agents use URL()+"/v1" for the OpenAI
// API and URL()+"/anthropic" for Anthropic's.
func (r *Relay) URL() string { return "http://" + r.ln.Addr().String() }

// Usage is what the upstream reported so far.
func (r *Relay) Usage() Usage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.usage
}

// Err is the first error Emit returned, if any.
func (r *Relay) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.emitErr
}

// Close stops the relay and waits for the requests in flight.
func (r *Relay) Close() error {
	err := r.srv.Shutdown(context.Background())
	<-r.done
	return err
}

// exchangeKey carries what a response needs of its request.
type exchangeKey struct{}

type exchange struct {
	api  llmwire.API
	show bool
}

func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet && (req.URL.Path == "/v1/models" || req.URL.Path == "/api/v0/models") {
		r.listModels(w)
		return
	}
	api, turn := route(req.URL.Path)
	if !turn || req.Method != http.MethodPost {
		r.rp.ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, r.opts.MaxBody+1))
	if err != nil || int64(len(body)) > r.opts.MaxBody {
		http.Error(w, fmt.Sprintf("amelia relay: the request body could not be read whole (at most %d bytes): %v", r.opts.MaxBody, err), http.StatusRequestEntityTooLarge)
		return
	}
	ex := &exchange{api: api}
	if body, ex.show, err = r.prepare(api, body); err != nil {
		http.Error(w, "amelia relay: "+err.Error(), http.StatusBadRequest)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.Header.Del("Content-Length")
	r.rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), exchangeKey{}, ex)))
}

// route says which API a path is of, and whether it asks for a model's
// turn.
func route(p string) (llmwire.API, bool) {
	if strings.HasPrefix(p, "/anthropic/") {
		return llmwire.Anthropic, strings.HasSuffix(p, "/v1/messages")
	}
	return llmwire.OpenAI, strings.HasSuffix(p, "/chat/completions")
}

// prepare puts the run's model in a request body, shows the tool
// results it carries, and says whether its answer is to be shown.
func (r *Relay) prepare(api llmwire.API, body []byte) ([]byte, bool, error) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, false, fmt.Errorf("the request body is not a JSON object: %w", err)
	}
	if r.opts.Model != "" {
		m, _ := json.Marshal(r.opts.Model)
		doc["model"] = m
		var err error
		if body, err = json.Marshal(doc); err != nil {
			return nil, false, err
		}
	}
	show := r.opts.Show && hasTools(doc["tools"])
	if show {
		results, err := llmwire.ToolResults(api, body)
		if err != nil {
			r.opts.Logger.Debug("tool results not read", "err", err)
		}
		for _, res := range results {
			r.showResult(res)
		}
	}
	return body, show, nil
}

func hasTools(raw json.RawMessage) bool {
	var tools []json.RawMessage
	return json.Unmarshal(raw, &tools) == nil && len(tools) > 0
}

func (r *Relay) showResult(res llmwire.ToolResult) {
	r.mu.Lock()
	shown, known := r.calls[res.ID]
	if known && !shown {
		r.calls[res.ID] = true
	}
	r.mu.Unlock()
	if !known || shown {
		return
	}
	id, out := res.ID, res.Content
	r.emit(&protocol.AgenticMessage{Type: protocol.ToolResult, ToolCallID: &id, ToolOutput: &out, IsError: res.IsError})
}

// watchResponse reads a model's answer as it streams through to the
// agent.
func (r *Relay) watchResponse(resp *http.Response) error {
	ex, _ := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if ex == nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	resp.Body = &watchedBody{ReadCloser: resp.Body, acc: llmwire.NewAccumulator(ex.api, mt), done: func(t llmwire.Turn, err error) {
		r.answered(ex, t, err)
	}}
	return nil
}

// answered counts one answer and shows what it did.
func (r *Relay) answered(ex *exchange, t llmwire.Turn, err error) {
	if err != nil {
		r.opts.Logger.Debug("an answer could not be read", "err", err)
		return
	}
	r.mu.Lock()
	r.usage.Turns++
	r.usage.Input += t.Usage.Input
	r.usage.Output += t.Usage.Output
	r.usage.CacheRead += t.Usage.CacheRead
	r.usage.CacheWrite += t.Usage.CacheWrite
	for _, c := range t.ToolCalls {
		if ex.show {
			r.calls[c.ID] = false
		}
	}
	r.mu.Unlock()
	if !ex.show || len(t.ToolCalls) == 0 {
		return
	}
	if strings.TrimSpace(t.Text) != "" {
		text := t.Text
		r.emit(&protocol.AgenticMessage{Type: protocol.Thinking, Content: &text})
	}
	for _, c := range t.ToolCalls {
		id, name := c.ID, c.Name
		r.emit(&protocol.AgenticMessage{Type: protocol.ToolCall, ToolCallID: &id, ToolName: &name, ToolInput: toolInput(c.Arguments)})
	}
}

// toolInput is a call's arguments as the protocol's tool_input, a JSON
// object: arguments that are not one are kept as {"arguments": TEXT}.
func toolInput(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) == nil && obj != nil {
		return json.RawMessage(args)
	}
	if strings.TrimSpace(args) == "" {
		return json.RawMessage(`{}`)
	}
	b, _ := json.Marshal(map[string]string{"arguments": args})
	return b
}

func (r *Relay) emit(m *protocol.AgenticMessage) {
	if err := r.opts.Emit(m); err != nil {
		r.mu.Lock()
		if r.emitErr == nil {
			r.emitErr = err
		}
		r.mu.Unlock()
	}
}

func (r *Relay) listModels(w http.ResponseWriter) {
	type model struct {
		ID                  string `json:"id"`
		Object              string `json:"object"`
		Type                string `json:"type"`
		OwnedBy             string `json:"owned_by"`
		State               string `json:"state"`
		LoadedContextLength int64  `json:"loaded_context_length"`
	}
	// LM Studio's listing says how long a context the model takes; an
	// agent without it (opencode) assumes 4096 tokens.
	const contextLength = 128000
	list := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{"list", []model{{ID: r.opts.Model, Object: "model", Type: "llm", OwnedBy: "amelia", State: "loaded", LoadedContextLength: contextLength}}}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(list)
}

// watchedBody shows a response body to an accumulator as it is read, and
// reports the answer once at its end (or when it is closed early).
type watchedBody struct {
	io.ReadCloser
	acc  llmwire.Accumulator
	once sync.Once
	done func(llmwire.Turn, error)
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.acc.Write(p[:n])
	}
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

func (b *watchedBody) Close() error {
	b.finish()
	return b.ReadCloser.Close()
}

func (b *watchedBody) finish() { b.once.Do(func() { b.done(b.acc.Turn()) }) }
