package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
)

// The real binary's tunnel, driven by an in-process yamux peer standing in
// for the host: connections made to the listen address arrive as streams,
// and closing the worker's stdin ends it cleanly.
func TestTunnelBinary(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, "tunnel", "--listen", "127.0.0.1:0")
	cmd.Env = []string{"GORACE=atexit_sleep_ms=0"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	session, err := yamux.Server(pipeConn{stdout, stdin}, sandboxend.SessionConfig(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	control, err := session.Accept()
	if err != nil {
		t.Fatalf("accept control stream: %v", err)
	}
	hello, err := sandboxend.ReadHello(control)
	if err != nil {
		t.Fatal(err)
	}

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
	stdin.Close()
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("tunnel exited with %v after stdin closed, want 0; stderr:\n%s", err, stderr.Bytes())
	}
	if _, err := net.Dial("tcp", hello.Listen); err == nil {
		t.Error("the tunnel still listens after exiting")
	}
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
}

type pipeConn struct {
	io.ReadCloser
	io.WriteCloser
}

func (p pipeConn) Close() error {
	return errors.Join(p.ReadCloser.Close(), p.WriteCloser.Close())
}
