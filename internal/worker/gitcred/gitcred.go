// Package gitcred is git's credential helper inside a sandbox: git runs
// `amelia-worker git-credential get`, and the request goes through the
// tunnel to the host proxy's /git/credentials route. git in the sandbox
// reaches the run's repositories through the proxy's git route, and what
// the proxy answers is the credential for that: the run's token. The
// forge's credential never leaves the host (the proxy adds it on the way
// out), and nothing is stored in the sandbox.
package gitcred

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/gitcredential"
	"github.com/amelia-sandbox/amelia/core/protocol"
)

// Helper forwards git credential requests to the proxy.
//
// It works in amelia's environment (AMELIA_PROXY_URL, the proxy's root,
// and the run token) and in the Python Amelia's (LLM_PROXY_URL, which
// already ends in /proxy/v1 or /v1, and AMELIA_PROFILE), as that one's
// credential-helper.sh does: it posts to ROOT/git/credentials, or else to
// LLM_PROXY_URL/git/credentials, with the run token as its bearer token and
// in X-Amelia-Proxy-Token when it has one, and X-Amelia-Profile (default
// "default", as the Python helper sends).
type Helper struct {
	ProxyURL    string // the proxy's root URL, AMELIA_PROXY_URL
	LLMProxyURL string // the Python Amelia's LLM_PROXY_URL, used when ProxyURL is empty
	Token       string // the run token, AMELIA_PROXY_TOKEN; required with ProxyURL
	Profile     string // AMELIA_PROFILE
	Client      *http.Client
}

// defaultProfile is the profile the Python helper names when
// AMELIA_PROFILE is not set.
const defaultProfile = "default"

// endpoint is the URL the requests go to.
func (h *Helper) endpoint() (string, error) {
	switch {
	case h.ProxyURL != "":
		if h.Token == "" {
			return "", errors.New("AMELIA_PROXY_TOKEN must be set with AMELIA_PROXY_URL: this helper works only inside an amelia sandbox")
		}
		return strings.TrimSuffix(h.ProxyURL, "/") + gitcredential.ProxyRoute, nil
	case h.LLMProxyURL != "":
		return strings.TrimSuffix(h.LLMProxyURL, "/") + gitcredential.ProxyRoute, nil
	}
	return "", errors.New("AMELIA_PROXY_URL and AMELIA_PROXY_TOKEN (or the Python Amelia's LLM_PROXY_URL) must be set: this helper works only inside an amelia sandbox")
}

// Run performs the credential operation op ("get", "store" or "erase") with
// git's request on in; for "get" the answer goes to out. "store" and "erase"
// are read and ignored: the host owns the credentials.
func (h *Helper) Run(ctx context.Context, op string, in io.Reader, out io.Writer) error {
	switch op {
	case "store", "erase":
		_, err := io.Copy(io.Discard, io.LimitReader(in, gitcredential.MaxMessage))
		return err
	case "get":
	default:
		return fmt.Errorf("unknown operation %q: git calls credential helpers with get, store or erase", op)
	}
	url, err := h.endpoint()
	if err != nil {
		return err
	}
	req, err := gitcredential.Read(in)
	if err != nil {
		return fmt.Errorf("read git's request: %w", err)
	}
	answer, err := h.fill(ctx, url, req)
	if err != nil {
		return err
	}
	_, err = out.Write(answer.Bytes())
	return err
}

func (h *Helper) fill(ctx context.Context, url string, req gitcredential.Message) (gitcredential.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(req.Bytes()))
	if err != nil {
		return nil, fmt.Errorf("ask the proxy for credentials: %w", err)
	}
	if h.Token != "" {
		r.Header.Set("Authorization", "Bearer "+h.Token)
		r.Header.Set(protocol.HeaderProxyToken, h.Token)
	}
	profile := h.Profile
	if profile == "" {
		profile = defaultProfile
	}
	r.Header.Set(protocol.HeaderProfile, profile)
	r.Header.Set("Content-Type", "text/plain")
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(r)
	if err != nil {
		return nil, fmt.Errorf("ask the proxy for credentials: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, gitcredential.MaxMessage+1))
	if err != nil {
		return nil, fmt.Errorf("read the proxy's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the proxy refused credentials for %s: %s: %s", hostOf(req), resp.Status, firstLine(body))
	}
	answer, err := gitcredential.Read(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("the proxy's answer: %w", err)
	}
	return answer, nil
}

// hostOf is the host of a credential request, for messages.
func hostOf(req gitcredential.Message) string {
	if _, host := req.Target(); host != "" {
		return host
	}
	return "this repository"
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return truncate(s, 200)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
