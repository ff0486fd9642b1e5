// Package sshtransport is an SSH connection to a remote machine for sandbox
// providers: dialling (through a jump host), verified host keys, agent and
// key-file authentication, keepalives and reconnection, sessions within
// the server's MaxSessions, commands with streamed I/O and cancellation
// (Exec), short commands (Output), remote port forwards (Listen), and
// commands that move much data through OpenSSH's client where it can
// (ExecBulk).
// The SSH provider and the Daytona provider (whose exec goes through its
// SSH gateway) build on it.
//
// It is part of the SDK's optional toolkit (see package toolkit), not of
// the provider contract.
package sshtransport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Target is a machine to log in to.
type Target struct {
	// Addr is host:port.
	Addr string
	User string
	Auth Auth
	// HostKeys verifies the host's key; required.
	HostKeys *HostKeys
	// Jump, when set, is the host the connection goes through (ProxyJump).
	Jump *Target
	// Login, when set, gives the user name at each login instead of User,
	// which then only names the target in messages: a gateway that takes
	// a short-lived token as the user (Daytona's). stale is true when the
	// server closed the last login's connection before it could be used,
	// as such a gateway does with an expired or revoked token.
	Login func(ctx context.Context, stale bool) (user string, err error)
}

func (t Target) String() string { return t.User + "@" + t.Addr }

// Options tune a Conn.
type Options struct {
	// KeepAlive is how often an idle connection is checked; a connection
	// that does not answer within it is dropped. Default 15 s.
	KeepAlive time.Duration
	// DialTimeout bounds connecting and logging in. Default 15 s.
	DialTimeout time.Duration
	// MaxClients is how many connections a Conn opens when the server's
	// MaxSessions is reached on each. Default 8.
	MaxClients int
	// OpenSSH is the path of OpenSSH's ssh client; when set, ExecBulk
	// uses it (see there). Empty: every exec uses x/crypto/ssh.
	OpenSSH string
	Logger  *slog.Logger
}

// Conn is the connection to one target, shared by everything that runs
// there. It connects on first use, opens sessions within the server's
// MaxSessions (learning it from the server's refusals, and opening another
// connection rather than failing), checks idle connections with
// keepalives, and connects again, with backoff, when one drops.
type Conn struct {
	target Target
	opts   Options

	mu      sync.Mutex
	clients []*client
	dialing bool
	freed   chan struct{} // closed (and replaced) when a slot frees or a client comes or goes
	closed  bool
	// refused counts the connections in a row that closed before any use
	// (a server that closes a login it does not accept); the next login is
	// told (stale), and Session gives up at maxRefused.
	refused int
	// hostKey is the host key the last login verified.
	hostKey ssh.PublicKey

	bulk bulk
}

// maxRefused is how many logins in a row may be closed unused by the
// server before Session gives up.
const maxRefused = 3

// client is one SSH connection of a Conn.
type client struct {
	ssh  *ssh.Client
	jump *ssh.Client // the jump host's connection, closed with it
	open int         // sessions open or being opened
	est  int         // sessions open
	// limit is the server's MaxSessions as learned from a refusal; 0 while
	// unknown.
	limit int
	used  bool // a session opened on it
	dead  bool
	done  chan struct{}
}

// New returns a Conn to target; nothing is dialled yet.
func New(target Target, opts Options) *Conn {
	if opts.KeepAlive == 0 {
		opts.KeepAlive = 15 * time.Second
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 15 * time.Second
	}
	if opts.MaxClients == 0 {
		opts.MaxClients = 8
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Conn{target: target, opts: opts, freed: make(chan struct{})}
}

// Target is where the Conn connects.
func (c *Conn) Target() Target { return c.target }

// Session opens a session; release must be called once it is closed.
func (c *Conn) Session(ctx context.Context) (s *ssh.Session, release func(), err error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, nil, errors.New("ssh connection closed")
		}
		var pick *client
		live := 0
		for _, cl := range c.clients {
			if cl.dead {
				continue
			}
			live++
			if pick == nil && (cl.limit == 0 || cl.open < cl.limit) {
				pick = cl
			}
		}
		if pick != nil {
			pick.open++
			c.mu.Unlock()
			s, err := c.openSession(ctx, pick)
			if err == nil {
				c.mu.Lock()
				pick.est++
				pick.used = true
				c.refused = 0
				c.mu.Unlock()
				return s, func() { c.release(pick) }, nil
			}
			var refused *ssh.OpenChannelError
			c.mu.Lock()
			pick.open--
			if errors.As(err, &refused) {
				// The server refused the channel on a working connection
				// (OpenSSH: "connect failed: open failed" at MaxSessions):
				// this connection holds no more sessions.
				pick.limit = max(pick.est, 1)
				c.mu.Unlock()
				continue
			}
			c.mu.Unlock()
			if ctx.Err() != nil {
				return nil, nil, fmt.Errorf("open an ssh session on %s: %w", c.target, ctx.Err())
			}
			c.drop(pick, err)
			continue
		}
		if live < c.opts.MaxClients && !c.dialing {
			if c.refused >= maxRefused {
				n := c.refused
				c.refused = 0
				c.mu.Unlock()
				return nil, nil, sdk.Errorf(sdk.ErrUnavailable, "ssh %s closed the connection right after the login, %d times in a row: it does not accept the login", c.target, n)
			}
			if err := c.dialMore(ctx); err != nil {
				return nil, nil, err
			}
			continue
		}
		if err := c.wait(ctx); err != nil {
			return nil, nil, fmt.Errorf("wait for an ssh session on %s: %w", c.target, err)
		}
	}
}

// openSession opens a session on cl, within ctx and DialTimeout: a
// connection whose server stopped answering (its peer gone without the TCP
// connection closing) would otherwise block NewSession for good. On the
// timeout cl is closed, which marks it dead.
//
// Nothing here waits for NewSession once it gives up on it: x/crypto/ssh
// can lose a channel open that races the connection's end (its mux drops
// its channels before it closes the connection, so an open sent in between
// is never answered), and that NewSession never returns. The end of cl is
// one of the things waited for instead.
func (c *Conn) openSession(ctx context.Context, cl *client) (*ssh.Session, error) {
	type opened struct {
		s   *ssh.Session
		err error
	}
	done := make(chan opened, 1)
	go func() {
		s, err := cl.ssh.NewSession()
		done <- opened{s, err}
	}()
	// abandon closes the session if it comes after all.
	abandon := func() {
		go func() {
			if o := <-done; o.err == nil {
				o.s.Close()
			}
		}()
	}
	t := time.NewTimer(c.opts.DialTimeout)
	defer t.Stop()
	select {
	case o := <-done:
		return o.s, o.err
	case <-cl.done:
		abandon()
		return nil, fmt.Errorf("ssh %s: the connection ended while a session was being opened", c.target)
	case <-t.C:
		cl.ssh.Close()
		abandon()
		return nil, fmt.Errorf("ssh %s did not open a session within %v", c.target, c.opts.DialTimeout)
	case <-ctx.Done():
		// Other sessions share cl: leave it open.
		abandon()
		return nil, ctx.Err()
	}
}

// dialMore adds a connection; c.mu is held on entry and released.
func (c *Conn) dialMore(ctx context.Context) error {
	c.dialing = true
	c.mu.Unlock()
	cl, err := c.dialBackoff(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dialing = false
	if err == nil {
		c.clients = append(c.clients, cl)
	}
	c.signal()
	return err
}

// wait waits for a slot, a connection or a dial to end; c.mu is held on
// entry and released.
func (c *Conn) wait(ctx context.Context) error {
	freed := c.freed
	c.mu.Unlock()
	select {
	case <-freed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// liveClient returns a working connection, dialling one if there is none.
func (c *Conn) liveClient(ctx context.Context) (*client, error) {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, errors.New("ssh connection closed")
		}
		for _, cl := range c.clients {
			if !cl.dead {
				c.mu.Unlock()
				return cl, nil
			}
		}
		if !c.dialing {
			if err := c.dialMore(ctx); err != nil {
				return nil, err
			}
			continue
		}
		if err := c.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// signal wakes the waiters for a slot; c.mu is held.
func (c *Conn) signal() {
	close(c.freed)
	c.freed = make(chan struct{})
}

func (c *Conn) release(cl *client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl.open--
	cl.est--
	c.signal()
}

// drop closes a client whose connection failed; the next session dials
// again.
func (c *Conn) drop(cl *client, why error) {
	c.mu.Lock()
	if cl.dead {
		c.mu.Unlock()
		return
	}
	cl.dead = true
	if !cl.used && !c.closed {
		c.refused++
	}
	close(cl.done)
	live := c.clients[:0]
	for _, o := range c.clients {
		if o != cl {
			live = append(live, o)
		}
	}
	c.clients = live
	c.signal()
	c.mu.Unlock()
	cl.ssh.Close()
	if cl.jump != nil {
		cl.jump.Close()
	}
	if why != nil {
		c.opts.Logger.Info("ssh connection dropped", "target", c.target.String(), "reason", why)
	}
}

// dialBackoff dials, trying again with backoff while the host cannot be
// reached; refused keys and host keys are not tried again.
func (c *Conn) dialBackoff(ctx context.Context) (*client, error) {
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cl, err := c.dial(ctx)
		if err == nil || !errors.Is(err, sdk.ErrUnavailable) || attempt == 4 {
			return cl, err
		}
		c.opts.Logger.Debug("ssh connect failed; trying again", "target", c.target.String(), "in", wait, "error", err)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, err
		}
		wait *= 2
	}
}

// dial connects and logs in, and starts the client's keepalives.
func (c *Conn) dial(ctx context.Context) (*client, error) {
	var jump *ssh.Client
	if c.target.Jump != nil {
		j := New(*c.target.Jump, c.opts)
		jc, err := j.dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("through jump host %s: %w", c.target.Jump, err)
		}
		jump = jc.ssh
	}
	user := c.target.User
	if c.target.Login != nil {
		c.mu.Lock()
		stale := c.refused > 0
		c.mu.Unlock()
		var err error
		if user, err = c.target.Login(ctx, stale); err != nil {
			if jump != nil {
				jump.Close()
			}
			return nil, fmt.Errorf("ssh %s: log in: %w", c.target, err)
		}
	}
	sc, key, err := login(ctx, c.target, user, c.opts.DialTimeout, jump)
	if err != nil {
		if jump != nil {
			jump.Close()
		}
		return nil, err
	}
	c.mu.Lock()
	c.hostKey = key
	c.mu.Unlock()
	cl := &client{ssh: sc, jump: jump, done: make(chan struct{})}
	go func() {
		err := sc.Wait()
		c.drop(cl, fmt.Errorf("connection closed: %v", err))
	}()
	go c.keepAlive(cl)
	c.opts.Logger.Debug("ssh connected", "target", c.target.String())
	return cl, nil
}

// login dials target (through jump when not nil) and authenticates as
// user, returning the host key it verified; messages name the target as
// target.String() says, never user.
func login(ctx context.Context, target Target, user string, timeout time.Duration, jump *ssh.Client) (*ssh.Client, ssh.PublicKey, error) {
	if target.HostKeys == nil {
		return nil, nil, sdk.Errorf(sdk.ErrInvalid, "ssh %s: no known_hosts to verify its host key with", target)
	}
	signers, tried, closeAgent, err := target.Auth.signers()
	if err != nil {
		return nil, nil, err
	}
	defer closeAgent()
	var hostKeyErr error
	var verified ssh.PublicKey
	check := target.HostKeys.Callback()
	cfg := &ssh.ClientConfig{
		User: user,
		Auth: []ssh.AuthMethod{ssh.PublicKeysCallback(signers)},
		HostKeyCallback: func(host string, remote net.Addr, key ssh.PublicKey) error {
			if hostKeyErr = check(host, remote, key); hostKeyErr == nil {
				verified = key
			}
			return hostKeyErr
		},
		HostKeyAlgorithms: target.HostKeys.Algorithms(target.Addr),
		Timeout:           timeout,
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	if jump != nil {
		conn, err = jump.DialContext(ctx, "tcp", target.Addr)
	} else {
		conn, err = (&net.Dialer{}).DialContext(ctx, "tcp", target.Addr)
	}
	if err != nil {
		return nil, nil, sdk.Errorf(sdk.ErrUnavailable, "cannot reach %s: %v", target.Addr, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	cc, chans, reqs, err := ssh.NewClientConn(conn, target.Addr, cfg)
	interrupted := !stop()
	switch {
	case err == nil && !interrupted:
		return ssh.NewClient(cc, chans, reqs), verified, nil
	case err == nil:
		cc.Close()
		err = ctx.Err()
	}
	conn.Close()
	switch {
	case hostKeyErr != nil:
		return nil, nil, hostKeyErr
	case strings.Contains(err.Error(), "unable to authenticate"):
		keys := "no keys: set ssh.identity_files or SSH_AUTH_SOCK"
		if len(tried) > 0 {
			keys = "tried " + strings.Join(tried, ", ")
		}
		return nil, nil, sdk.Errorf(sdk.ErrPermission, "ssh %s refused the login (%s): %v", target, keys, err)
	case interrupted || errors.Is(err, context.DeadlineExceeded):
		return nil, nil, sdk.Errorf(sdk.ErrUnavailable, "cannot reach %s: no SSH handshake within %v", target.Addr, timeout)
	}
	return nil, nil, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: %v", target, err)
}

// keepAlive asks the server for a reply every KeepAlive while the client
// lives, and drops it when none comes in time.
func (c *Conn) keepAlive(cl *client) {
	t := time.NewTicker(c.opts.KeepAlive)
	defer t.Stop()
	for {
		select {
		case <-cl.done:
			return
		case <-t.C:
		}
		answered := make(chan error, 1)
		go func() {
			_, _, err := cl.ssh.SendRequest("keepalive@openssh.com", true, nil)
			answered <- err
		}()
		select {
		case err := <-answered:
			if err != nil {
				c.drop(cl, fmt.Errorf("keepalive: %w", err))
				return
			}
		case <-time.After(c.opts.KeepAlive):
			c.drop(cl, fmt.Errorf("keepalive: no answer within %v", c.opts.KeepAlive))
			return
		case <-cl.done:
			return
		}
	}
}

// Output runs a short command and returns its stdout. A non-zero exit is
// an error carrying its stderr.
func (c *Conn) Output(ctx context.Context, cmd string, stdin io.Reader) (string, error) {
	s, release, err := c.Session(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	defer s.Close()
	var out, errb bytes.Buffer
	s.Stdin, s.Stdout, s.Stderr = stdin, &out, &errb
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	if err := s.Run(cmd); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var exit *ssh.ExitError
		if errors.As(err, &exit) {
			return out.String(), fmt.Errorf("exit status %d: %s", exit.ExitStatus(), strings.TrimSpace(errb.String()))
		}
		return out.String(), sdk.Errorf(sdk.ErrUnavailable, "ssh %s: %v", c.target, err)
	}
	return out.String(), nil
}

// Listen asks the server to listen on its side (tcpip-forward) and hands
// over the connections made to it. A server that refuses forwarding
// (AllowTcpForwarding no) gives ErrUnsupported.
func (c *Conn) Listen(ctx context.Context, addr string) (net.Listener, error) {
	cl, err := c.liveClient(ctx)
	if err != nil {
		return nil, err
	}
	lis, err := cl.ssh.Listen("tcp", addr)
	if err == nil {
		c.mu.Lock()
		cl.used = true
		c.mu.Unlock()
	}
	if err != nil {
		if strings.Contains(err.Error(), "request denied") {
			return nil, sdk.Errorf(sdk.ErrUnsupported, "ssh %s refuses port forwarding (AllowTcpForwarding no?): %v", c.target, err)
		}
		return nil, fmt.Errorf("ssh %s: listen on %s: %w", c.target, addr, err)
	}
	return lis, nil
}

// Close closes every connection.
func (c *Conn) Close() error {
	c.mu.Lock()
	c.closed = true
	clients := c.clients
	c.mu.Unlock()
	for _, cl := range clients {
		c.drop(cl, nil)
	}
	c.closeBulk()
	return nil
}
