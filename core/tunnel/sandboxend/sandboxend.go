// Package sandboxend is the sandbox end of the tunnel and the tunnel's wire
// format, which the host end (core/tunnel) speaks too. It links no gRPC,
// protobuf or go-plugin: amelia-worker, which goes into every sandbox,
// serves it.
//
// The tunnel carries TCP connections made inside a sandbox to the host,
// over a single byte stream the host opened: the stdin and stdout of an
// `amelia-worker tunnel` exec. The stream is a yamux session. The sandbox end
// is a yamux client that listens on a loopback address inside the sandbox and
// opens one yamux stream per accepted connection; the host end accepts the
// streams and pipes each to the proxy on host loopback. The sandbox needs no
// route to the host, and every transport that can run a command can carry it.
//
// The first stream the sandbox end opens is the control stream: it carries
// one JSON [Hello] line, then closes. The host reads it to learn that the
// listener is up and where (the port may have been chosen by the kernel), so
// nothing in the sandbox dials the tunnel before it exists.
package sandboxend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
)

// Hello is the sandbox end's first message, on the control stream.
type Hello struct {
	// Listen is the address the sandbox end accepts connections on.
	Listen string `json:"listen"`
	// Version is the version of the amelia-worker serving it.
	Version string `json:"version"`
}

// SessionConfig is the yamux configuration both ends use. Keepalives are on
// so a dead peer is noticed even when no stream is busy; yamux's own log
// lines go to logger at debug level.
func SessionConfig(logger *slog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = 15 * time.Second
	cfg.LogOutput = nil
	cfg.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	return cfg
}

// Serve runs the sandbox end of the tunnel over conn: it sends the [Hello]
// for ln, then turns every connection accepted on ln into a yamux stream and
// copies bytes both ways until either side closes. It returns nil when the
// host closes the session (conn reaches EOF: the exec's stdin was closed) or
// ctx is done, and an error when the session could not start. ln and conn
// are closed on return, and so is every connection still open.
func Serve(ctx context.Context, ln net.Listener, conn io.ReadWriteCloser, version string, logger *slog.Logger) error {
	defer ln.Close()
	session, err := yamux.Client(conn, SessionConfig(logger))
	if err != nil {
		conn.Close()
		return fmt.Errorf("start tunnel session: %w", err)
	}
	defer session.Close()

	if err := sendHello(session, Hello{Listen: ln.Addr().String(), Version: version}); err != nil {
		return err
	}
	logger.Info("tunnel listening", "addr", ln.Addr().String())

	// Stop accepting when the session or ctx ends.
	go func() {
		select {
		case <-session.CloseChan():
		case <-ctx.Done():
		}
		ln.Close()
	}()

	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if session.IsClosed() || ctx.Err() != nil {
				// Closing the session resets the streams, which ends
				// every pipe.
				session.Close()
				return nil
			}
			return fmt.Errorf("accept tunnel connection: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			forward(session, c, logger)
		}()
	}
}

func sendHello(session *yamux.Session, h Hello) error {
	s, err := session.Open()
	if err != nil {
		return fmt.Errorf("open tunnel control stream: %w", err)
	}
	defer s.Close()
	if err := json.NewEncoder(s).Encode(h); err != nil {
		return fmt.Errorf("send tunnel hello: %w", err)
	}
	return nil
}

// ReadHello reads the [Hello] from the control stream s.
func ReadHello(s io.Reader) (Hello, error) {
	var h Hello
	if err := json.NewDecoder(io.LimitReader(s, 4096)).Decode(&h); err != nil {
		return Hello{}, fmt.Errorf("read tunnel hello: %w", err)
	}
	if h.Listen == "" {
		return Hello{}, errors.New("read tunnel hello: no listen address")
	}
	return h, nil
}

// forward pipes the accepted connection c through a new stream of session.
// When the session ends, c is closed, even if its client is still sending.
func forward(session *yamux.Session, c net.Conn, logger *slog.Logger) {
	defer c.Close()
	s, err := session.Open()
	if err != nil {
		logger.Warn("tunnel: cannot open stream", "err", err)
		return
	}
	defer s.Close()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-session.CloseChan():
			c.Close()
		case <-done:
		}
	}()
	netpipe.Pipe(c, s)
}
