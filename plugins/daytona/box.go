package daytona

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

// box is a started sandbox this process works in: its gateway connection
// and the access token that logs in to it, renewed before it expires.
type box struct {
	acct *account
	name string
	id   string
	user string

	setupMu sync.Mutex
	setup   setup // the home and worker there, once ready has made them

	muxMu sync.Mutex
	mux   *envelope.Mux // the command session, once started

	mu      sync.Mutex
	access  api.SSHAccess // the current token; zero before the first
	minutes int           // the lifetime asked for each token
	conn    *sshtransport.Conn
	cancel  context.CancelFunc // stops the renewal
}

// adopt returns the box of a started sandbox, keeping the one already
// known for that sandbox.
func (a *account) adopt(name string, sb api.Sandbox, tokenMinutes int) *box {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.boxes[name]; ok && b.id == sb.ID {
		return b
	} else if ok {
		go b.shut()
	}
	user := sb.User
	if user == "" {
		user = "daytona" // Daytona's default
	}
	b := &box{acct: a, name: name, id: sb.ID, user: user, minutes: tokenMinutes}
	a.boxes[name] = b
	return b
}

// forget drops a box whose sandbox is gone.
func (a *account) forget(b *box) {
	a.mu.Lock()
	if a.boxes[b.name] == b {
		delete(a.boxes, b.name)
	}
	a.mu.Unlock()
	b.shut()
}

// connection returns the gateway connection, minting the first token
// (whose command names the gateway) when there is none yet.
func (b *box) connection(ctx context.Context) (*sshtransport.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.conn != nil {
		return b.conn, nil
	}
	if err := b.mint(ctx); err != nil {
		return nil, err
	}
	addr, err := gatewayAddr(b.access.SSHCommand)
	if err != nil {
		return nil, err
	}
	b.conn = sshtransport.New(sshtransport.Target{
		Addr: addr,
		// Names the target in messages; the login is the token.
		User:     "sandbox-" + b.name,
		Login:    b.login,
		HostKeys: b.acct.hostKeys,
	}, sshtransport.Options{Logger: b.acct.logger})
	rctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go b.renew(rctx)
	return b.conn, nil
}

// login gives the token to log in with: the one the processes of this
// host share for the sandbox (tokens.go), or a new one when that is about
// to expire or is the one the gateway just closed the last login on
// (stale: revoked or expired). A login refused because another process
// replaced the token finds the new one in the cache, and mints nothing.
func (b *box) login(ctx context.Context, stale bool) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	refused := ""
	if stale {
		refused = b.access.Token
	}
	if err := b.useToken(ctx, refused); err != nil {
		return "", err
	}
	return b.access.Token, nil
}

// margin is how long before its expiry a token is replaced: a quarter of
// its life, at most five minutes.
func (b *box) margin(a api.SSHAccess) time.Duration {
	life := a.ExpiresAt.Sub(a.CreatedAt)
	if life <= 0 {
		life = time.Duration(b.minutes) * time.Minute
	}
	return min(life/4, 5*time.Minute)
}

// mint makes b.access a token to log in with: the shared one while it
// lives, else a new one. b.mu is held.
func (b *box) mint(ctx context.Context) error { return b.useToken(ctx, "") }

// useToken makes b.access the token to log in with, never refused (see
// login). Daytona revokes the sandbox's other tokens when it makes one,
// so a replaced token needs no revoking. b.mu is held.
func (b *box) useToken(ctx context.Context, refused string) error {
	a, err := b.acct.tokens.token(ctx, tokenRequest{
		sandboxID: b.id,
		current:   b.access,
		refused:   refused,
		margin:    b.margin,
		mint:      b.newToken,
	})
	if err != nil {
		return err
	}
	b.access = a
	return nil
}

// newToken asks Daytona for a new token.
func (b *box) newToken(ctx context.Context) (api.SSHAccess, error) {
	a, err := b.acct.api.CreateSSHAccess(ctx, b.id, b.minutes)
	if err != nil {
		return a, fmt.Errorf("get an SSH gateway token for Daytona sandbox %s (%s): %w", b.name, b.id, err)
	}
	if a.Token == "" {
		return a, sdk.Errorf(sdk.ErrUnavailable, "Daytona gave an empty SSH gateway token for sandbox %s (%s)", b.name, b.id)
	}
	return a, nil
}

// revoke revokes a token, or all of the sandbox's when token is empty,
// and drops it from the shared cache, logging (never the token) when it
// cannot.
func (b *box) revoke(token string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.acct.api.RevokeSSHAccess(ctx, b.id, token); err != nil {
		b.acct.logger.Debug("revoke SSH gateway tokens", "sandbox", b.name, "error", err)
	}
	b.acct.tokens.drop(ctx, b.id, token)
}

// renew replaces the token a margin before it expires, for as long as the
// box is in use, so a new gateway connection (more sessions, or after a
// drop) never waits for one mid-run. It goes through the shared cache:
// when another process renewed first, its token is taken.
func (b *box) renew(ctx context.Context) {
	for {
		b.mu.Lock()
		due := time.Until(b.access.ExpiresAt) - b.margin(b.access)
		b.mu.Unlock()
		t := time.NewTimer(max(due, time.Second/10))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		b.mu.Lock()
		if time.Until(b.access.ExpiresAt) < b.margin(b.access) {
			if err := b.useToken(ctx, ""); err != nil && ctx.Err() == nil {
				b.acct.logger.Warn("renew the SSH gateway token (the next login tries again)", "sandbox", b.name, "error", err)
			}
		}
		b.mu.Unlock()
	}
}

// close ends the box: its connection and renewal stop, and its token is
// revoked: all of the sandbox's when it is deleted; only the one in use
// when it is only stopped (the processes sharing it lose it too, and
// mint another when they need one).
func (b *box) close(onlyOurs bool) {
	b.mu.Lock()
	token := b.access.Token
	b.mu.Unlock()
	b.shut()
	switch {
	case !onlyOurs:
		b.revoke("")
	case token != "":
		b.revoke(token)
	}
}

// shut closes the command session and the connection, and stops the
// renewal.
func (b *box) shut() {
	b.closeSession()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cancel != nil {
		b.cancel()
		b.cancel = nil
	}
	if b.conn != nil {
		b.conn.Close()
		b.conn = nil
	}
}
