package proxy

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// egressDialTimeout bounds connecting to an egress target.
const egressDialTimeout = 30 * time.Second

// egress is a run's forward proxy: CONNECT tunnels and plain-HTTP requests
// in absolute form, to the profile's allowed hosts only.
type egress struct {
	profile string
	mode    sdk.NetworkMode
	allowed []string
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	rp      *httputil.ReverseProxy
	tr      *http.Transport
}

func newEgress(cfg RunConfig, dial func(context.Context, string, string) (net.Conn, error), log *slog.Logger) *egress {
	e := &egress{profile: cfg.Profile, mode: cfg.Network, allowed: cfg.AllowedHosts, dial: dial}
	if e.dial == nil {
		e.dial = dialExternal
	}
	e.tr = &http.Transport{
		Proxy:                 nil, // never another proxy: the host's own route, checked here
		DialContext:           e.dial,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	e.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The URL was checked; the Host header must not name another
			// site than the one dialled.
			pr.Out.Host = ""
			for k := range pr.Out.Header {
				if strings.HasPrefix(http.CanonicalHeaderKey(k), "X-Amelia-") {
					delete(pr.Out.Header, k)
				}
			}
		},
		Transport:     e.tr,
		FlushInterval: -1,
		ErrorHandler:  e.errorHandler,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return e
}

func (e *egress) close() { e.tr.CloseIdleConnections() }

// serveEgress authenticates an egress request by its Proxy-Authorization
// and hands it to the run's egress proxy.
func (s *Server) serveEgress(w http.ResponseWriter, req *http.Request) {
	route := routeEgressHTTP
	if req.Method == http.MethodConnect {
		route = routeConnect
	}
	refuse := func(w http.ResponseWriter) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="amelia"`)
		http.Error(w, "amelia egress proxy: missing or invalid run token: use http://amelia:$AMELIA_PROXY_TOKEN@HOST:PORT as the proxy URL", http.StatusProxyAuthRequired)
	}
	s.withRun(w, req, route, proxyToken(req.Header.Get("Proxy-Authorization")), refuse, func(run *Run, w http.ResponseWriter, req *http.Request, rec *Record) {
		run.egress.serve(w, req, rec)
	})
}

// proxyToken is the run token of a Proxy-Authorization header: the
// password of Basic credentials (what clients send for a proxy URL with
// user:token@), or a Bearer token.
func proxyToken(h string) string {
	if t, ok := bearer(h); ok {
		return t
	}
	scheme, enc, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return ""
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return ""
	}
	_, pass, _ := strings.Cut(string(dec), ":")
	return pass
}

func (e *egress) serve(w http.ResponseWriter, req *http.Request, rec *Record) {
	target := req.Host
	if req.Method != http.MethodConnect {
		if req.URL.Scheme != "http" {
			egressRefused(w, http.StatusBadRequest, fmt.Sprintf("%s:// requests go through CONNECT (set HTTPS_PROXY), not as plain requests", req.URL.Scheme))
			return
		}
		target = req.URL.Host
		if req.URL.Port() == "" {
			target = net.JoinHostPort(req.URL.Hostname(), "80")
		}
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil || port == "" {
		egressRefused(w, http.StatusBadRequest, fmt.Sprintf("%q is not HOST:PORT", target))
		return
	}
	name, ok := normalizeHost(host)
	if !ok {
		rec.Upstream = target
		egressRefused(w, http.StatusForbidden, fmt.Sprintf("%q is not a hostname or IP address", host))
		return
	}
	addr := net.JoinHostPort(name, port)
	rec.Upstream = addr
	if why := e.refusal(name); why != "" {
		rec.Error = why
		egressRefused(w, http.StatusForbidden, why)
		return
	}
	if req.Method == http.MethodConnect {
		e.connect(w, req, addr, rec)
		return
	}
	// The URL names the host as checked (the Host header follows it).
	req.URL.Host = name
	if strings.Contains(name, ":") {
		req.URL.Host = "[" + name + "]"
	}
	if port != "80" {
		req.URL.Host = addr
	}
	body := &countingReader{r: req.Body}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = body
	}
	e.rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), recordKey{}, rec)))
	rec.RequestBytes = body.n
}

// refusal says why host may not be reached, or "" if it may.
func (e *egress) refusal(host string) string {
	if e.mode == sdk.NetworkNone {
		return fmt.Sprintf("%s: profile %s has sandbox.network: none, so the sandbox reaches nothing but the LLM and git proxy; use network: allowlist with %s in sandbox.allowed_hosts", host, e.profile, host)
	}
	if MatchHost(host, e.allowed) {
		return ""
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return fmt.Sprintf("%s is an IP address: the egress proxy refuses IP addresses unless profile %s lists them in sandbox.allowed_hosts", host, e.profile)
	}
	return fmt.Sprintf("%s is not in sandbox.allowed_hosts of profile %s: add it (or a *.domain wildcard) there to allow it", host, e.profile)
}

func egressRefused(w http.ResponseWriter, status int, msg string) {
	http.Error(w, "amelia egress proxy: "+msg, status)
}

// connect dials addr, then turns the client's connection into a tunnel to
// it. Run.Close ends the tunnel (through the request's context).
func (e *egress) connect(w http.ResponseWriter, req *http.Request, addr string, rec *Record) {
	ctx, cancel := context.WithTimeout(req.Context(), egressDialTimeout)
	up, err := e.dial(ctx, "tcp", addr)
	cancel()
	if err != nil {
		status, msg := dialFailure(addr, err)
		rec.Error = msg
		egressRefused(w, status, msg)
		return
	}
	defer up.Close()
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rec.Error = "hijack: " + err.Error()
		egressRefused(w, http.StatusInternalServerError, "cannot take over the connection")
		return
	}
	defer client.Close()
	// The deadlines the server set for reading the request must not end
	// the tunnel.
	client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	rec.Status = http.StatusOK
	stop := context.AfterFunc(req.Context(), func() { client.Close(); up.Close() })
	defer stop()
	rec.RequestBytes, rec.ResponseBytes = splice(client, brw.Reader, up)
}

// splice copies client→up (starting with what the server already
// buffered) and up→client until both directions end, half-closing each
// side when the other stops sending, and returns the byte counts.
func splice(client net.Conn, buffered *bufio.Reader, up net.Conn) (sent, received int64) {
	done := make(chan int64, 1)
	go func() {
		n, err := io.Copy(up, io.MultiReader(io.LimitReader(buffered, int64(buffered.Buffered())), client))
		endCopy(up, client, err)
		done <- n
	}()
	received, err := io.Copy(client, up)
	endCopy(client, up, err)
	return <-done, received
}

// endCopy ends one direction: a clean EOF half-closes dst, an error closes
// both sides (which ends the other direction too).
func endCopy(dst, src net.Conn, err error) {
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	dst.Close()
}

func (e *egress) errorHandler(w http.ResponseWriter, req *http.Request, err error) {
	status, msg := dialFailure(req.URL.Host, err)
	if req.Context().Err() != nil {
		status, msg = http.StatusServiceUnavailable, "request canceled (the client went away or the run ended)"
	}
	if rec := recordOf(req.Context()); rec != nil {
		rec.Error = msg
	}
	egressRefused(w, status, msg)
}

// dialFailure is the status and message for a failed connection: 403 when
// the address is one the proxy never dials, 504 on a timeout, else 502.
func dialFailure(addr string, err error) (int, string) {
	var internal *internalAddrError
	var ne net.Error
	switch {
	case errors.As(err, &internal):
		return http.StatusForbidden, fmt.Sprintf("%s resolves to %s, an address of this host or its link, which the egress proxy never connects to", addr, internal.ip)
	case errors.As(err, &ne) && ne.Timeout():
		return http.StatusGatewayTimeout, fmt.Sprintf("%s: timed out: %s", addr, cause(err))
	}
	return http.StatusBadGateway, fmt.Sprintf("cannot connect to %s: %s", addr, cause(err))
}

// internalAddrError is a refusal to connect to an internal address.
type internalAddrError struct{ ip netip.Addr }

func (e *internalAddrError) Error() string {
	return fmt.Sprintf("refusing to connect to %s", e.ip)
}

// dialExternal dials addr. When addr names a host (rather than a listed IP
// address), an address it resolves to that is loopback, link-local (cloud
// metadata services live there), unspecified or multicast is refused: an
// allowed name must not lead the sandbox to the host's own services.
func dialExternal(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: egressDialTimeout, KeepAlive: 30 * time.Second}
	host, _, _ := net.SplitHostPort(addr)
	if _, err := netip.ParseAddr(host); err != nil {
		d.Control = refuseInternal
	}
	return d.DialContext(ctx, network, addr)
}

func refuseInternal(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	ip := ap.Addr().Unmap()
	if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() ||
		ip.IsMulticast() || ip.IsInterfaceLocalMulticast() {
		return &internalAddrError{ip: ip}
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.r.Close() }
