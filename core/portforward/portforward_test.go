package portforward_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/core/portforward"
	"github.com/amelia-sandbox/amelia/core/portforward/sandboxend"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// inProcess runs `amelia-worker port-forward` as this process would: the
// sandbox end served over the exec's own streams, its loopback this
// host's. It counts the execs that have not ended.
type inProcess struct {
	mu      sync.Mutex
	running int
	argv    []string
	// exit, when set, ends the exec at once with that code, as a worker
	// that is not there does.
	exit int
}

func (p *inProcess) SandboxRef() sdk.SandboxRef { return sdk.SandboxRef{Name: "test"} }

func (p *inProcess) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	p.mu.Lock()
	p.running++
	p.argv = req.Argv
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.running--
		p.mu.Unlock()
	}()
	if p.exit != 0 {
		fmt.Fprintf(eio.Stderr, "sh: 1: %s: not found\n", req.Argv[0])
		return sdk.ExitStatus{Code: p.exit}, nil
	}
	port := req.Argv[len(req.Argv)-1]
	err := sandboxend.Serve(ctx, eio.Stdin, eio.Stdout, "127.0.0.1:"+port, slog.New(slog.DiscardHandler))
	if err != nil {
		return sdk.ExitStatus{Code: 1}, nil
	}
	return sdk.ExitStatus{}, nil
}

func (p *inProcess) execs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.running
}

// echoServer echoes each connection until its client half-closes.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// closedPort is a port nothing listens on.
func closedPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// open starts a forward to port over ex and serves a listener of its own;
// it returns the listener's address and the forward's errors channel.
func open(t *testing.T, ex *inProcess, port int, refused func(error)) (string, *portforward.Forward, chan error) {
	t.Helper()
	f, err := portforward.Open(t.Context(), ex, portforward.Options{Worker: "/opt/amelia-worker", Port: port, Refused: refused})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := portforward.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- f.Serve(ln) }()
	t.Cleanup(func() { ln.Close(); f.Close() })
	return ln.Addr().String(), f, served
}

func TestForwardCarriesConnections(t *testing.T) {
	ex := &inProcess{}
	port := echoServer(t)
	addr, f, served := open(t, ex, port, nil)
	if want := []string{"/opt/amelia-worker", "port-forward", "--port", strconv.Itoa(port)}; strings.Join(ex.argv, " ") != strings.Join(want, " ") {
		t.Errorf("the exec's argv: %q, want %q", ex.argv, want)
	}
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Errorf("the forward listens on %s, want host loopback", addr)
	}
	var wg sync.WaitGroup
	for i := range 5 { // at once, each a stream of its own
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			msg := fmt.Sprintf("hello %d", i)
			io.WriteString(c, msg)
			c.(*net.TCPConn).CloseWrite()
			got, err := io.ReadAll(c)
			if err != nil || string(got) != msg {
				t.Errorf("echo through the forward: %q (%v), want %q", got, err, msg)
			}
		})
	}
	wg.Wait()
	if err := f.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
	if n := ex.execs(); n != 0 {
		t.Errorf("%d port-forward execs still run after Close", n)
	}
}

func TestForwardClosesRefusedConnections(t *testing.T) {
	ex := &inProcess{}
	port := closedPort(t)
	refusals := make(chan error, 1)
	addr, _, _ := open(t, ex, port, func(err error) { refusals <- err })
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Closed, not left hanging: the read ends (the test's deadline
	// would end a hang).
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("read from a connection to a port nothing listens on: %d bytes, %v; want EOF", n, err)
	}
	err = <-refusals
	if want := fmt.Sprintf("to port %d in the sandbox: dial tcp 127.0.0.1:%d: connect: connection refused", port, port); !strings.Contains(err.Error(), want) {
		t.Errorf("the refusal: %q, want it to say %q", err, want)
	}
}

func TestOpenSaysWhyTheWorkerDidNotStart(t *testing.T) {
	_, err := portforward.Open(t.Context(), &inProcess{exit: 127}, portforward.Options{Worker: "/nowhere/amelia-worker", Port: 8080})
	if err == nil || !strings.Contains(err.Error(), "exit status 127") || !strings.Contains(err.Error(), "/nowhere/amelia-worker: not found") {
		t.Errorf("Open with no worker: %v; want the exit code and the exec's stderr", err)
	}
}

func TestListenOnLoopbackOnly(t *testing.T) {
	ln, err := portforward.Listen(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		t.Errorf("Listen(0) listens on %s, want loopback", ln.Addr())
	}
	if _, err := portforward.Listen(ln.Addr().(*net.TCPAddr).Port); err == nil {
		t.Error("Listen on a port in use succeeded")
	}
}

func TestSandboxEndRefusesTargetsBeyondLoopback(t *testing.T) {
	for _, target := range []string{"192.0.2.1:80", "example.invalid:80", "127.0.0.1:0", "127.0.0.1"} {
		if err := sandboxend.CheckTarget(target); err == nil {
			t.Errorf("CheckTarget(%q) = nil, want a refusal", target)
		}
	}
	for _, target := range []string{"127.0.0.1:8080", "[::1]:8080"} {
		if err := sandboxend.CheckTarget(target); err != nil {
			t.Errorf("CheckTarget(%q): %v", target, err)
		}
	}
}
