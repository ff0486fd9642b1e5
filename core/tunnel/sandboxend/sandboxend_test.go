package sandboxend

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/hashicorp/yamux"
)

// hostPeer is a test's host end: a yamux server on one side of a pipe whose
// other side runs Serve.
type hostPeer struct {
	session *yamux.Session
	hello   Hello
	served  chan error
	conn    net.Conn // the host's side of the pipe
}

func startTunnel(t *testing.T, ctx context.Context) *hostPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostSide, sandboxSide := net.Pipe()
	p := &hostPeer{served: make(chan error, 1), conn: hostSide}
	go func() { p.served <- Serve(ctx, ln, sandboxSide, "v-test", slog.New(slog.DiscardHandler)) }()
	p.session, err = yamux.Server(hostSide, SessionConfig(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.session.Close()
		<-p.served
	})
	control, err := p.session.Accept()
	if err != nil {
		t.Fatalf("accept control stream: %v", err)
	}
	if p.hello, err = ReadHello(control); err != nil {
		t.Fatal(err)
	}
	control.Close()
	return p
}

func TestHelloNamesTheListener(t *testing.T) {
	p := startTunnel(t, t.Context())
	if p.hello.Version != "v-test" {
		t.Errorf("hello version = %q, want v-test", p.hello.Version)
	}
	c, err := net.Dial("tcp", p.hello.Listen)
	if err != nil {
		t.Fatalf("dial the address the hello named: %v", err)
	}
	c.Close()
}

// A connection made inside the sandbox arrives at the host as a stream, and a
// request/response exchange that relies on half-close works both ways.
func TestConnectionBecomesStream(t *testing.T) {
	p := startTunnel(t, t.Context())
	for i := range 3 {
		c, err := net.Dial("tcp", p.hello.Listen)
		if err != nil {
			t.Fatal(err)
		}
		s, err := p.session.Accept()
		if err != nil {
			t.Fatalf("accept stream %d: %v", i, err)
		}
		request := []byte("request from the sandbox")
		if _, err := c.Write(request); err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(s)
		if err != nil || string(got) != string(request) {
			t.Fatalf("host read %q, %v; want %q then EOF", got, err, request)
		}
		if _, err := s.Write([]byte("answer from the host")); err != nil {
			t.Fatal(err)
		}
		s.Close()
		answer, err := io.ReadAll(c)
		if err != nil || string(answer) != "answer from the host" {
			t.Fatalf("sandbox read %q, %v", answer, err)
		}
		c.Close()
	}
}

func TestServeEndsWhenHostCloses(t *testing.T) {
	p := startTunnel(t, t.Context())
	c, err := net.Dial("tcp", p.hello.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := p.session.Accept(); err != nil {
		t.Fatal(err)
	}
	// The host's end of the byte stream goes away, as when the exec's stdin
	// is closed.
	p.conn.Close()
	if err := <-p.served; err != nil {
		t.Fatalf("Serve = %v, want nil after the host closed", err)
	}
	p.served <- nil // for the cleanup
	// The connection still open inside the sandbox is closed too (without
	// that, this read would block until the test times out).
	io.ReadAll(c)
	if c2, err := net.Dial("tcp", p.hello.Listen); err == nil {
		c2.Close()
		t.Error("the listener still accepts after the session ended")
	}
}

func TestServeEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	p := startTunnel(t, ctx)
	cancel()
	if err := <-p.served; err != nil {
		t.Fatalf("Serve = %v, want nil when cancelled", err)
	}
	p.served <- nil
	if _, err := p.session.Accept(); err == nil {
		t.Error("session still open after Serve returned")
	}
}
