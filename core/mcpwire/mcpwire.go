// Package mcpwire is the wire of the host proxy's MCP route, which both
// ends share: the proxy (package proxy) serves it, and the sandbox's
// stdio bridge (amelia-worker mcp NAME) dials it.
//
// A session with the profile's MCP server NAME is one HTTP/1.1 request
// upgraded to a raw byte stream:
//
//	GET /mcp/NAME HTTP/1.1
//	Connection: Upgrade
//	Upgrade: amelia-mcp
//	Authorization: Bearer $AMELIA_PROXY_TOKEN   (or X-Amelia-Proxy-Token)
//
//	HTTP/1.1 101 Switching Protocols
//	Connection: Upgrade
//	Upgrade: amelia-mcp
//
// after which each direction carries JSON-RPC 2.0 messages, one per line
// (MCP's stdio framing): the sandbox sends what its MCP client sends, and
// gets what the host's server sends. The sandbox ends the session by
// closing its side (a half-close is enough); the proxy closes the stream
// when the server ends or the run does. A request the proxy does not
// upgrade is answered with an HTTP status and a JSON body
// {"error": {"message": "..."}}: 401 for a missing or wrong token, 404
// for a name the run's profile does not list (the message lists those it
// does), 426 for a request without the Upgrade header, 502 when the
// server cannot be started.
package mcpwire

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

const (
	// Prefix is the route's path prefix: a server's path is Prefix+NAME.
	Prefix = "/mcp/"
	// Upgrade is the protocol a session's request upgrades to.
	Upgrade = "amelia-mcp"
)

// maxRefusal bounds the body of a refusal that is read for its message.
const maxRefusal = 64 << 10

// maxMessage bounds the message of a RefusedError.
const maxMessage = 500

// RefusedError is the proxy's answer to a session request it did not
// upgrade.
type RefusedError struct {
	// Status is the HTTP status (401, 404, 426, 502...).
	Status int
	// Message is what the proxy said, or the status text.
	Message string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("the proxy answered %d: %s", e.Status, e.Message)
}

// Dial opens a session with the run's MCP server name through the proxy
// at proxyURL (AMELIA_PROXY_URL: http://HOST:PORT, which the run's tunnel
// serves inside the sandbox), with the run's token. The connection it
// returns carries the session's lines; closing it (or half-closing it,
// with CloseWrite) ends the session. A refusal is a *RefusedError. ctx
// bounds the dial and the handshake only.
func Dial(ctx context.Context, proxyURL, token, name string) (net.Conn, error) {
	u, err := url.Parse(proxyURL)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("proxy URL %q: want http://HOST:PORT", redactURL(proxyURL))
	}
	if name == "" || strings.ContainsAny(name, "/?#% ") {
		return nil, fmt.Errorf("MCP server name %q: use letters, digits, '-' and '_'", name)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the proxy: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	c, err := handshake(conn, u, token, name)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return c, nil
}

func handshake(conn net.Conn, base *url.URL, token, name string) (net.Conn, error) {
	target := *base
	target.Path = strings.TrimSuffix(base.Path, "/") + Prefix + name
	target.RawPath, target.RawQuery, target.Fragment, target.User = "", "", "", nil
	req, err := http.NewRequest(http.MethodGet, target.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("session request: %w", err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Upgrade)
	req.Header.Set("Authorization", "Bearer "+token)
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("send the session request to the proxy: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("read the proxy's answer: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, refusal(resp)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), Upgrade) {
		return nil, fmt.Errorf("the proxy switched to %q, not %s", resp.Header.Get("Upgrade"), Upgrade)
	}
	return &bufferedConn{Conn: conn, r: br}, nil
}

// refusal reads the proxy's message out of a response that did not
// upgrade.
func refusal(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxRefusal))
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		msg = e.Error.Message
	}
	msg, _, _ = strings.Cut(msg, "\n")
	if msg = strings.TrimSpace(msg); msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "..."
	}
	return &RefusedError{Status: resp.StatusCode, Message: msg}
}

// bufferedConn reads what the handshake's reader holds before the
// connection's own bytes.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the connection: the session's end, from the
// sandbox's side.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the connection cannot be half-closed")
}

// redactURL drops a URL's user information, for messages.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}
