// Package reachtest gives network-policy tests a target they own. "Can the
// sandbox reach the outside?" is asked of a TCP listener the test starts
// outside the sandbox (on host loopback, the host's address on a Docker
// bridge, a network the test created), never of a public address: the
// listener proves a connection happened, or that none did, and the test
// sends nothing anywhere it did not set up.
package reachtest

import (
	"bufio"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Listener is a TCP listener that records what each connection sent as
// its first line (or until it closed).
type Listener struct {
	ln   net.Listener
	got  chan string
	mu   sync.Mutex
	seen int
}

// Listen starts a listener on ip (any free port), closed when the test
// ends.
func Listen(t testing.TB, ip string) *Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	l := &Listener{ln: ln, got: make(chan string, 64)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.mu.Lock()
			l.seen++
			l.mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				select {
				case l.got <- line:
				default: // nobody asked for it
				}
			})
		}
	})
	return l
}

// Addr is the listener's HOST:PORT.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// DevTCP is the listener's address as bash's /dev/tcp/HOST/PORT path
// takes it: HOST/PORT.
func (l *Listener) DevTCP() string {
	a := l.ln.Addr().(*net.TCPAddr)
	return a.IP.String() + "/" + strconv.Itoa(a.Port)
}

// Port is the listener's port.
func (l *Listener) Port() int { return l.ln.Addr().(*net.TCPAddr).Port }

// Accepted is how many connections the listener has accepted so far; one
// a client has just made may still be queued (Next waits for it). A count
// of 0 after the client reported failing to connect confirms that report.
func (l *Listener) Accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen
}

// Next waits for the next connection's first line ("" when it sent none
// before closing), failing the test if none comes within 30 seconds
// (a connection that was made is accepted at once; this only bounds a
// broken test).
func (l *Listener) Next(t testing.TB) string {
	t.Helper()
	select {
	case line := <-l.got:
		return line
	case <-time.After(30 * time.Second):
		t.Fatalf("no connection reached %s", l.Addr())
		return ""
	}
}
