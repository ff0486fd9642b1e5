package run

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/backoff"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/tunnel"
)

// reconnectWindow is how long a run tries to get its sandbox back after
// losing it (an SSH drop, an expired gateway token, a crashed plugin)
// before it gives up following; the agent goes on meanwhile. The
// worker's LLM calls wait out about as long for the tunnel. The tries
// are paced by backoff.Reconnect.
const reconnectWindow = 2 * time.Minute

// live keeps the run's tunnels to the proxy open. They, the workspace and
// the driver all reach the sandbox through the run's stack, so that when
// the plugin dies or a tunnel closes, repair replaces what was lost and
// everything carries on with the new one.
type live struct {
	r      *runner
	target string // the proxy, on host loopback

	mu      sync.Mutex // guards tunnels and serializes repairs
	tunnels []*keptTunnel
	// ctx and cancel are the run's, once keepTunnels was called: the
	// tunnels kept from then on are watched under it.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// keptTunnel is a tunnel the run keeps open: open reopens it whenever it
// closes, until it is closed on purpose or its sandbox end is gone for
// good (tunnel.ErrRunEnded: the agent's run has ended).
type keptTunnel struct {
	what string // "the tunnel to the proxy", for messages
	open func(context.Context, sandboxexec.Execer) (tunnel.Tunnel, error)
	tun  tunnel.Tunnel // nil until it first opened
	over bool
}

// keep opens a tunnel with open and keeps it open from then on (see
// keptTunnel). When this first open fails, it says why, and the tunnel is
// reopened as if it had closed; when its end is gone for good
// (tunnel.ErrRunEnded), it returns that, and nothing is kept.
func (l *live) keep(ctx context.Context, what string, open func(context.Context, sandboxexec.Execer) (tunnel.Tunnel, error)) (*keptTunnel, error) {
	tun, err := open(ctx, l.r.st)
	if errors.Is(err, tunnel.ErrRunEnded) {
		return nil, err
	}
	if err != nil {
		tun = nil // not a typed nil: the tunnel never opened
	}
	k := &keptTunnel{what: what, open: open, tun: tun}
	l.watchFromNow(k)
	return k, err
}

// watchFromNow adds k to the tunnels kept, watched from now on once
// keepTunnels was called.
func (l *live) watchFromNow(k *keptTunnel) {
	l.mu.Lock()
	l.tunnels = append(l.tunnels, k)
	runCtx, cancel := l.ctx, l.cancel
	l.mu.Unlock()
	if runCtx != nil {
		go l.watch(runCtx, cancel, k)
	}
}

// keepTunnels watches every tunnel kept, now and from now on, under ctx:
// each is reopened whenever it closes, and ctx is cancelled, with the
// reason, when one cannot be.
func (l *live) keepTunnels(ctx context.Context, cancel context.CancelCauseFunc) {
	l.mu.Lock()
	l.ctx, l.cancel = ctx, cancel
	tunnels := append([]*keptTunnel(nil), l.tunnels...)
	l.mu.Unlock()
	for _, k := range tunnels {
		go l.watch(ctx, cancel, k)
	}
}

// current is k's tunnel (nil: it never opened), and false once k is over.
func (l *live) current(k *keptTunnel) (tunnel.Tunnel, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return k.tun, !k.over
}

// watch reopens k whenever it closes (or first, when it never opened),
// until ctx is done or k is over; when it cannot within reconnectWindow,
// it cancels the run with why.
func (l *live) watch(ctx context.Context, cancel context.CancelCauseFunc, k *keptTunnel) {
	for {
		tun, ok := l.current(k)
		if !ok {
			return
		}
		why := errors.New("it never opened")
		if tun != nil {
			select {
			case <-ctx.Done():
				return
			case <-tun.Done():
			}
			why = tun.Err()
			if errors.Is(why, tunnel.ErrRunEnded) {
				// Its run ended, and the tunnel with it.
				l.mu.Lock()
				k.over = true
				l.mu.Unlock()
				return
			}
		}
		if _, ok := l.current(k); !ok || ctx.Err() != nil {
			return
		}
		if err := retry(ctx, l.repair); err != nil {
			if ctx.Err() == nil {
				cancel(fmt.Errorf("%s closed (%v) and could not be reopened: %w", k.what, why, err))
			}
			return
		}
	}
}

// repair starts the plugin again if it died (and the sandbox, should it
// be down), and reopens every kept tunnel that closed. It does nothing
// when nothing was lost.
func (l *live) repair(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	log := l.r.host.Logger
	if _, err := l.r.st.Repair(ctx); err != nil {
		return err
	}
	for _, k := range l.tunnels {
		if k.over || (k.tun != nil && !closed(k.tun)) {
			continue
		}
		if k.tun != nil {
			log.Warn(k.what+" closed; reopening it", "reason", k.tun.Err())
		}
		tun, err := k.open(ctx, l.r.st)
		if errors.Is(err, tunnel.ErrRunEnded) {
			k.over = true
			continue
		}
		if err != nil {
			return fmt.Errorf("reopen %s: %w", k.what, err)
		}
		k.tun = tun
	}
	return nil
}

func closed(t tunnel.Tunnel) bool {
	select {
	case <-t.Done():
		return true
	default:
		return false
	}
}

// close closes k for good.
func (l *live) close(k *keptTunnel) error {
	l.mu.Lock()
	k.over = true
	tun := k.tun
	l.mu.Unlock()
	if tun == nil {
		return nil
	}
	return tun.Close()
}

// closeTunnels closes every tunnel for good; it reports whether any had
// opened.
func (l *live) closeTunnels() (bool, error) {
	l.mu.Lock()
	tunnels := append([]*keptTunnel(nil), l.tunnels...)
	l.mu.Unlock()
	opened := false
	var errs []error
	for _, k := range tunnels {
		opened = opened || k.tun != nil
		errs = append(errs, l.close(k))
	}
	return opened, errors.Join(errs...)
}

// retry calls fn until it succeeds, ctx is done, or reconnectWindow has
// passed since the first failure, waiting longer after each.
func retry(ctx context.Context, fn func(context.Context) error) error {
	deadline := time.Now().Add(reconnectWindow)
	b := backoff.Reconnect()
	for {
		err := fn(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(b.Next()).After(deadline) {
			return fmt.Errorf("gave up after %s: %w", reconnectWindow, err)
		}
		if !b.Wait(ctx) {
			return errors.Join(err, ctx.Err())
		}
	}
}
