package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/tunnel"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Bounds of reconnection.
const (
	// reconnectWindow is how long a run tries to get its sandbox back
	// after losing it (an SSH drop, an expired gateway token, a crashed
	// plugin) before it gives up following; the agent goes on meanwhile.
	// The worker's LLM calls wait out about as long for the tunnel.
	reconnectWindow = 2 * time.Minute
	// retryFirst and retryMost are the first and the longest wait
	// between two attempts.
	retryFirst = 200 * time.Millisecond
	retryMost  = 5 * time.Second
)

// live is the run's way into its sandbox: the provider plugin and the
// tunnel to the proxy. The workspace, the driver and the tunnel all go
// through it, so that when the plugin dies or the tunnel closes, repair
// replaces what was lost and everything carries on with the new one.
type live struct {
	r *runner

	mu     sync.Mutex
	sb     *sandbox.Sandbox
	tun    tunnel.Tunnel
	worker string
	// listen is the tunnel's address inside the sandbox, which the
	// worker was told: a reopened tunnel listens there again.
	listen string
	target string // the proxy, on host loopback
}

// Exec runs in the sandbox through the current plugin.
func (l *live) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	return l.sandbox().Exec(ctx, req, eio)
}

// SandboxRef is the sandbox it runs in.
func (l *live) SandboxRef() sdk.SandboxRef { return l.sandbox().Ref }

func (l *live) sandbox() *sandbox.Sandbox {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sb
}

func (l *live) tunnel() tunnel.Tunnel {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tun
}

// repair starts the plugin again if it died (and the sandbox, should it
// be down), and reopens the tunnel if it closed, at the address the
// worker knows. It does nothing when nothing was lost.
func (l *live) repair(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	log := l.r.host.Logger
	if l.sb.ProviderExited() {
		log.Warn("the provider plugin is gone; starting it again", "provider", l.sb.Info.Name)
		sb, err := l.r.host.Sandboxes.Open(ctx, l.r.req.Profile, log)
		if err != nil {
			return err
		}
		if _, err := sb.Up(ctx); err != nil {
			sb.Close()
			return err
		}
		l.sb.Close()
		l.sb = sb
	}
	if l.tun == nil {
		return nil
	}
	select {
	case <-l.tun.Done():
	default:
		return nil
	}
	log.Warn("the tunnel to the proxy closed; reopening it", "reason", l.tun.Err(), "listen", l.listen)
	tun, err := tunnel.Open(ctx, l.sb, tunnel.HostOptions{Worker: l.worker, Listen: l.listen, Target: l.target, Logger: log})
	if err != nil {
		return err
	}
	l.tun = tun
	return nil
}

// keepTunnel reopens the tunnel whenever it closes, until ctx is done;
// when it cannot within reconnectWindow, it cancels the run with why.
func (l *live) keepTunnel(ctx context.Context, cancel context.CancelCauseFunc) {
	for {
		tun := l.tunnel()
		select {
		case <-ctx.Done():
			return
		case <-tun.Done():
		}
		if ctx.Err() != nil {
			return
		}
		if err := retry(ctx, l.repair); err != nil {
			if ctx.Err() == nil {
				cancel(fmt.Errorf("the tunnel to the proxy closed (%v) and could not be reopened: %w", tun.Err(), err))
			}
			return
		}
	}
}

// retry calls fn until it succeeds, ctx is done, or reconnectWindow has
// passed since the first failure, waiting longer after each.
func retry(ctx context.Context, fn func(context.Context) error) error {
	deadline := time.Now().Add(reconnectWindow)
	wait := retryFirst
	for {
		err := fn(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("gave up after %s: %w", reconnectWindow, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, retryMost)
	}
}

// closeTunnel closes the current tunnel.
func (l *live) closeTunnel() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.tun.Close()
}
