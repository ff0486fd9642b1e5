package sandboxend

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/yamux"
)

// held is Hold running on a loopback listener and a unix socket of the
// test's, with wait as its carrier wait.
type held struct {
	addr, sock string
	done       chan error
}

func startHold(t *testing.T, wait time.Duration) *held {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), CarrierSocket)
	carriers, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &held{addr: ln.Addr().String(), sock: sock, done: make(chan error, 1)}
	go func() { h.done <- Hold(ctx, ln, carriers, "v-test", wait, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() { cancel(); <-h.done })
	return h
}

// carrier connects a host peer to h: a yamux server over the socket,
// after the hello.
func (h *held) carrier(t *testing.T) *yamux.Session {
	t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	s, err := yamux.Server(c, SessionConfig(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	control, err := s.Accept()
	if err != nil {
		t.Fatalf("no hello from the held tunnel: %v", err)
	}
	hello, err := ReadHello(control)
	if err != nil || hello.Listen != h.addr {
		t.Fatalf("hello %+v, %v; want the held address %s", hello, err, h.addr)
	}
	return s
}

// echo answers the next stream of s with what it sends.
func echo(t *testing.T, s *yamux.Session) {
	t.Helper()
	go func() {
		st, err := s.Accept()
		if err != nil {
			return
		}
		defer st.Close()
		io.Copy(st, st)
	}()
}

// dial connects to the tunnel at addr, closed at the test's end.
func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// ping sends ping over c and reads back what comes until the connection
// ends.
func ping(c *net.TCPConn) string {
	c.Write([]byte("ping"))
	c.CloseWrite()
	got, _ := io.ReadAll(c)
	return string(got)
}

// roundTrip sends ping through the tunnel at addr and reads back what
// comes until the connection ends.
func roundTrip(t *testing.T, addr string) string {
	t.Helper()
	return ping(dial(t, addr))
}

// A connection made before any carrier waits for one; a newer carrier
// replaces the one before it, whose session ends.
func TestHoldCarriesOverTheLatestCarrier(t *testing.T) {
	h := startHold(t, time.Hour)
	early := dial(t, h.addr)
	first := h.carrier(t)
	echo(t, first)
	if got := ping(early); got != "ping" {
		t.Fatalf("a connection made before the carrier came: %q, want the echo", got)
	}
	second := h.carrier(t)
	<-first.CloseChan()
	echo(t, second)
	if got := roundTrip(t, h.addr); got != "ping" {
		t.Errorf("through the second carrier: %q, want the echo", got)
	}
}

// Without a carrier, a connection is closed unanswered once the wait is
// over, as a tunnel whose host is away drops it: the agent retries.
func TestHoldClosesWhatWaitsInVain(t *testing.T) {
	h := startHold(t, time.Millisecond)
	if got := roundTrip(t, h.addr); got != "" {
		t.Errorf("a connection with no carrier read %q, want it closed", got)
	}
}
