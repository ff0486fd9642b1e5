package sandboxend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// A run's tunnel. The agent of a detached run reaches the proxy through a
// tunnel whose sandbox end belongs to the run's supervisor, not to the
// connection that carries it: Hold keeps the loopback listener the agent
// was given for as long as the agent lives, and the host reattaches a
// carrier to it (`amelia-worker tunnel --run DIR`, a relay between an
// exec's stdio and CarrierSocket in the run's directory) as often as its
// connection to the sandbox is lost. So no other process can ever bind the
// address the agent sends its token to: it is never free while the agent
// lives, whoever runs next to it, and bytes reach the host only through a
// carrier that came in through the run's own directory (mode 0700, the
// run's uid).

// The environment that leads a process in the sandbox to the proxy.
const (
	EnvProxyURL   = "AMELIA_PROXY_URL"   // the proxy's root URL, inside the sandbox
	EnvProxyToken = "AMELIA_PROXY_TOKEN" // the run's token
)

// CarrierSocket is the unix socket, in a run's directory, that carriers of
// the run's tunnel connect to.
const CarrierSocket = "tunnel.sock"

// ExitRunEnded is the exit code of `amelia-worker tunnel --run DIR` when
// the run in DIR has ended, and its tunnel with it: the host stops
// reattaching.
const ExitRunEnded = 3

// CarrierWait bounds how long a connection the agent made waits for a
// carrier before it is closed unanswered, which the worker's model client
// takes as an outage and retries (see agent.DefaultOutage).
const CarrierWait = 10 * time.Second

// Hold serves the agent's listener ln over the carrier that last connected
// to carriers, until ctx is done; a new carrier replaces the one before
// it. Each connection accepted on ln becomes a stream of the current
// carrier's yamux session (after its [Hello], as Serve sends it), or waits
// up to wait for one, then is closed. ln, carriers and every connection
// are closed on return.
func Hold(ctx context.Context, ln, carriers net.Listener, version string, wait time.Duration, logger *slog.Logger) error {
	h := &holder{ln: ln, version: version, wait: wait, log: logger, changed: make(chan struct{})}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		carriers.Close()
		h.replace(nil)
	})
	defer stop()

	wg.Go(func() {
		defer cancel()
		for {
			c, err := carriers.Accept()
			if err != nil {
				if ctx.Err() == nil {
					logger.Error("tunnel: accept a carrier", "err", err)
				}
				return
			}
			wg.Go(func() { h.carry(ctx, c) })
		}
	})
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept tunnel connection: %w", err)
		}
		wg.Go(func() { h.forward(ctx, c) })
	}
}

// holder is Hold's state: the current carrier's session, and a channel
// closed (and replaced) whenever it changes.
type holder struct {
	ln      net.Listener
	version string
	wait    time.Duration
	log     *slog.Logger

	mu      sync.Mutex
	session *yamux.Session
	changed chan struct{}
}

// carry makes c the carrier: a yamux session over it says Hello, and
// carries every connection until it ends or another carrier replaces it.
func (h *holder) carry(ctx context.Context, c net.Conn) {
	s, err := yamux.Client(c, SessionConfig(h.log))
	if err != nil {
		c.Close()
		return
	}
	if err := sendHello(s, Hello{Listen: h.ln.Addr().String(), Version: h.version}); err != nil {
		h.log.Warn("tunnel: a carrier went away before its hello", "err", err)
		s.Close()
		return
	}
	h.log.Info("tunnel carrier attached", "addr", h.ln.Addr().String())
	h.replace(s)
	select {
	case <-s.CloseChan():
	case <-ctx.Done():
	}
	h.mu.Lock()
	if h.session == s {
		h.setLocked(nil)
		h.log.Info("tunnel carrier lost; waiting for the host to attach another")
	}
	h.mu.Unlock()
	s.Close() // when Hold ended first
}

// replace makes s the carrier's session (nil: none), closing the one
// before it.
func (h *holder) replace(s *yamux.Session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.session != nil && h.session != s {
		h.session.Close()
	}
	h.setLocked(s)
}

func (h *holder) setLocked(s *yamux.Session) {
	h.session = s
	close(h.changed)
	h.changed = make(chan struct{})
}

// current waits up to h.wait for a carrier's session.
func (h *holder) current(ctx context.Context) *yamux.Session {
	t := time.NewTimer(h.wait)
	defer t.Stop()
	for {
		h.mu.Lock()
		s, changed := h.session, h.changed
		h.mu.Unlock()
		if s != nil && !s.IsClosed() {
			return s
		}
		select {
		case <-changed:
		case <-t.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// forward pipes the agent's connection c through a stream of the current
// carrier, once there is one.
func (h *holder) forward(ctx context.Context, c net.Conn) {
	s := h.current(ctx)
	if s == nil {
		c.Close()
		return
	}
	forward(s, c, h.log)
}

// Relay is the carrier's own end: it connects stdio to the run's tunnel
// through the socket sock until the holder closes it (a newer carrier
// replaced this one, or the run ended), and then returns. When stdin ends
// (the host closed the exec's stdin), the holder reads the end of the
// session and closes sock, which ends Relay too.
func Relay(sock net.Conn, stdin io.Reader, stdout io.Writer) error {
	defer sock.Close()
	go func() {
		if _, err := io.Copy(sock, stdin); err == nil {
			if cw, ok := sock.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
				return
			}
		}
		sock.Close()
	}()
	_, err := io.Copy(stdout, sock)
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// ProxyEnv is the environment that leads a process in the sandbox to the
// proxy at addr (a loopback address inside the sandbox) with the run's
// token: AMELIA_PROXY_URL and AMELIA_PROXY_TOKEN, and with egress the
// proxy for everything else too (HTTP_PROXY, HTTPS_PROXY and their lower
// case forms, with the token as the proxy password; NO_PROXY for
// loopback).
func ProxyEnv(addr, token string, egress bool) map[string]string {
	env := map[string]string{
		EnvProxyURL:   "http://" + addr,
		EnvProxyToken: token,
	}
	if egress {
		proxy := "http://amelia:" + token + "@" + addr
		for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
			env[k] = proxy
		}
		noProxy := "127.0.0.1,localhost,::1"
		env["NO_PROXY"], env["no_proxy"] = noProxy, noProxy
	}
	return env
}
