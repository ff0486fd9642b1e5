package sdktest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Forwarder group: the optional sdk.Forwarder. A provider without one,
// or one that may not forward here, answers ErrUnsupported (the host then
// tunnels over Exec), and the cases say so as they skip.

// greeting is what a sandbox sends through the forward; the target
// answers with reply and the line it got.
const (
	greeting = "hello from the sandbox"
	reply    = "host got: "
)

// settleWait bounds how long a stop the kit waits for in the sandbox may
// take to show there.
const settleWait = 15 * time.Second

// forward is a running Forward.
type forward struct {
	host, port string // where it listens in the sandbox
	stop       context.CancelFunc
	// wait waits for Forward to return, and returns its error.
	wait func() error
}

// startForward starts a Forward from the shared sandbox to a target on the
// host's loopback that answers each line with reply and the line.
func (k *kit) startForward(t T) forward {
	t.Helper()
	target := k.target(t)
	ctx, cancel := context.WithCancel(k.ctx(t))
	listening := make(chan string, 1)
	ended := make(chan struct{})
	var ferr error
	go func() {
		defer close(ended)
		ferr = k.p.Forward(ctx, sdk.ForwardRequest{Sandbox: k.sb.Ref, Target: target}, func(addr string) { listening <- addr })
	}()
	wait := func() error { <-ended; return ferr }
	t.Cleanup(func() {
		cancel()
		_ = wait() // the SDK's client returns once ctx ends
	})
	var addr string
	select {
	case addr = <-listening:
	case <-ended:
		if err := ferr; errors.Is(err, sdk.ErrUnsupported) {
			t.Skipf("the provider does not forward here (Forward: %v): the host tunnels over Exec, which is allowed", err)
		}
		t.Fatalf("Forward ended before it said where it listens: %v", ferr)
	}
	host, port, err := net.SplitHostPort(addr)
	if ip, perr := netip.ParseAddr(host); err != nil || perr != nil || !ip.IsLoopback() {
		t.Fatalf("Forward listens on %q, want an address on the sandbox's loopback (127.0.0.1:PORT)", addr)
	}
	return forward{host: host, port: port, stop: cancel, wait: wait}
}

// target listens on the host's loopback and answers each connection's
// first line with reply and the line.
func (k *kit) target(t T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on the host's loopback: %v", err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(k.cfg.Timeout))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil {
					_, _ = fmt.Fprintf(c, "%s%s", reply, line)
				}
			}()
		}
	}()
	return lis.Addr().String()
}

// client is the program the sandbox connects with: bash's /dev/tcp, or
// python3.
func (k *kit) client(t T) string {
	t.Helper()
	r := k.run(k.ctx(t), t, k.in(k.sb, sh("command -v bash || command -v python3")), nil)
	switch path := strings.TrimSpace(string(r.stdout)); {
	case strings.HasSuffix(path, "/bash"):
		return "bash"
	case strings.HasSuffix(path, "/python3"):
		return "python3"
	}
	t.Fatalf("the Forwarder cases connect from the sandbox with bash or python3, and it has neither: give it one, or skip the cases with Config.Skip saying so")
	return ""
}

// exchange connects to the forward in the sandbox, sends greeting and
// reads the target's answer.
func (k *kit) exchange(t T, fw forward, client string) string {
	t.Helper()
	req := sdk.ExecRequest{Argv: []string{"bash", "-c", `exec 3<>"/dev/tcp/$1/$2" || exit 3; echo "$3" >&3; IFS= read -r line <&3; echo "$line"`, "bash", fw.host, fw.port, greeting}}
	if client == "python3" {
		req.Argv = []string{"python3", "-c", `import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])))
s.sendall((sys.argv[3] + "\n").encode())
print(s.makefile().readline(), end="")`, fw.host, fw.port, greeting}
	}
	r := k.run(k.ctx(t), t, k.in(k.sb, req), nil)
	return string(r.stdout)
}

// A connection made in the sandbox to the address Forward announced
// reaches the target on the host, both ways, and so does the next one.
func (k *kit) forwardReaches(t T) {
	fw := k.startForward(t)
	client := k.client(t)
	want := reply + greeting + "\n"
	for i := range 2 {
		if got := k.exchange(t, fw, client); got != want {
			t.Fatalf("connection %d through the forward at %s:%s: got %q back, want %q", i+1, fw.host, fw.port, got, want)
		}
	}
}

// When its context ends, Forward returns nil and its address in the sandbox
// stops taking connections.
func (k *kit) forwardStops(t T) {
	fw := k.startForward(t)
	client := k.client(t)
	if got := k.exchange(t, fw, client); got != reply+greeting+"\n" {
		t.Fatalf("through the forward: got %q back (see ForwardReachesTarget)", got)
	}
	fw.stop()
	if err := fw.wait(); err != nil {
		t.Errorf("Forward after its context ended: %v, want nil", err)
	}
	// The host's side returns at once; the sandbox's listener closes as
	// the provider sees the end, so the sandbox tries until it is refused.
	req := sdk.ExecRequest{Argv: []string{"bash", "-c", `while (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; do sleep 0.05; done; echo refused`, "bash", fw.host, fw.port}}
	if client == "python3" {
		req.Argv = []string{"python3", "-c", `import socket, sys, time
while True:
    try:
        socket.create_connection((sys.argv[1], int(sys.argv[2]))).close()
    except OSError:
        break
    time.sleep(0.05)
print("refused")`, fw.host, fw.port}
	}
	ctx, cancel := context.WithTimeout(k.ctx(t), min(settleWait, k.cfg.Timeout))
	defer cancel()
	var out strings.Builder
	st, err := k.p.Exec(ctx, k.in(k.sb, req), sdk.ExecIO{Stdout: &out})
	if err != nil && ctx.Err() == nil {
		t.Fatalf("connect after the forward stopped: %v", err)
	}
	if out.String() != "refused\n" {
		t.Errorf("%s:%s in the sandbox still takes connections %v after Forward's context ended (exit %+v)", fw.host, fw.port, min(settleWait, k.cfg.Timeout), st)
	}
}
