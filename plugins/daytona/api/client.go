package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// DefaultURL is Daytona's hosted API.
const DefaultURL = "https://app.daytona.io/api"

// Client calls Daytona's API with an API key. It is safe for concurrent
// use. The key goes in the Authorization header and nowhere else: not in
// errors, not in logs.
type Client struct {
	base   string
	key    string
	org    string
	http   *http.Client
	logger *slog.Logger
	// timeout bounds one attempt of a call (startTimeout for a start).
	timeout time.Duration
	// MaxWait bounds how long one call waits out 429s and 5xx answers in
	// all; default 2 minutes (and never past the context's deadline).
	maxWait time.Duration
}

// Options configure a Client.
type Options struct {
	// BaseURL is the API's URL; default DefaultURL.
	BaseURL string
	// APIKey is sent as a bearer token.
	APIKey string
	// Organization, when set, is sent as X-Daytona-Organization-ID.
	Organization string
	// HTTPClient defaults to http.DefaultClient's transport; each attempt
	// of a call is bounded by RequestTimeout whatever the client says.
	HTTPClient *http.Client
	// RequestTimeout bounds one attempt of a call; default 30 s. A start
	// gets startTimeout more: Daytona answers it once the sandbox is
	// started, or after 30 s.
	RequestTimeout time.Duration
	// MaxWait bounds the retries of one call (429 and 5xx); default 2 min.
	MaxWait time.Duration
	Logger  *slog.Logger
}

// New returns a client.
func New(opts Options) (*Client, error) {
	base := strings.TrimRight(opts.BaseURL, "/")
	if base == "" {
		base = DefaultURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, sdk.Errorf(sdk.ErrInvalid, "daytona.api_url: %q is not an http(s) URL", opts.BaseURL)
	}
	if opts.APIKey == "" {
		return nil, sdk.Errorf(sdk.ErrInvalid, "daytona: no API key")
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = &http.Client{}
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 30 * time.Second
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = 2 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Client{base: base, key: opts.APIKey, org: opts.Organization, http: opts.HTTPClient, logger: opts.Logger, maxWait: opts.MaxWait, timeout: opts.RequestTimeout}, nil
}

// Error is an error answer of the API.
type Error struct {
	Method, Path string
	Status       int
	Message      string
}

func (e *Error) Error() string {
	return fmt.Sprintf("daytona %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), e.Message)
}

// Unwrap maps the status to the SDK's sentinel errors.
func (e *Error) Unwrap() error {
	switch {
	case e.Status == http.StatusNotFound:
		return sdk.ErrNotFound
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden:
		return sdk.ErrPermission
	case e.Status == http.StatusConflict:
		return sdk.ErrConflict
	case e.Status == http.StatusTooManyRequests || e.Status >= 500:
		return sdk.ErrUnavailable
	case e.Status >= 400:
		return sdk.ErrInvalid
	}
	return nil
}

// StatusOf returns the HTTP status of an API error, or 0.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// ListSandboxes returns every sandbox carrying all of labels, following
// the pages' cursors.
func (c *Client) ListSandboxes(ctx context.Context, labels map[string]string) ([]Sandbox, error) {
	q := url.Values{"limit": {"200"}}
	if len(labels) > 0 {
		b, _ := json.Marshal(labels)
		q.Set("labels", string(b))
	}
	var all []Sandbox
	for {
		var page ListSandboxesResponse
		if err := c.do(ctx, http.MethodGet, c.base+"/sandbox", q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.NextCursor == nil || *page.NextCursor == "" {
			return all, nil
		}
		q.Set("cursor", *page.NextCursor)
	}
}

// GetSandbox returns a sandbox by id or name.
func (c *Client) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodGet, c.sandboxURL(id, ""), nil, nil, &sb)
	return sb, err
}

// CreateSandbox creates a sandbox; it comes back creating (or building)
// and is started when GetSandbox says so.
func (c *Client) CreateSandbox(ctx context.Context, req CreateSandbox) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodPost, c.base+"/sandbox", nil, req, &sb)
	return sb, err
}

// CreateSnapshot creates a snapshot; one made from BuildInfo comes back
// pending and is active (or build_failed) when GetSnapshot says so. A
// name taken already is 409.
func (c *Client) CreateSnapshot(ctx context.Context, req CreateSnapshot) (Snapshot, error) {
	var s Snapshot
	err := c.do(ctx, http.MethodPost, c.base+"/snapshots", nil, req, &s)
	return s, err
}

// GetSnapshot finds a snapshot by its name (the organization's, else a
// general one) or its id.
func (c *Client) GetSnapshot(ctx context.Context, idOrName string) (Snapshot, error) {
	var s Snapshot
	err := c.do(ctx, http.MethodGet, c.base+"/snapshots/"+url.PathEscape(idOrName), nil, nil, &s)
	return s, err
}

// ListSnapshots returns the organization's snapshots (and Daytona's
// general ones), following the pages (GET /snapshots: page, limit).
func (c *Client) ListSnapshots(ctx context.Context) ([]Snapshot, error) {
	var all []Snapshot
	for page := 1; ; page++ {
		var res PaginatedSnapshots
		q := url.Values{"page": {strconv.Itoa(page)}, "limit": {"100"}}
		if err := c.do(ctx, http.MethodGet, c.base+"/snapshots", q, nil, &res); err != nil {
			return nil, err
		}
		all = append(all, res.Items...)
		if len(res.Items) == 0 || page >= res.TotalPages {
			return all, nil
		}
	}
}

// DeleteSnapshot removes a snapshot, by its id.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, c.base+"/snapshots/"+url.PathEscape(id), nil, nil, nil)
}

// startWait is how long Daytona's POST /sandbox/{id}/start may hold its
// answer: it waits for the sandbox to be started, up to 30 s
// (sandbox.controller.ts startSandbox, waitForSandboxStarted).
const startWait = 30 * time.Second

// StartSandbox starts a stopped or archived sandbox, or resumes a paused
// one (a VM's; others answer 422). The answer is the sandbox when it
// started, or as it was after Daytona's wait: not necessarily started.
func (c *Client) StartSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.doFor(ctx, c.timeout+startWait, http.MethodPost, c.sandboxURL(id, "/start"), nil, nil, &sb)
	return sb, err
}

// StopSandbox stops a started (or paused) sandbox. The answer shows the
// change asked for (desiredState stopped), not its end.
func (c *Client) StopSandbox(ctx context.Context, id string) (Sandbox, error) {
	var sb Sandbox
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "/stop"), nil, nil, &sb)
	return sb, err
}

// DeleteSandbox deletes a sandbox: Daytona marks it (desiredState
// destroyed, a new name) and destroys it later. While a state change is
// pending it answers 409.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, c.sandboxURL(id, ""), nil, nil, nil)
}

// SetAutoStopInterval sets how many idle minutes stop the sandbox (0
// never does).
func (c *Client) SetAutoStopInterval(ctx context.Context, id string, minutes int) error {
	return c.do(ctx, http.MethodPost, c.sandboxURL(id, "/autostop/"+strconv.Itoa(minutes)), nil, nil, nil)
}

// CreateSSHAccess mints an SSH gateway token for a sandbox, valid for
// minutes. Daytona revokes every other token of the sandbox as it does
// (sandbox.service.ts createSshAccess).
func (c *Client) CreateSSHAccess(ctx context.Context, id string, minutes int) (SSHAccess, error) {
	var a SSHAccess
	q := url.Values{"expiresInMinutes": {strconv.Itoa(minutes)}}
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "/ssh-access"), q, nil, &a)
	return a, err
}

// RevokeSSHAccess revokes one token of a sandbox, or all of them when
// token is empty.
func (c *Client) RevokeSSHAccess(ctx context.Context, id, token string) error {
	var q url.Values
	if token != "" {
		q = url.Values{"token": {token}}
	}
	return c.do(ctx, http.MethodDelete, c.sandboxURL(id, "/ssh-access"), q, nil, nil)
}

// Execute runs a command through the sandbox's toolbox
// ({toolboxProxyUrl}/{sandboxId}/process/execute): the command's output
// and exit code once it has ended.
func (c *Client) Execute(ctx context.Context, sb Sandbox, req ExecuteRequest) (ExecuteResponse, error) {
	var res ExecuteResponse
	u := strings.TrimRight(sb.ToolboxProxyURL, "/") + "/" + url.PathEscape(sb.ID) + "/process/execute"
	err := c.do(ctx, http.MethodPost, u, nil, req, &res)
	return res, err
}

func (c *Client) sandboxURL(id, rest string) string {
	return c.base + "/sandbox/" + url.PathEscape(id) + rest
}

// do sends one call, waiting out 429s (as retryAfter reads their
// headers) and, for GETs, 5xx answers and dropped connections, within
// MaxWait.
func (c *Client) do(ctx context.Context, method, u string, q url.Values, in, out any) error {
	return c.doFor(ctx, c.timeout, method, u, q, in, out)
}

// doFor is do with each attempt bounded by timeout.
func (c *Client) doFor(ctx context.Context, timeout time.Duration, method, u string, q url.Values, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("daytona %s %s: encode the request: %w", method, u, err)
		}
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	path := u
	if pu, err := url.Parse(u); err == nil {
		path = pu.Path
	}
	deadline := time.Now().Add(c.maxWait)
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		wait, err := c.once(ctx, timeout, method, u, path, body, out)
		if wait < 0 {
			return err
		}
		if wait == 0 {
			wait = backoff + rand.N(backoff/2)
			backoff = min(backoff*2, 10*time.Second)
		}
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		if d, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(d) {
			return err
		}
		c.logger.Debug("daytona API: trying again", "method", method, "path", path, "attempt", attempt, "in", wait, "reason", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (then %w)", err, ctx.Err())
		}
	}
}

// once sends the call once. wait < 0: done (err is the result); wait == 0:
// try again after a backoff; wait > 0: try again after wait.
func (c *Client) once(ctx context.Context, timeout time.Duration, method, u, path string, body []byte, out any) (time.Duration, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return -1, fmt.Errorf("daytona %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.org != "" {
		req.Header.Set("X-Daytona-Organization-ID", c.org)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		err = sdk.Errorf(sdk.ErrUnavailable, "daytona %s %s: %v", method, path, scrub(err))
		if parent.Err() != nil || method != http.MethodGet {
			return -1, err
		}
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return -1, sdk.Errorf(sdk.ErrUnavailable, "daytona %s %s: read the answer: %v", method, path, err)
	}
	if resp.StatusCode < 300 {
		if out == nil || len(bytes.TrimSpace(data)) == 0 {
			return -1, nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return -1, fmt.Errorf("daytona %s %s: decode the answer: %w", method, path, err)
		}
		return -1, nil
	}
	apiErr := &Error{Method: method, Path: path, Status: resp.StatusCode, Message: message(data)}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return retryAfter(resp.Header), apiErr
	case resp.StatusCode >= 500 && method == http.MethodGet:
		return 0, apiErr
	}
	return -1, apiErr
}

// message is the error message of an error body: the API's message
// (joined, when it is a list), else the body itself, cut short.
func message(data []byte) string {
	var b ErrorBody
	if json.Unmarshal(data, &b) == nil {
		switch m := b.Message.(type) {
		case string:
			if m != "" {
				return m
			}
		case []any:
			var parts []string
			for _, p := range m {
				parts = append(parts, fmt.Sprint(p))
			}
			if len(parts) > 0 {
				return strings.Join(parts, "; ")
			}
		}
		if b.Error != "" {
			return b.Error
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		s = "(no message)"
	}
	return s
}

// retryAfter reads how long a 429 asks to wait. Daytona's API limits
// with @nestjs/throttler and named throttlers (authenticated,
// sandbox-create, sandbox-lifecycle: apps/api/src/app.module.ts), which
// suffix every header with the throttler's name: the one that refused
// sends Retry-After-<name> (seconds), and those that let the request by
// send X-RateLimit-Remaining-<name> and X-RateLimit-Reset-<name>. The bare
// names (a proxy's, or a throttler named "default") are read too.
// Retry-After, named or bare, is the refusal's own answer and wins; else
// the resets of windows with no room left. Of several, the longest wins:
// each must have passed for the call to get through. 0 when none says.
func retryAfter(h http.Header) time.Duration {
	var retry, reset time.Duration
	var retried bool
	for k, vs := range h {
		if len(vs) == 0 {
			continue
		}
		k = http.CanonicalHeaderKey(k)
		switch {
		case k == "Retry-After" || strings.HasPrefix(k, "Retry-After-"):
			if d, ok := delay(vs[0], true); ok {
				retry, retried = max(retry, d), true
			}
		case k == "X-Ratelimit-Reset" || strings.HasPrefix(k, "X-Ratelimit-Reset-"):
			// A window that still has room does not hold the call back.
			if rem := h.Get("X-Ratelimit-Remaining" + strings.TrimPrefix(k, "X-Ratelimit-Reset")); rem != "" && rem != "0" {
				continue
			}
			if d, ok := delay(vs[0], false); ok {
				reset = max(reset, d)
			}
		}
	}
	if retried {
		return retry
	}
	return reset
}

// delay reads a wait: seconds, or (for Retry-After) an HTTP date, or (for
// a reset) a Unix time.
func delay(v string, date bool) (time.Duration, bool) {
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		if !date && s > 1e9 { // a Unix time
			return max(time.Until(time.Unix(int64(s), 0)), 0), true
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if date {
		if t, err := http.ParseTime(v); err == nil {
			return max(time.Until(t), 0), true
		}
	}
	return 0, false
}

// scrub drops the URL from a transport error: it holds no secret, but the
// message is shorter without it.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
