package tunnel

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Tunnel is the way from inside a sandbox to the host's proxy: the exec
// tunnel (Host) or the provider's own forward (Forwarded).
type Tunnel interface {
	// Addr is the address to connect to, inside the sandbox.
	Addr() string
	// Done is closed when the tunnel has ended; Err says why.
	Done() <-chan struct{}
	Err() error
	Close() error
}

var (
	_ Tunnel = (*Host)(nil)
	_ Tunnel = (*Forwarded)(nil)
)

// Forwarded is a tunnel the provider keeps itself (sdk.Forwarder): SSH's
// remote port forwarding, on the sandbox's loopback.
type Forwarded struct {
	addr   string
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	err    error
	closed bool
}

// Forward asks the provider to forward from ref's loopback to target (a
// loopback address of the host) and returns once it listens. Its error
// matches sdk.ErrUnsupported when the provider cannot forward here: the
// caller then opens the exec tunnel (Open). The forward runs until Close,
// or until it fails (see Done).
func Forward(ctx context.Context, fwd sdk.Forwarder, ref sdk.SandboxRef, target string) (*Forwarded, error) {
	if err := checkTarget(target); err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &Forwarded{cancel: cancel, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		defer close(f.done)
		err := fwd.Forward(fctx, sdk.ForwardRequest{Sandbox: ref, Target: target}, func(addr string) { listening <- addr })
		f.mu.Lock()
		defer f.mu.Unlock()
		switch {
		case f.closed:
		case err != nil:
			f.err = fmt.Errorf("the forward to the proxy ended: %w", err)
		default:
			f.err = errors.New("the forward to the proxy ended")
		}
	}()
	select {
	case f.addr = <-listening:
		if err := checkListen(f.addr); err != nil {
			f.Close()
			return nil, fmt.Errorf("the provider's forward: %w", err)
		}
		return f, nil
	case <-f.done:
		return nil, f.err
	case <-ctx.Done():
		f.Close()
		return nil, ctx.Err()
	}
}

func (f *Forwarded) Addr() string          { return f.addr }
func (f *Forwarded) Done() <-chan struct{} { return f.done }

// Err says why the forward ended, once Done is closed: nil after Close.
func (f *Forwarded) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// Close stops the forward and waits for it to end.
func (f *Forwarded) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	<-f.done
	return nil
}
