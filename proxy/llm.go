package proxy

import (
	"bytes"
	"cmp"
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
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/internal/llmwire"
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
		prefix:     map[string]string{routeOpenAI: openAIPrefix, routeAnthropic: anthropicPrefix, routeGemini: geminiPrefix}[route],
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

// translationKey carries a request's translation to the ReverseProxy
// hooks.
type translationKey struct{}

// translation is a request translated from the client's API to the
// upstream's; info, filled in by serve, is what translating the response
// needs.
type translation struct {
	from  llmwire.API // the client's
	route string      // the client's, whose error shape it gets
	model string      // the run's model, "" for the client's
	info  llmwire.RequestInfo
}

func translationOf(ctx context.Context) *translation {
	tr, _ := ctx.Value(translationKey{}).(*translation)
	return tr
}

func recordOf(ctx context.Context) *Record {
	rec, _ := ctx.Value(recordKey{}).(*Record)
	return rec
}

// serve forwards req, translated by tr unless it is nil. The body is read
// first, up to the limit, so an oversized request is refused before
// anything reaches the upstream.
func (u *upstream) serve(w http.ResponseWriter, req *http.Request, rec *Record, tr *translation) {
	rec.Upstream = u.base.Host
	route := u.route
	if tr != nil {
		route = tr.route
	}
	if req.ContentLength > u.maxBody {
		u.tooLarge(w, route)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, u.maxBody+1))
	switch {
	case err != nil:
		writeError(w, route, http.StatusBadRequest, "bad_request", "read request body: "+err.Error())
		return
	case int64(len(body)) > u.maxBody:
		u.tooLarge(w, route)
		return
	}
	rec.RequestBytes = int64(len(body))
	ctx := context.WithValue(req.Context(), recordKey{}, rec)
	if tr != nil {
		opts := llmwire.RequestOptions{Model: tr.model, MaxCompletionTokens: strings.EqualFold(u.base.Hostname(), "api.openai.com")}
		if body, tr.info, err = llmwire.TranslateRequest(tr.from, body, opts); err != nil {
			status := http.StatusBadRequest
			var re *llmwire.RequestError
			if errors.As(err, &re) {
				status = re.Status
			}
			rec.Error = "translate the request: " + err.Error()
			writeError(w, route, status, "invalid_request", "the proxy could not translate the request to the upstream's API: "+err.Error())
			return
		}
		// The upstream's own path for it, which rewrite maps to its base.
		req.URL.Path, req.URL.RawPath, req.URL.RawQuery = u.prefix+translatedPath[tr.from.Other()][1:], "", ""
		req.Header.Set("Content-Type", "application/json")
		ctx = context.WithValue(ctx, translationKey{}, tr)
	}
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
	u.rp.ServeHTTP(w, req.WithContext(ctx))
}

func (u *upstream) tooLarge(w http.ResponseWriter, route string) {
	writeError(w, route, http.StatusRequestEntityTooLarge, "request_too_large",
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
	if u.route == routeGemini {
		out.URL.RawQuery = withoutKeyParam(out.URL.RawQuery)
	}
	out.Host = ""
	h := out.Header
	for k := range h {
		if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Amelia-") {
			delete(h, k)
		}
	}
	h.Del("Authorization")
	h.Del("X-Api-Key")
	h.Del("X-Goog-Api-Key")
	h.Del("Proxy-Authorization")
	h.Del("Cookie")
	// The transport asks for gzip itself and decompresses, so the usage in
	// the response can be read and the sandbox gets it plain.
	h.Del("Accept-Encoding")
	if u.key != "" {
		switch u.route {
		case routeAnthropic:
			h.Set("X-Api-Key", u.key)
		case routeGemini:
			h.Set("X-Goog-Api-Key", u.key)
		default:
			h.Set("Authorization", "Bearer "+u.key)
		}
	}
	if tr := translationOf(in.Context()); tr != nil {
		// Nothing of the client's API goes to an upstream of the other:
		// its version and beta headers, its SDK's organisation headers.
		clientPrefix := map[llmwire.API]string{llmwire.Anthropic: "Anthropic-", llmwire.OpenAI: "Openai-"}[tr.from]
		for k := range h {
			if strings.HasPrefix(http.CanonicalHeaderKey(k), clientPrefix) {
				delete(h, k)
			}
		}
		if u.route == routeAnthropic {
			h.Set("Anthropic-Version", llmwire.AnthropicVersion)
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
	}
	if rec.sniff != nil {
		resp.Body = &sniffingBody{ReadCloser: resp.Body, s: rec.sniff}
	}
	if tr := translationOf(resp.Request.Context()); tr != nil {
		if err := u.translateResponse(resp, tr, mt); err != nil {
			return &translateError{err}
		}
	}
	return nil
}

// translateError is a response the proxy could not translate.
type translateError struct{ err error }

func (e *translateError) Error() string { return e.err.Error() }
func (e *translateError) Unwrap() error { return e.err }

// translateResponse turns the upstream's response into the client's API:
// an error body into the client's error shape, a JSON body at once, an
// event stream event by event as it arrives.
func (u *upstream) translateResponse(resp *http.Response, tr *translation, mt string) error {
	upAPI := tr.from.Other()
	h := resp.Header
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	resp.ContentLength = -1
	switch {
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		body, err := readKept(resp.Body)
		if err != nil {
			return err
		}
		setBody(resp, llmwire.TranslateError(upAPI, resp.StatusCode, body))
	case mt == "text/event-stream":
		tb := &translatingBody{src: resp.Body, buf: make([]byte, 32<<10)}
		tb.st = llmwire.NewStreamTranslator(upAPI, &tb.out, tr.info)
		resp.Body = tb
	case mt == "application/json":
		body, err := readKept(resp.Body)
		if err != nil {
			return err
		}
		out, err := llmwire.TranslateResponse(upAPI, body, tr.info)
		if err != nil {
			return fmt.Errorf("translate the response: %w", err)
		}
		setBody(resp, out)
	default:
		resp.Body.Close()
		return fmt.Errorf("the upstream answered %s, which the proxy cannot translate", cmp.Or(mt, "without a content type"))
	}
	return nil
}

// readKept reads and closes a body of at most llmwire.MaxKept bytes.
func readKept(body io.ReadCloser) ([]byte, error) {
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, llmwire.MaxKept+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read the response: %w", err)
	case len(b) > llmwire.MaxKept:
		return nil, fmt.Errorf("the response is over %d bytes, more than the proxy translates", llmwire.MaxKept)
	}
	return b, nil
}

func setBody(resp *http.Response, b []byte) {
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Type", "application/json")
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
}

// translatingBody is an event stream translated as it is read: each Read
// reads the upstream's body until a translated event is ready, and returns
// it, so the reverse proxy writes and flushes it at once.
type translatingBody struct {
	src io.ReadCloser
	st  *llmwire.StreamTranslator
	out bytes.Buffer
	buf []byte
	eof bool
}

func (b *translatingBody) Read(p []byte) (int, error) {
	for b.out.Len() == 0 {
		if b.eof {
			return 0, io.EOF
		}
		n, err := b.src.Read(b.buf)
		if n > 0 {
			if _, werr := b.st.Write(b.buf[:n]); werr != nil {
				return 0, werr
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			b.eof = true
			if cerr := b.st.Close(); cerr != nil {
				return 0, cerr
			}
		case err != nil:
			return 0, err
		}
	}
	return b.out.Read(p)
}

func (b *translatingBody) Close() error { return b.src.Close() }

// errorHandler answers when the upstream could not be asked or did not
// answer: 504 on a timeout, 502 otherwise. The message names the upstream
// as the profile's llm.base_url does, and the cause, never the key.
func (u *upstream) errorHandler(w http.ResponseWriter, req *http.Request, err error) {
	rec := recordOf(req.Context())
	status, code, msg := http.StatusBadGateway, "upstream_unreachable", ""
	var ne net.Error
	var te *translateError
	switch {
	case errors.As(err, &te):
		code, msg = "translation_failed", fmt.Sprintf("the proxy could not translate the answer of upstream %s: %s", u.base.Redacted(), te.err)
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
	route := u.route
	if tr := translationOf(req.Context()); tr != nil {
		route = tr.route
	}
	writeError(w, route, status, code, msg)
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
