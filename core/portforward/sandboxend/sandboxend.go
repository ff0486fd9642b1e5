// Package sandboxend is the sandbox end of `amelia sandbox port-forward`
// and its wire format, which the host end (core/portforward) speaks too.
// It links no gRPC, protobuf or go-plugin: amelia-worker serves it.
//
// Port forwarding is the tunnel (core/tunnel) the other way round: the
// host listens on its loopback, and every connection made to it is carried
// to a loopback port inside the sandbox, over the stdin and stdout of one
// `amelia-worker port-forward` exec that the host opened. The sandbox needs
// no network at all (it works under `network: none`), and every provider
// that can run a command can carry it.
//
// The exec's stdout starts with the [Hello] line; then stdin and stdout are
// one yamux session, in which the host is the client: it opens one stream
// per connection it accepted. The sandbox end dials the target for each
// stream and answers with one status line, [StatusOK] or "error MESSAGE",
// before the bytes of the connection flow; on an error it closes the stream.
package sandboxend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
)

// Hello is the first line the sandbox end writes on stdout, before the
// session: the host knows from it that the right program runs and is
// ready.
const Hello = "amelia-port-forward 1\n"

// StatusOK is the status line of a stream whose connection is made.
const StatusOK = "ok\n"

// statusPrefix starts the status line of a stream whose dial failed.
const statusPrefix = "error "

// maxStatus bounds a status line.
const maxStatus = 1024

// DialTimeout bounds the dial of the target for one stream.
const DialTimeout = 10 * time.Second

// SessionConfig is the yamux configuration both ends use: keepalives on so
// a dead peer is noticed even when no stream is busy; yamux's own lines go
// to logger at debug level.
func SessionConfig(logger *slog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = 15 * time.Second
	cfg.LogOutput = nil
	cfg.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	return cfg
}

// CheckTarget refuses a target that is not a loopback address with a port:
// port forwarding reaches into the sandbox, never through it.
func CheckTarget(target string) error {
	ap, err := netip.ParseAddrPort(target)
	if err != nil || ap.Port() == 0 {
		return fmt.Errorf("target %q: want a loopback IP and a port, e.g. 127.0.0.1:8080", target)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("target %q: port forwarding connects to loopback addresses inside the sandbox only", target)
	}
	return nil
}

// Serve runs the sandbox end over in (the exec's stdin) and out (its
// stdout): it writes the [Hello], then dials target for every stream the
// host opens and pipes the two until either side is done. It returns nil
// when the host ends the session (in reaches EOF) or ctx is done; every
// connection still open is closed then.
func Serve(ctx context.Context, in io.Reader, out io.Writer, target string, logger *slog.Logger) error {
	if err := CheckTarget(target); err != nil {
		return err
	}
	if _, err := io.WriteString(out, Hello); err != nil {
		return fmt.Errorf("port-forward: write hello: %w", err)
	}
	session, err := yamux.Server(stdio{in, out}, SessionConfig(logger))
	if err != nil {
		return fmt.Errorf("port-forward: start session: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { session.Close() })
	defer stop()
	defer session.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		s, err := session.AcceptStream()
		if err != nil {
			// The host closed the session (EOF on stdin), or ctx ended:
			// closing the session resets every stream, ending its pipe.
			session.Close()
			return nil
		}
		wg.Go(func() { serveStream(ctx, s, target, logger) })
	}
}

// serveStream dials target for s, says how it went, and pipes the two.
func serveStream(ctx context.Context, s *yamux.Stream, target string, logger *slog.Logger) {
	c, err := (&net.Dialer{Timeout: DialTimeout}).DialContext(ctx, "tcp", target)
	if err != nil {
		logger.Info("port-forward: connect", "target", target, "err", err)
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		if len(msg) > maxStatus-len(statusPrefix)-1 {
			msg = msg[:maxStatus-len(statusPrefix)-1]
		}
		io.WriteString(s, statusPrefix+msg+"\n")
		s.Close()
		return
	}
	if _, err := io.WriteString(s, StatusOK); err != nil {
		c.Close()
		s.Close()
		return
	}
	netpipe.Pipe(c, s)
}

// ReadStatus reads a stream's status line from r, byte by byte so nothing
// after it is consumed: nil for [StatusOK], else the sandbox end's error.
func ReadStatus(r io.Reader) error {
	line, err := readLine(r, maxStatus)
	if err != nil {
		return fmt.Errorf("read the connection's status: %w", err)
	}
	if line == strings.TrimSuffix(StatusOK, "\n") {
		return nil
	}
	if msg, ok := strings.CutPrefix(line, statusPrefix); ok {
		return errors.New(msg)
	}
	return fmt.Errorf("unexpected status %q", line)
}

// ReadHello reads the [Hello] line from r, byte by byte so the session
// after it is not consumed.
func ReadHello(r io.Reader) error {
	line, err := readLine(r, len(Hello)+64)
	if err != nil {
		return fmt.Errorf("read the hello: %w", err)
	}
	if line+"\n" != Hello {
		return fmt.Errorf("not the port-forward's hello: %q (an amelia-worker of another version?)", line)
	}
	return nil
}

// readLine reads up to '\n' (not returned), at most limit bytes.
func readLine(r io.Reader, limit int) (string, error) {
	var b []byte
	one := make([]byte, 1)
	for len(b) < limit {
		n, err := r.Read(one)
		if n == 1 {
			if one[0] == '\n' {
				return string(b), nil
			}
			b = append(b, one[0])
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return string(b), io.ErrUnexpectedEOF
			}
			return string(b), err
		}
	}
	return string(b), fmt.Errorf("line longer than %d bytes", limit)
}

// stdio is stdin and stdout as one connection; Close does nothing, as the
// process's streams end with it.
type stdio struct {
	io.Reader
	io.Writer
}

func (stdio) Close() error { return nil }
