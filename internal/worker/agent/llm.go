package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// LLM is an OpenAI-compatible chat completions endpoint, reached through the
// host proxy: the worker holds only the run's token, never an API key.
type LLM struct {
	client  *openai.Client
	baseURL string
	// retries is how many times a request that failed before any answer
	// arrived (connection refused, 429, 5xx) is tried again.
	retries int
	// backoff is the wait before the first retry; it doubles after each.
	backoff time.Duration
	// Outage is how long requests that get no answer at all are tried
	// again: the tunnel to the proxy is down while its host reconnects.
	Outage time.Duration
	logger *slog.Logger
}

// DefaultOutage is how long an LLM request waits out a tunnel outage.
const DefaultOutage = 2 * time.Minute

// maxBackoff is the longest wait between two tries.
const maxBackoff = 5 * time.Second

// NewLLM returns a client for the chat API at baseURL (ending in /v1) that
// authenticates with token as its bearer token and adds header to every
// request.
func NewLLM(baseURL, token string, header http.Header, logger *slog.Logger) *LLM {
	cfg := openai.DefaultConfig(token)
	cfg.BaseURL = strings.TrimSuffix(baseURL, "/")
	cfg.HTTPClient = bodyDoer{client: &http.Client{}, header: header}
	// Keepalive comments (": PROCESSING") are counted as empty messages;
	// a slow upstream may send many.
	cfg.EmptyMessagesLimit = 10000
	return &LLM{client: openai.NewClientWithConfig(cfg), baseURL: cfg.BaseURL, retries: 2, backoff: time.Second, Outage: DefaultOutage, logger: logger}
}

// reply is one assistant answer, reassembled from the stream.
type reply struct {
	Text         string
	ToolCalls    []openai.ToolCall
	FinishReason openai.FinishReason
	Usage        *wireUsage
}

// wireUsage is the usage object of a chat completion, with the fields
// upstreams add to OpenAI's: OpenRouter's cost and cache_write_tokens, and
// the Anthropic-style cache counts some gateways report.
type wireUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	Details          *struct {
		CachedTokens     *int64 `json:"cached_tokens"`
		CacheWriteTokens *int64 `json:"cache_write_tokens"`
	} `json:"prompt_tokens_details"`
	CacheReadInputTokens     *int64   `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int64   `json:"cache_creation_input_tokens"`
	Cost                     *float64 `json:"cost"`
}

// chunk is one event of a streamed chat completion: the fields the worker
// reads and no more, which makes decoding the many small events cheaper.
type chunk struct {
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   string            `json:"content"`
			ToolCalls []openai.ToolCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason openai.FinishReason `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage `json:"usage"`
}

// complete sends req as a streaming request and reassembles the answer.
// Requests the upstream failed with a transient status are retried as
// retries says; requests that got no answer at all, or whose stream broke
// off, are retried for as long as Outage, so that a run survives its host
// reconnecting.
func (l *LLM) complete(ctx context.Context, req *chatRequest) (*reply, error) {
	// go-openai gets the model alone; the body is assembled (see request.go).
	ctx = withBody(ctx, req.body())
	backoff := l.backoff
	var outage time.Time // when requests stopped getting answers
	for attempt := 0; ; attempt++ {
		stream, err := l.client.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: req.model})
		if err == nil {
			r, rerr := readStream(stream)
			stream.Close()
			switch {
			case rerr == nil:
				return r, nil
			case ctx.Err() != nil:
				return nil, ErrInterrupted
			case !errors.Is(rerr, errBrokeOff):
				return nil, rerr
			}
			err = rerr
		}
		if ctx.Err() != nil {
			return nil, l.describe(err)
		}
		if noAnswer(err) {
			if outage.IsZero() {
				outage = time.Now()
			}
			if time.Since(outage) > l.Outage {
				return nil, fmt.Errorf("%w (no answer for %s)", l.describe(err), l.Outage.Round(time.Second))
			}
		} else if !transient(err) || attempt >= l.retries {
			return nil, l.describe(err)
		}
		l.logger.Warn("LLM request failed; retrying", "err", err, "in", backoff)
		t := time.NewTimer(backoff)
		backoff = min(backoff*2, maxBackoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, l.describe(ctx.Err())
		case <-t.C:
		}
	}
}

func readStream(stream *openai.ChatCompletionStream) (*reply, error) {
	r := &reply{}
	var text strings.Builder
	for {
		raw, err := stream.RecvRaw()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errBrokeOff, err)
		}
		var c chunk
		if err := json.Unmarshal(raw, &c); err != nil {
			return nil, fmt.Errorf("LLM stream sent an event that is not a chat completion chunk (%v): %.200s", err, raw)
		}
		if c.Usage != nil {
			r.Usage = c.Usage
		}
		for _, ch := range c.Choices {
			if ch.Index != 0 {
				continue
			}
			text.WriteString(ch.Delta.Content)
			for i, tc := range ch.Delta.ToolCalls {
				r.addToolDelta(i, tc)
			}
			if ch.FinishReason != "" {
				r.FinishReason = ch.FinishReason
			}
		}
	}
	if r.FinishReason == "" {
		return nil, errors.New("LLM stream ended before the answer was complete (no finish_reason)")
	}
	r.Text = text.String()
	return r, nil
}

// addToolDelta folds one streamed tool-call fragment into the answer: the
// first fragment of a call brings its id and name, later ones pieces of its
// arguments, matched by index.
func (r *reply) addToolDelta(pos int, d openai.ToolCall) {
	idx := pos
	if d.Index != nil {
		idx = *d.Index
	}
	for len(r.ToolCalls) <= idx {
		r.ToolCalls = append(r.ToolCalls, openai.ToolCall{Type: openai.ToolTypeFunction})
	}
	tc := &r.ToolCalls[idx]
	if d.ID != "" {
		tc.ID = d.ID
	}
	tc.Function.Name += d.Function.Name
	tc.Function.Arguments += d.Function.Arguments
}

// errBrokeOff: the answer's stream ended before it was complete.
var errBrokeOff = errors.New("LLM stream broke off")

// noAnswer says whether err means no answer came at all: the connection
// was refused, reset or cut, rather than an HTTP error.
func noAnswer(err error) bool {
	if errors.Is(err, errBrokeOff) {
		return true
	}
	if _, ok := errors.AsType[*openai.APIError](err); ok {
		return false
	}
	if _, ok := errors.AsType[*openai.RequestError](err); ok {
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// transient says whether an answer that is an HTTP error is worth another
// attempt: a rate limit, a server or gateway error. (No answer at all is
// noAnswer's.)
func transient(err error) bool {
	if apiErr, ok := errors.AsType[*openai.APIError](err); ok {
		return transientStatus(apiErr.HTTPStatusCode)
	}
	if reqErr, ok := errors.AsType[*openai.RequestError](err); ok {
		return transientStatus(reqErr.HTTPStatusCode)
	}
	return false
}

func transientStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// describe turns a client error into one line that says what failed.
func (l *LLM) describe(err error) error {
	what := "LLM request" + l.to()
	if apiErr, ok := errors.AsType[*openai.APIError](err); ok {
		return fmt.Errorf("%s failed: HTTP %d: %s", what, apiErr.HTTPStatusCode, apiErr.Message)
	}
	if reqErr, ok := errors.AsType[*openai.RequestError](err); ok {
		msg := http.StatusText(reqErr.HTTPStatusCode)
		if len(reqErr.Body) > 0 {
			msg = strings.TrimSpace(string(reqErr.Body))
		}
		return fmt.Errorf("%s failed: HTTP %d: %.300s", what, reqErr.HTTPStatusCode, msg)
	}
	if errors.Is(err, context.Canceled) {
		return ErrInterrupted
	}
	return fmt.Errorf("%s failed: %w", what, err)
}

// to names where requests go, for messages: nothing when that is the
// tunnel to amelia's proxy on the sandbox's loopback (an address the user
// never configured; the proxy's errors name the upstream), else " to URL".
func (l *LLM) to() string {
	if u, err := url.Parse(l.baseURL); err == nil {
		if ip, err := netip.ParseAddr(u.Hostname()); (err == nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return ""
		}
	}
	return " to " + l.baseURL
}

// ErrInterrupted is the failure of a run stopped by a signal.
var ErrInterrupted = errors.New("interrupted")
