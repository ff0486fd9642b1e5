// Package gitcred is git's credential helper inside a sandbox: git runs
// `amelia-worker git-credential get`, and the request goes through the
// tunnel to the host proxy's /git/credentials route, which answers from the
// host's credential store for the run's repository host only. No credential
// is stored in the sandbox.
package gitcred

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Route is the proxy's credential route, relative to its root URL.
const Route = "/git/credentials"

// maxMessage bounds a credential request or answer.
const maxMessage = 64 << 10

// Helper forwards git credential requests to the proxy.
type Helper struct {
	ProxyURL string // the proxy's root URL, AMELIA_PROXY_URL
	Token    string // the run token, AMELIA_PROXY_TOKEN
	Client   *http.Client
}

// Run performs the credential operation op ("get", "store" or "erase") with
// git's request on in; for "get" the answer goes to out. "store" and "erase"
// are read and ignored: the host owns the credentials.
func (h *Helper) Run(ctx context.Context, op string, in io.Reader, out io.Writer) error {
	switch op {
	case "store", "erase":
		_, err := io.Copy(io.Discard, io.LimitReader(in, maxMessage))
		return err
	case "get":
	default:
		return fmt.Errorf("unknown operation %q: git calls credential helpers with get, store or erase", op)
	}
	if h.ProxyURL == "" || h.Token == "" {
		return errors.New("AMELIA_PROXY_URL and AMELIA_PROXY_TOKEN must be set: this helper works only inside an amelia sandbox")
	}
	req, err := readMessage(in)
	if err != nil {
		return fmt.Errorf("read git's request: %w", err)
	}
	answer, err := h.fill(ctx, req)
	if err != nil {
		return err
	}
	_, err = out.Write(answer)
	return err
}

func (h *Helper) fill(ctx context.Context, req []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(h.ProxyURL, "/")+Route, bytes.NewReader(req))
	if err != nil {
		return nil, fmt.Errorf("ask the proxy for credentials: %w", err)
	}
	r.Header.Set("Authorization", "Bearer "+h.Token)
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage+1))
	if err != nil {
		return nil, fmt.Errorf("read the proxy's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the proxy refused credentials for %s: %s: %s", hostOf(req), resp.Status, firstLine(body))
	}
	answer, err := readMessage(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("the proxy's answer: %w", err)
	}
	return answer, nil
}

// readMessage reads one credential message, attribute lines "key=value"
// ended by a blank line or EOF, and returns it normalised: each line ended by
// "\n", no blank line. A line without "=", a NUL byte or an oversized message
// is an error.
func readMessage(r io.Reader) ([]byte, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxMessage+1))
	sc.Buffer(make([]byte, 0, 4096), maxMessage+1)
	var out bytes.Buffer
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			break
		}
		key, _, ok := strings.Cut(line, "=")
		if !ok || key == "" || strings.ContainsRune(line, 0) {
			return nil, fmt.Errorf("malformed credential line %q: want key=value", truncate(line, 40))
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if out.Len() > maxMessage {
		return nil, fmt.Errorf("credential message longer than %d bytes", maxMessage)
	}
	return out.Bytes(), nil
}

// hostOf is the host attribute of a credential request, for messages.
func hostOf(req []byte) string {
	for line := range strings.SplitSeq(string(req), "\n") {
		if v, ok := strings.CutPrefix(line, "host="); ok {
			return v
		}
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
