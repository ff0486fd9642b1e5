// Package llmtest provides a scripted LLM server for tests: OpenAI's Chat
// Completions, Anthropic's Messages and Google's Gemini API.
//
// The server answers POST /v1/chat/completions, POST /v1/messages
// (Anthropic's) and POST /v1beta/models/MODEL:generateContent and
// :streamGenerateContent (Gemini's, see gemini.go) from one script of
// turns, both streaming (server-sent events, when the request has
// "stream": true, or for Gemini ?alt=sse) and non-streaming, and GET
// /v1/models (and Gemini's /v1beta/models) with a one-entry list. It
// records every chat completions, messages and generateContent request it
// receives (unless Options.Forget). Options.API makes it serve one API
// only, as a real upstream does. Its wire formats follow OpenAI's,
// Anthropic's and Google's published API references; it does not share
// types with any client library.
//
// Clients use URL()+"/v1" as their base URL (Gemini's, URL()):
//
//	srv := llmtest.New(t, llmtest.Turn{Text: "hello"})
//	cfg := openai.DefaultConfig("sk-test")
//	cfg.BaseURL = srv.URL() + "/v1"
package llmtest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// ModelID is the only model listed by GET /v1/models. Chat completions
// accept any non-empty model name and echo it back.
const ModelID = "llmtest-model"

// DefaultChunkSize is the number of bytes of text or tool call arguments per
// streamed chunk when Options.ChunkSize is not set.
const DefaultChunkSize = 7

// ToolCall is a tool call the scripted model makes.
type ToolCall struct {
	ID        string // "" = generated ("call_llmtest_<request>_<index>")
	Name      string
	Arguments string // raw JSON text as the model would send it; may be deliberately invalid
}

// Usage is the token usage a turn reports.
type Usage struct {
	PromptTokens, CompletionTokens int
	CachedTokens                   int      // usage.prompt_tokens_details.cached_tokens
	CacheWriteTokens               int      // usage.prompt_tokens_details.cache_write_tokens (OpenRouter style); 0 = omitted
	Cost                           *float64 // usage.cost (OpenRouter style); nil = omitted
}

// Turn is the scripted answer to one chat completions request.
type Turn struct {
	Text      string
	ToolCalls []ToolCall
	// Usage is the usage to report; nil reports none. In a stream it is sent
	// only when the request set stream_options.include_usage.
	Usage *Usage
	// FinishReason defaults to "tool_calls" when there are ToolCalls, else "stop".
	FinishReason string
	// Status, when non-zero, makes the server reply with this HTTP status and
	// an OpenAI-style error body carrying Error as its message (default: the
	// status text).
	Status int
	Error  string
	// RawSSE, when non-empty, is sent verbatim as a text/event-stream body
	// (whether or not the request asked to stream), for malformed-stream tests.
	RawSSE string
}

// Request is a chat completions or messages request as the server
// received it.
type Request struct {
	Header http.Header
	Path   string // /v1/chat/completions, /v1/messages or /v1beta/models/MODEL:METHOD
	Body   []byte // raw body
	// Chat is a chat completions request's decoded body; zero where
	// decoding failed, and for a messages request.
	Chat ChatRequest
	// Messages is a messages request's decoded body; zero where decoding
	// failed, and for a chat completions request.
	Messages MessagesRequest
	// Gemini is a Gemini API request's decoded body, with the model and
	// method of its path; zero for the other APIs' requests.
	Gemini GeminiRequest
}

// Options configure a Server.
type Options struct {
	// ChunkSize is the number of bytes of text or arguments per streamed
	// chunk (pieces end on rune boundaries). Default DefaultChunkSize.
	ChunkSize int
	// Script, when set, is called for chat completions request i (0-based,
	// counting only well-formed requests) instead of taking turns from a fixed
	// list. It may be called concurrently for concurrent requests.
	Script func(i int, req *Request) Turn
	// Forget keeps no requests: Requests returns none, and a long session
	// does not hold every request in memory (each holds the conversation
	// so far, so together they grow with the square of its turns). For
	// long sessions whose requests nobody reads: amelia run's scripted
	// model, benchmarks.
	Forget bool
	// Addr, when set, is the address the server listens on (a network
	// the test made, such as a Docker bridge's gateway, with port 0)
	// instead of a loopback port.
	Addr string
	// Light, for benchmarks, decodes only what answering needs (model,
	// stream, stream_options), so the server takes little of the CPU the
	// client under test is measured on. The Request a Script gets then has
	// no Messages or Tools.
	Light bool
	// API picks the APIs served: all of them (the default), or one only,
	// the others' paths answering 404 as an upstream that does not speak
	// them.
	API API
}

// API is the set of APIs a Server serves.
type API int

// The sets of APIs.
const (
	BothAPIs      API = iota // every API: OpenAI's, Anthropic's and Gemini's
	OnlyOpenAI               // POST /v1/chat/completions only
	OnlyAnthropic            // POST /v1/messages only
	OnlyGemini               // the Gemini API's /v1beta/... only
)

// Server is a scripted OpenAI-compatible chat completions server.
type Server struct {
	ts        *httptest.Server
	turns     []Turn
	script    func(int, *Request) Turn
	chunkSize int
	forget    bool
	light     bool
	api       API

	handlerNanos atomic.Int64

	mu       sync.Mutex
	next     int // index of the next well-formed request
	requests []Request
	errs     []string
}

// New starts a server answering requests with turns, in order. It is closed
// by tb.Cleanup.
func New(tb testing.TB, turns ...Turn) *Server {
	tb.Helper()
	return NewWithOptions(tb, Options{}, turns...)
}

// NewWithOptions is New with options. When opts.Script is set, turns must
// be empty.
func NewWithOptions(tb testing.TB, opts Options, turns ...Turn) *Server {
	tb.Helper()
	s, err := Start(opts, turns...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Start starts a server outside a test (the demo's scripted model); Close
// stops it. When opts.Script is set, turns must be empty.
func Start(opts Options, turns ...Turn) (*Server, error) {
	if opts.Script != nil && len(turns) > 0 {
		return nil, fmt.Errorf("llmtest: both Options.Script and %d turns given", len(turns))
	}
	s := &Server{
		turns:     slices.Clone(turns),
		script:    opts.Script,
		chunkSize: opts.ChunkSize,
		forget:    opts.Forget,
		light:     opts.Light,
		api:       opts.API,
	}
	if s.chunkSize <= 0 {
		s.chunkSize = DefaultChunkSize
	}
	s.ts = httptest.NewUnstartedServer(http.HandlerFunc(s.serveHTTP))
	if opts.Addr != "" {
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("llmtest: listen on %s: %w", opts.Addr, err)
		}
		s.ts.Listener.Close()
		s.ts.Listener = ln
	}
	s.ts.Start()
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.ts.Close() }

// URL is the server's root URL, e.g. http://127.0.0.1:PORT; clients use
// URL()+"/v1" as their base URL, Gemini's clients URL().
func (s *Server) URL() string { return s.ts.URL }

// Requests returns the chat completions, messages and Gemini generate
// requests received so far, in arrival order, including malformed ones;
// none with Options.Forget.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.requests))
	for i, r := range s.requests {
		out[i] = r
		out[i].Header = r.Header.Clone()
		out[i].Body = slices.Clone(r.Body)
	}
	return out
}

// Errors returns the problems the server met that the test may not expect:
// requests beyond the end of the script, malformed requests and requests to
// unknown paths. (The server cannot call tb.Errorf itself, since a request
// may arrive after the test has finished.)
func (s *Server) Errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

// HandlerTime is the total time spent inside the server's handler, for
// benchmarks that subtract the server's own cost.
func (s *Server) HandlerTime() time.Duration {
	return time.Duration(s.handlerNanos.Load())
}

func (s *Server) recordError(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { s.handlerNanos.Add(int64(time.Since(start))) }()

	switch r.URL.Path {
	case "/v1/chat/completions":
		if s.api == OnlyAnthropic || s.api == OnlyGemini {
			s.notFound(w, r)
			return
		}
		if r.Method != http.MethodPost {
			s.recordError("llmtest: %s %s: method not allowed", r.Method, r.URL.Path)
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, &apiError{Message: "llmtest: use POST for " + r.URL.Path, Type: "invalid_request_error"})
			return
		}
		s.chatCompletions(w, r)
	case "/v1/messages":
		if s.api == OnlyOpenAI || s.api == OnlyGemini {
			s.notFound(w, r)
			return
		}
		if r.Method != http.MethodPost {
			s.recordError("llmtest: %s %s: method not allowed", r.Method, r.URL.Path)
			w.Header().Set("Allow", http.MethodPost)
			writeAnthropicError(w, http.StatusMethodNotAllowed, "invalid_request_error", "llmtest: use POST for "+r.URL.Path)
			return
		}
		s.messages(w, r)
	case "/v1/models":
		if s.api == OnlyGemini {
			s.notFound(w, r)
			return
		}
		if r.Method != http.MethodGet {
			s.recordError("llmtest: %s %s: method not allowed", r.Method, r.URL.Path)
			w.Header().Set("Allow", http.MethodGet)
			writeError(w, http.StatusMethodNotAllowed, &apiError{Message: "llmtest: use GET for " + r.URL.Path, Type: "invalid_request_error"})
			return
		}
		if s.api == OnlyAnthropic {
			writeJSON(w, http.StatusOK, map[string]any{
				"data":     []map[string]string{{"type": "model", "id": ModelID, "display_name": "llmtest", "created_at": "2023-11-14T22:13:20Z"}},
				"has_more": false, "first_id": ModelID, "last_id": ModelID,
			})
			return
		}
		writeJSON(w, http.StatusOK, modelListJSON{
			Object: "list",
			Data:   []modelJSON{{ID: ModelID, Object: "model", Created: 1700000000, OwnedBy: "llmtest"}},
		})
	default:
		if strings.HasPrefix(r.URL.Path, geminiPrefix) && (s.api == BothAPIs || s.api == OnlyGemini) {
			s.gemini(w, r)
			return
		}
		s.notFound(w, r)
	}
}

// notFound answers a path the server does not serve, in the shape of the
// API it serves.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.recordError("llmtest: %s %s: unknown path", r.Method, r.URL.Path)
	if s.api == OnlyGemini || strings.HasPrefix(r.URL.Path, geminiPrefix) {
		writeGeminiError(w, http.StatusNotFound, fmt.Sprintf("llmtest: no method %s %s", r.Method, r.URL.Path))
		return
	}
	if s.api == OnlyAnthropic {
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", "Not found")
		return
	}
	writeError(w, http.StatusNotFound, &apiError{Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path), Type: "invalid_request_error"})
}

// take records req and picks its turn: the script's, or the next of the
// fixed turns; i is the request's number among the well-formed ones. A
// bad request (bad says why) is recorded but numbered none (-1) and gets
// no turn, nor does one past the last turn, which is recorded as a
// problem; then status is the HTTP status to answer with, and msg the
// message for a request past the script.
func (s *Server) take(req Request, bad string) (turn Turn, i, status int, msg string) {
	s.mu.Lock()
	if !s.forget {
		s.requests = append(s.requests, req)
	}
	i = -1
	if bad == "" {
		i = s.next
		s.next++
	} else {
		s.errs = append(s.errs, "llmtest: bad request: "+bad)
	}
	s.mu.Unlock()
	switch {
	case bad != "":
		return Turn{}, i, http.StatusBadRequest, bad
	case s.script != nil:
		reqCopy := req
		reqCopy.Header = req.Header.Clone()
		reqCopy.Body = slices.Clone(req.Body)
		return s.script(i, &reqCopy), i, 0, ""
	case i < len(s.turns):
		return s.turns[i], i, 0, ""
	}
	msg = fmt.Sprintf("llmtest: script exhausted: got request %d but only %d turns were scripted", i+1, len(s.turns))
	s.recordError("%s", msg)
	return Turn{}, i, http.StatusInternalServerError, msg
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.recordError("llmtest: reading request body: %v", err)
		writeError(w, http.StatusBadRequest, &apiError{Message: "llmtest: reading request body: " + err.Error(), Type: "invalid_request_error"})
		return
	}
	req := Request{Header: r.Header.Clone(), Path: r.URL.Path, Body: body}
	decode := decodeChatRequest
	if s.light {
		decode = decodeChatRequestLight
	}
	chat, aerr := decode(body)
	req.Chat = chat

	bad := ""
	if aerr != nil {
		bad = aerr.Message
	}
	turn, i, status, msg := s.take(req, bad)
	switch {
	case aerr != nil:
		writeError(w, status, aerr)
		return
	case status != 0:
		writeError(w, status, &apiError{Message: msg, Type: "server_error"})
		return
	}

	switch {
	case turn.Status != 0:
		msg := turn.Error
		if msg == "" {
			msg = http.StatusText(turn.Status)
		}
		writeError(w, turn.Status, statusError(turn.Status, msg))
	case turn.RawSSE != "":
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, turn.RawSSE)
		_ = http.NewResponseController(w).Flush()
	case chat.Stream:
		s.stream(w, i, &chat, &turn)
	default:
		s.complete(w, i, &chat, &turn)
	}
}

func finishReason(t *Turn) string {
	switch {
	case t.FinishReason != "":
		return t.FinishReason
	case len(t.ToolCalls) > 0:
		return "tool_calls"
	default:
		return "stop"
	}
}

func completionID(i int) string { return fmt.Sprintf("chatcmpl-llmtest%06d", i) }

func toolCallID(i, k int, tc ToolCall) string {
	if tc.ID != "" {
		return tc.ID
	}
	return fmt.Sprintf("call_llmtest_%d_%d", i, k)
}

// complete writes a non-streaming chat.completion object.
func (s *Server) complete(w http.ResponseWriter, i int, chat *ChatRequest, t *Turn) {
	msg := responseMessage{Role: "assistant", Refusal: jsonNull}
	if t.Text != "" || len(t.ToolCalls) == 0 {
		text := t.Text
		msg.Content = &text
	}
	for k, tc := range t.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, MessageToolCall{
			ID:       toolCallID(i, k, tc),
			Type:     "function",
			Function: FunctionCall{Name: tc.Name, Arguments: tc.Arguments},
		})
	}
	writeJSON(w, http.StatusOK, completionJSON{
		ID:      completionID(i),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   chat.Model,
		Choices: []completionChoice{{
			Index:        0,
			Message:      msg,
			Logprobs:     jsonNull,
			FinishReason: finishReason(t),
		}},
		Usage:             toUsageJSON(t.Usage),
		SystemFingerprint: jsonNull,
	})
}

// stream writes the turn as a chat.completion.chunk event stream.
func (s *Server) stream(w http.ResponseWriter, i int, chat *ChatRequest, t *Turn) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)

	id, created, includeUsage := completionID(i), time.Now().Unix(), chat.IncludeUsage()
	send := func(c chunkJSON) bool {
		c.ID, c.Object, c.Created, c.Model, c.SystemFingerprint = id, "chat.completion.chunk", created, chat.Model, jsonNull
		if includeUsage && c.Usage == nil {
			c.Usage = jsonNull
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", marshal(c)); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	delta := func(d deltaJSON, finish *string) bool {
		return send(chunkJSON{Choices: []chunkChoice{{Delta: d, Logprobs: jsonNull, FinishReason: finish}}})
	}

	empty := ""
	if !delta(deltaJSON{Role: "assistant", Content: &empty, Refusal: jsonNull}, nil) {
		return
	}
	for _, piece := range splitChunks(t.Text, s.chunkSize) {
		if !delta(deltaJSON{Content: &piece}, nil) {
			return
		}
	}
	for k, tc := range t.ToolCalls {
		first := toolCallDelta{Index: k, ID: toolCallID(i, k, tc), Type: "function", Function: functionCallDelta{Name: tc.Name}}
		if !delta(deltaJSON{ToolCalls: []toolCallDelta{first}}, nil) {
			return
		}
		for _, piece := range splitChunks(tc.Arguments, s.chunkSize) {
			if !delta(deltaJSON{ToolCalls: []toolCallDelta{{Index: k, Function: functionCallDelta{Arguments: piece}}}}, nil) {
				return
			}
		}
	}
	finish := finishReason(t)
	if !delta(deltaJSON{}, &finish) {
		return
	}
	if includeUsage && t.Usage != nil {
		if !send(chunkJSON{Choices: []chunkChoice{}, Usage: marshal(toUsageJSON(t.Usage))}) {
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err == nil {
		_ = rc.Flush()
	}
}

// splitChunks splits s into pieces of at most n bytes that end on rune
// boundaries (a piece holds at least one rune, even if longer than n).
func splitChunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		end := n
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		if end == 0 {
			_, end = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(marshal(v))
}

func writeError(w http.ResponseWriter, status int, e *apiError) {
	writeJSON(w, status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// ReviewSchema is a JSON Schema for tests of structured answers (generate
// with --schema): a verdict, approve or reject, and a list of comments.
const ReviewSchema = `{
  "type": "object",
  "properties": {
    "verdict": {"type": "string", "enum": ["approve", "reject"]},
    "comments": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["verdict", "comments"],
  "additionalProperties": false
}`

// AgentScript is a Script for an agent that makes side calls besides its
// loop (opencode asks for a title): a request with tools is answered with
// the turn after the model's answers its conversation holds already, and
// one without tools with a line of text. Past the last turn it answers
// an error.
func AgentScript(turns ...Turn) func(int, *Request) Turn {
	return func(_ int, req *Request) Turn {
		if len(req.Chat.Tools) == 0 {
			return Turn{Text: "A title"}
		}
		n := 0
		for _, m := range req.Chat.Messages {
			if m.Role == "assistant" {
				n++
			}
		}
		if n >= len(turns) {
			return Turn{Status: http.StatusBadRequest, Error: fmt.Sprintf("llmtest: the script has %d turns, and the agent asks for turn %d", len(turns), n+1)}
		}
		return turns[n]
	}
}
