package worker_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"testing"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
)

// tunnelPeer is a host end of the real binary's tunnel: `amelia-worker
// ARGS` with an in-process yamux peer standing in for the host on its
// stdio, once the tunnel said hello.
type tunnelPeer struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  *bytes.Buffer // read once cmd has exited
	session *yamux.Session
	hello   sandboxend.Hello
}

func startTunnelPeer(t *testing.T, args ...string) *tunnelPeer {
	t.Helper()
	p := &tunnelPeer{cmd: exec.Command(workerBin, args...), stderr: &bytes.Buffer{}}
	p.cmd.Env = []string{"GORACE=atexit_sleep_ms=0"}
	p.cmd.Stderr = p.stderr
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	p.stdin = stdin
	if p.session, err = yamux.Server(pipeConn{stdout, stdin}, sandboxend.SessionConfig(slog.New(slog.DiscardHandler))); err != nil {
		t.Fatal(err)
	}
	control, err := p.session.Accept()
	if err != nil {
		t.Fatalf("no hello from amelia-worker %s: %v", strings.Join(args, " "), err)
	}
	if p.hello, err = sandboxend.ReadHello(control); err != nil {
		t.Fatal(err)
	}
	control.Close()
	return p
}

// The real binary's tunnel, driven by an in-process yamux peer standing in
// for the host: connections made to the listen address arrive as streams,
// and closing the worker's stdin ends it cleanly.
func TestTunnelBinary(t *testing.T) {
	p := startTunnelPeer(t, "tunnel", "--listen", "127.0.0.1:0")
	session, hello := p.session, p.hello

	// Two connections at once, each answered by the host.
	for range 2 {
		c, err := net.Dial("tcp", hello.Listen)
		if err != nil {
			t.Fatalf("dial %s: %v", hello.Listen, err)
		}
		s, err := session.Accept()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer s.Close()
			io.Copy(s, s) // echo until the sandbox side closes
		}()
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		c.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "GET / HTTP/1.1\r\n\r\n" {
			t.Errorf("echo through the tunnel = %q, %v", got, err)
		}
		c.Close()
	}

	// The host closes the exec's stdin: the worker exits 0.
	p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("tunnel exited with %v after stdin closed, want 0; stderr:\n%s", err, p.stderr.Bytes())
	}
	if _, err := net.Dial("tcp", hello.Listen); err == nil {
		t.Error("the tunnel still listens after exiting")
	}
}

type pipeConn struct {
	io.ReadCloser
	io.WriteCloser
}

func (p pipeConn) Close() error {
	return errors.Join(p.ReadCloser.Close(), p.WriteCloser.Close())
}
