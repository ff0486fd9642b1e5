package netpipe_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
)

// echoServer echoes what each connection sends and closes it at EOF: a
// client reads the end of the echo only through a pipe that passes its
// half-close on.
func echoServer(t *testing.T) string {
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
	return ln.Addr().String()
}

func TestForwardPassesHalfClose(t *testing.T) {
	target := echoServer(t)
	client, server := tcpPair(t)
	done := make(chan error, 1)
	go func() { done <- netpipe.Forward(context.Background(), server, target) }()

	if _, err := client.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	client.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "ping" {
		t.Fatalf("read %q through the pipe, want the echo %q", got, "ping")
	}
	if err := <-done; err != nil {
		t.Fatalf("Forward: %v", err)
	}
}

func TestForwardUnreachableClosesTheConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	client, server := tcpPair(t)
	if err := netpipe.Forward(context.Background(), server, closed); err == nil {
		t.Fatal("Forward to a closed port returned nil")
	}
	if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the forwarded connection was not closed: read gave %v, want EOF", err)
	}
}

func TestForwardEndsWithContext(t *testing.T) {
	target := echoServer(t)
	client, server := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- netpipe.Forward(ctx, server, target) }()
	// Once an echo comes back the pipe is up; the echo server waits for an
	// EOF that never comes, so only ctx ends it.
	client.Write([]byte("x"))
	if _, err := io.ReadFull(client, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Forward: %v", err)
	}
	if _, err := client.Read(make([]byte, 1)); err == nil {
		t.Fatal("the forwarded connection is still open after ctx ended")
	}
}

// tcpPair is both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}
