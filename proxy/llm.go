package proxy

import (
	"bytes"
	"context"
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
	"time"
)

// OpenRouter asks apps to name themselves with these headers.
const (
	openRouterReferer = "https://github.com/amelia-sandbox/amelia"
	openRouterTitle   = "Amelia"
)

// upstream forwards one LLM route of a run.
type upstream struct {
	route      string
	prefix     string // the route's path prefix, replaced by base's path
	base       *url.URL
	key        string
	timeout    time.Duration
	maxBody    int64
	openRouter bool
	rp         *httputil.ReverseProxy
}

func newUpstream(route string, u Upstream, cfg RunConfig, log *slog.Logger) (*upstream, error) {
	base, err := url.Parse(u.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("base URL %q is not an absolute http(s) URL", redact(u.BaseURL))
	}
	host := strings.ToLower(base.Hostname())
	up := &upstream{
		route:      route,
		prefix:     map[string]string{routeOpenAI: openAIPrefix, routeAnthropic: anthropicPrefix}[route],
		base:       base,
		key:        u.Key,
		timeout:    cfg.Timeout,
		maxBody:    cfg.MaxRequestBytes,
		openRouter: host == "openrouter.ai" || strings.HasSuffix(host, ".openrouter.ai"),
	}
	up.rp = &httputil.ReverseProxy{
		Rewrite: up.rewrite,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   32,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   30 * time.Second,
			ExpectContinueTimeout: time.Second,
			ResponseHeaderTimeout: cfg.Timeout,
		},
		// Every write is flushed at once: a streamed event reaches the
		// sandbox as soon as it leaves the upstream.
		FlushInterval:  -1,
		ModifyResponse: up.modifyResponse,
		ErrorHandler:   up.errorHandler,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return up, nil
}

// recordKey carries a request's audit record to the ReverseProxy hooks.
type recordKey struct{}

func recordOf(ctx context.Context) *Record {
	rec, _ := ctx.Value(recordKey{}).(*Record)
	return rec
}

// serve forwards req. The body is read first, up to the limit, so an
// oversized request is refused before anything reaches the upstream.
func (u *upstream) serve(w http.ResponseWriter, req *http.Request, rec *Record) {
	rec.Upstream = u.base.Host
	if req.ContentLength > u.maxBody {
		u.tooLarge(w)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, u.maxBody+1))
	switch {
	case err != nil:
		writeError(w, u.route, http.StatusBadRequest, "bad_request", "read request body: "+err.Error())
		return
	case int64(len(body)) > u.maxBody:
		u.tooLarge(w)
		return
	}
	rec.RequestBytes = int64(len(body))
	req.ContentLength = int64(len(body))
	req.Body = http.NoBody
	if len(body) > 0 {
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	// Deferred: when the run ends while the body is still streaming, the
	// reverse proxy aborts the handler with a panic (http.ErrAbortHandler),
	// and the usage already seen must still reach the audit record.
	defer func() {
		if rec.sniff != nil {
			rec.usage(rec.sniff.result())
		}
	}()
	u.rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), recordKey{}, rec)))
}

func (u *upstream) tooLarge(w http.ResponseWriter) {
	writeError(w, u.route, http.StatusRequestEntityTooLarge, "request_too_large",
		fmt.Sprintf("request body larger than %d bytes (the profile's proxy.max_request_bytes)", u.maxBody))
}

// rewrite points the request at the upstream: base path + the rest of the
// route's path, the upstream's key instead of the sandbox's token, and
// nothing of the sandbox's credentials or Amelia's own headers. (The
// hop-by-hop and X-Forwarded-* headers are gone before Rewrite runs.)
func (u *upstream) rewrite(pr *httputil.ProxyRequest) {
	in, out := pr.In, pr.Out
	// The path is canonical (ServeHTTP): nothing in it is encoded.
	rest := strings.TrimPrefix(in.URL.Path, strings.TrimSuffix(u.prefix, "/"))
	out.URL = &url.URL{Scheme: u.base.Scheme, Host: u.base.Host, Path: strings.TrimSuffix(u.base.Path, "/") + rest, RawQuery: in.URL.RawQuery}
	out.Host = ""
	h := out.Header
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Amelia-") {
			delete(h, k)
		}
	}
	h.Del("Authorization")
	h.Del("X-Api-Key")
	h.Del("Proxy-Authorization")
	h.Del("Cookie")
	// The transport asks for gzip itself and decompresses, so the usage in
	// the response can be read and the sandbox gets it plain.
	h.Del("Accept-Encoding")
	if u.key != "" {
		if u.route == routeAnthropic {
			h.Set("X-Api-Key", u.key)
		} else {
			h.Set("Authorization", "Bearer "+u.key)
		}
	}
	if u.openRouter {
		h.Set("HTTP-Referer", openRouterReferer)
		h.Set("X-Title", openRouterTitle)
	}
}

// modifyResponse starts reading the usage the upstream reports as the body
// streams through.
func (u *upstream) modifyResponse(resp *http.Response) error {
	rec := recordOf(resp.Request.Context())
	if rec == nil {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		rec.sniff = &sseSniffer{}
	case "application/json":
		rec.sniff = &jsonSniffer{}
	default:
		return nil
	}
	resp.Body = &sniffingBody{ReadCloser: resp.Body, s: rec.sniff}
	return nil
}

// errorHandler answers when the upstream could not be asked or did not
// answer: 504 on a timeout, 502 otherwise. The message names the upstream
// as the profile's llm.base_url does, and the cause, never the key.
func (u *upstream) errorHandler(w http.ResponseWriter, req *http.Request, err error) {
	rec := recordOf(req.Context())
	status, code, msg := http.StatusBadGateway, "upstream_unreachable", ""
	var ne net.Error
	switch {
	case req.Context().Err() != nil:
		// The sandbox went away, or the run ended: nobody to answer.
		status, code, msg = http.StatusServiceUnavailable, "canceled", "request canceled (the client went away or the run ended)"
	case errors.As(err, &ne) && ne.Timeout():
		status, code = http.StatusGatewayTimeout, "upstream_timeout"
		msg = fmt.Sprintf("upstream %s timed out: %s (llm.timeout is %s)", u.base.Redacted(), cause(err), u.timeout)
	default:
		msg = fmt.Sprintf("cannot reach upstream %s: %s", u.base.Redacted(), cause(err))
	}
	if u.key != "" {
		msg = strings.ReplaceAll(msg, u.key, "****")
	}
	if rec != nil {
		rec.Error = msg
	}
	writeError(w, u.route, status, code, msg)
}

// cause is the innermost useful part of a transport error: for network
// errors the system's reason ("connect: connection refused") rather than
// the whole chain.
func cause(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Op + ": " + oe.Err.Error()
	}
	return err.Error()
}

// redact hides a URL's password for messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}
