package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// auditLog is a run's audit file: one JSON line per request.
type auditLog struct {
	path    string
	run     string
	profile string

	mu sync.Mutex
	f  *os.File
}

func openAuditLog(dir, run, profile string) (*auditLog, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("audit directory %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create audit directory: %w", err)
	}
	path := filepath.Join(dir, run+".jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return &auditLog{path: path, run: run, profile: profile, f: f}, nil
}

// Close closes the file; later records are dropped.
func (a *auditLog) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// Record is one line of the audit log. It holds no header, body, key or
// token; Path is the API path without its query.
type Record struct {
	Time                time.Time `json:"time"`
	Run                 string    `json:"run"`
	Profile             string    `json:"profile"`
	Route               string    `json:"route"`
	Method              string    `json:"method"`
	Path                string    `json:"path,omitempty"`
	Upstream            string    `json:"upstream,omitempty"`
	Status              int       `json:"status"`
	RequestBytes        int64     `json:"request_bytes"`
	ResponseBytes       int64     `json:"response_bytes"`
	DurationMS          float64   `json:"duration_ms"`
	InputTokens         *int64    `json:"input_tokens,omitempty"`
	OutputTokens        *int64    `json:"output_tokens,omitempty"`
	CacheReadTokens     *int64    `json:"cache_read_tokens,omitempty"`
	CacheCreationTokens *int64    `json:"cache_creation_tokens,omitempty"`
	CostUSD             *float64  `json:"cost_usd,omitempty"`
	// MCPServer is the MCP server of an mcp session or mcp-call record;
	// Tool is the tool an mcp-call called, and IsError what its result
	// said (absent when there was no result).
	MCPServer string `json:"mcp_server,omitempty"`
	Tool      string `json:"tool,omitempty"`
	IsError   *bool  `json:"is_error,omitempty"`
	Error     string `json:"error,omitempty"`
	// Translated names a request translated from the client's API to the
	// upstream's: "anthropic->openai" or "openai->anthropic".
	Translated string `json:"translated,omitempty"`

	start time.Time
	w     *countingWriter
	sniff sniffer
}

func (a *auditLog) begin(req *http.Request, route string) *Record {
	now := time.Now()
	rec := &Record{Time: now.UTC(), Run: a.run, Profile: a.profile, Route: route, Method: req.Method, start: now}
	if route != routeConnect && route != routeEgressHTTP {
		rec.Path = req.URL.Path
	}
	return rec
}

// wrap returns w counting what is written to it into rec.
func (rec *Record) wrap(w http.ResponseWriter) http.ResponseWriter {
	rec.w = &countingWriter{ResponseWriter: w}
	return rec.w
}

// usage fills in the token counts an upstream reported.
func (rec *Record) usage(u *usage) {
	rec.InputTokens, rec.OutputTokens = u.input, u.output
	rec.CacheReadTokens, rec.CacheCreationTokens = u.cacheRead, u.cacheCreation
	rec.CostUSD = u.cost
}

// end writes rec to the log.
func (a *auditLog) end(rec *Record) {
	rec.DurationMS = float64(time.Since(rec.start).Microseconds()) / 1000
	if rec.w != nil {
		if rec.Status == 0 {
			rec.Status = rec.w.status
		}
		rec.ResponseBytes += rec.w.n
	}
	if rec.Status == 0 {
		rec.Status = http.StatusOK
	}
	a.write(rec)
}

// write writes rec to the log as it is, but for its duration.
func (a *auditLog) write(rec *Record) {
	if rec.DurationMS == 0 {
		rec.DurationMS = float64(time.Since(rec.start).Microseconds()) / 1000
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		a.f.Write(append(line, '\n'))
	}
}

// countingWriter records the status and counts the body bytes written. It
// unwraps for http.ResponseController, so flushing and hijacking reach the
// connection.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
