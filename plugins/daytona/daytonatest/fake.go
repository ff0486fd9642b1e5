// Package daytonatest is a fake of Daytona for tests: its REST API (the
// subset the Daytona provider uses, shaped as Daytona's OpenAPI file says:
// paths, JSON field names, states and transitions, error bodies), the
// toolbox's process/execute, and an SSH gateway that takes an SSH access
// token as the user name and runs session commands in the sandbox, as
// Daytona's gateway does.
//
// The gateway behaves like Daytona's real SSH path, which is three hops
// (the ssh-gateway, the runner's SSH hop, the daemon's SSH server in the
// sandbox) that copy only a channel's data stream and forward its
// requests in a goroutine that races the channel's close. So, unless
// Options.IdealGateway:
//   - stderr never reaches the client, and once a window's worth of it
//     (Options.Window) is unread, the command's output stops until the
//     session ends;
//   - the exit-status is lost now and then (Options.ExitStatusLoss), and
//     there is never an exit-signal: a command killed by a signal ends
//     with exit-status 1;
//   - commands have no session or process group of their own: they are
//     children of a long-lived process per sandbox (the daemon), in its
//     group; a "signal" request reaches the shell only; when the client
//     goes away, a command gets EOF on stdin and nothing else;
//   - "env" requests are accepted and ignored; a pty is given only to a
//     "shell" (an "exec" after a pty-req runs without one); "shell"
//     without a pty runs /bin/sh on stdin;
//   - direct-tcpip channels are forwarded (dialled from the sandbox),
//     every global request (tcpip-forward, keepalives) is answered false,
//     and every channel is accepted before the sandbox is reached, then
//     closed if it cannot be served;
//   - a token whose sandbox is not started is let through the handshake,
//     then the connection is closed.
//
// Not modelled: the daemon's sftp subsystem and agent forwarding (refused
// here) and its Unix-socket forwards (closed at once). The toolbox's
// process/execute runs each command in a session of its own (on Daytona,
// they too are the daemon's children). In Docker, a command whose client
// went away has its output drained by the engine, where Daytona's daemon
// would close the pipe (EPIPE); and the engine's buffers let a command
// write some more stderr than the window before it blocks.
//
// Sandboxes are real Docker containers when Options.Docker is set, and
// directories on the host (commands run on the host) otherwise. In
// Docker, the daemon's stand-in is a small Perl program (perl-base is in
// every Debian-based image) started in the container whenever it starts.
//
// The fake checks its own answers against Daytona's OpenAPI files
// (testdata/api.yaml, testdata/toolbox.yaml) in its tests, so drift from
// the real API shows there.
package daytonatest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// DefaultSnapshot is the snapshot a create that names neither a snapshot
// nor buildInfo gets, as on Daytona.
const DefaultSnapshot = "daytonaio/sandbox:latest"

// Options configure a Fake.
type Options struct {
	// Docker is the engine sandboxes run in. Nil: sandboxes are host
	// directories and commands run on the host.
	Docker *client.Client
	// Image is the local image sandboxes run (default image.TestBase,
	// "amelia-base:bookworm").
	Image string
	// Snapshots maps snapshot names to local images; DefaultSnapshot
	// (used when a create names neither snapshot nor buildInfo) maps to
	// Image unless given.
	Snapshots map[string]string
	// StartDelay is how long creating, starting and stopping take at least,
	// passing through the intermediate states (default 200ms).
	StartDelay time.Duration
	// TokenTTL, when > 0, makes SSH access tokens expire after it instead
	// of expiresInMinutes.
	TokenTTL time.Duration
	// User is the sandbox user (default "daytona", uid 1000, home
	// /home/daytona).
	User string
	// ListLag is how far behind GET /sandbox is: it answers from the
	// sandboxes as they were ListLag ago. Daytona's list is "eventually
	// consistent" (sandbox.controller.ts listSandboxes): it is served from
	// a search index (OpenSearch) that is fed from the database. Default
	// 1 s (OpenSearch makes writes searchable at its refresh, every second
	// by default); negative: no lag, for a test of something else that
	// must list what it just made and says why.
	ListLag time.Duration
	// LookupCacheTTL is how long a request naming a sandbox by a name
	// that no sandbox has keeps finding none (404), even once a sandbox of
	// that name is created. Daytona caches its lookups by name in Redis
	// for SANDBOX_LOOKUP_CACHE_TTL_MS, 10 s (sandbox.service.ts
	// findOneByIdOrName), misses included, and a create does not clear
	// that cache: only a later change of the sandbox (its first state
	// change, a delete) does (sandbox.repository.ts insert and update). So
	// a client that looked for the name, lost the race to create it (409,
	// "Sandbox with name ... already exists") and looks again may be told
	// it does not exist. Default 10 s; negative: no cache.
	LookupCacheTTL time.Duration
	// StartWait is how long POST /sandbox/{id}/start holds its answer
	// waiting for the sandbox to be started, as Daytona's does; default,
	// as there, 30 s.
	StartWait time.Duration
	// KeepOtherTokens makes a new SSH access token leave the sandbox's
	// others valid. Daytona revokes them all (sandbox.service.ts
	// createSshAccess), which is the default; a test that opts out says
	// why.
	KeepOtherTokens bool
	// SnapshotClasses gives snapshots a sandbox class (api.ClassLinuxVM,
	// api.ClassWindows...), as Daytona's snapshots have; other snapshots
	// and Dockerfile builds make containers.
	SnapshotClasses map[string]string
	// RunnerDomain is the domain GET /runners/by-sandbox/{id} answers,
	// which Daytona's SSH gateway dials on port 2220; default "127.0.0.1".
	RunnerDomain string
	Logger       *slog.Logger

	// IdealGateway makes the gateway a clean SSH server rather than one
	// that behaves like Daytona's real chain (see Fake): it delivers
	// stderr, exit-status and exit-signal, runs each exec as the leader of
	// its own session and process group, refuses env, pty-req and shell,
	// ignores signal, and serves no channel but session. Tests that need it
	// say why.
	IdealGateway bool
	// ExitStatusLoss is the share of session commands whose exit-status
	// the gateway loses, as Daytona's chain loses it to a race between
	// forwarding the request and closing the channel: 0 means
	// DefaultExitStatusLoss, a negative value none, 1 every one.
	ExitStatusLoss float64
	// Window is the SSH channel window of the gateway's hops, in bytes:
	// the stderr they never read counts against it, so a command's output
	// stops once this much stderr is unread, until the session ends. 0
	// means DefaultWindow; a negative value, no limit.
	Window int
	// ExternalGateway ("host:port"), when set, starts no gateway: SSH
	// accesses name this address in their sshCommand, so that Daytona's
	// real gateway can be run against the fake.
	ExternalGateway string
	// Minute is how long a minute of Daytona's time lasts in the fake,
	// for auto-stop (autoStopInterval is in minutes; the check runs every
	// 10 s of it, the gateway's keepalive every 45 s of it): default a
	// minute. A test of auto-stop sets a few seconds. Fake-only.
	Minute time.Duration
	// Command is the main process of a sandbox's container, under tini
	// (default: sleep infinity), for instance Daytona's daemon for a
	// harness that runs the real chain against the fake. Docker only.
	Command []string
}

// DefaultExitStatusLoss is how often the gateway loses an exit-status
// unless Options.ExitStatusLoss says otherwise: Daytona's chain loses it
// for 1 to 7 % of short commands.
const DefaultExitStatusLoss = 0.05

// DefaultWindow is the channel window unless Options.Window says
// otherwise: x/crypto/ssh's, which Daytona's hops use.
const DefaultWindow = 2 << 20

// Request is one request the fake received (API or toolbox).
type Request struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// Stats counts what the fake did.
type Stats struct {
	// TokensIssued and TokensRevoked count SSH access tokens.
	TokensIssued, TokensRevoked int
	// Logins and RefusedLogins count gateway connections by their token.
	Logins, RefusedLogins int
	// Channels counts the channels logins opened, of any type. On Daytona
	// each one, however short, costs two new upstream SSH connections
	// (gateway to runner, runner to daemon) and a last-activity API call.
	Channels int
	// Sessions and Forwards count the session and direct-tcpip channels
	// among them.
	Sessions, Forwards int
	// Execs counts gateway commands (exec, and shell), ToolboxExecs
	// toolbox process/execute calls that ran a command.
	Execs, ToolboxExecs int
	// ExitStatusesLost counts gateway commands that ended without an
	// exit-status (Options.ExitStatusLoss).
	ExitStatusesLost int
	// StderrDropped counts the bytes of stderr the gateway dropped, and
	// Stalls the sessions whose output stopped because their unread
	// stderr filled the channel window (Options.Window).
	StderrDropped, Stalls int
}

// Fake is a running fake Daytona: API, toolbox and SSH gateway.
type Fake struct {
	opts       Options
	logger     *slog.Logger
	id         string // labels this fake's containers
	key        string
	gatewayKey string // the SSH gateway's API key
	org        string
	runnerID   string
	runnerKey  string
	started    time.Time
	backend    backend

	ctx    context.Context // cancelled when the fake stops
	cancel context.CancelFunc
	wg     sync.WaitGroup // background work: transitions, gateway

	httpSrv  *http.Server
	mux      *http.ServeMux
	sshLn    net.Listener
	sshCfg   *ssh.ServerConfig
	hostKey  ssh.PublicKey
	base     string // http://127.0.0.1:PORT
	gateway  string // 127.0.0.1:PORT
	mu       sync.Mutex
	boxes    map[string]*sandbox  // by id
	order    []string             // ids in creation order
	snaps    map[string]*snapshot // made through the API, by id
	tokens   map[string]*token
	requests []Request
	stats    Stats
	failNext []failure
	throttle throttle
	// lastActivity is the latest sandbox activity's time.
	lastActivity time.Time
	conns        map[*ssh.ServerConn]struct{}
	closed       bool
	// misses are the names a lookup found no sandbox of, and when: the
	// lookup cache's misses (Options.LookupCacheTTL).
	misses map[string]time.Time
	// heldAt, when set, is when the list's index stopped taking changes
	// (HoldList).
	heldAt time.Time
	// held, while transitions are held (HoldTransitions), is closed when
	// they are released.
	held chan struct{}
}

type failure struct {
	state  api.State
	reason string
}

type throttle struct {
	n          int
	retryAfter time.Duration
}

// Start starts a fake on loopback: the HTTP API (URL) and the SSH gateway
// (GatewayAddr). When the test ends, it stops both, kills every process
// and removes every container and directory it made.
func Start(t testing.TB, opts Options) *Fake {
	t.Helper()
	if opts.Image == "" {
		opts.Image = image.TestBase
	}
	snaps := map[string]string{DefaultSnapshot: opts.Image}
	for k, v := range opts.Snapshots {
		snaps[k] = v
	}
	opts.Snapshots = snaps
	if opts.StartDelay <= 0 {
		opts.StartDelay = 200 * time.Millisecond
	}
	if opts.User == "" {
		opts.User = "daytona"
	}
	switch {
	case opts.ListLag == 0:
		opts.ListLag = time.Second
	case opts.ListLag < 0:
		opts.ListLag = 0
	}
	switch {
	case opts.LookupCacheTTL == 0:
		opts.LookupCacheTTL = 10 * time.Second
	case opts.LookupCacheTTL < 0:
		opts.LookupCacheTTL = 0
	}
	if opts.StartWait <= 0 {
		opts.StartWait = 30 * time.Second
	}
	if opts.RunnerDomain == "" {
		opts.RunnerDomain = "127.0.0.1"
	}
	if opts.Minute <= 0 {
		opts.Minute = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.ExitStatusLoss == 0 {
		opts.ExitStatusLoss = DefaultExitStatusLoss
	}
	if opts.Window == 0 {
		opts.Window = DefaultWindow
	}
	if len(opts.Command) == 0 {
		opts.Command = []string{"sleep", "infinity"}
	}
	// The daemon's stand-in runs the realistic gateway's commands; an
	// external gateway brings its own daemon, and the ideal gateway needs
	// none.
	daemon := !opts.IdealGateway && opts.ExternalGateway == ""
	f := &Fake{
		opts:       opts,
		logger:     opts.Logger,
		id:         randomHex(8),
		key:        "dtn_" + randomHex(24),
		gatewayKey: "dtn_" + randomHex(24),
		org:        newUUID(),
		runnerID:   newUUID(),
		runnerKey:  randomHex(16),
		started:    time.Now(),
		boxes:      map[string]*sandbox{},
		misses:     map[string]time.Time{},
		tokens:     map[string]*token{},
		conns:      map[*ssh.ServerConn]struct{}{},
	}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	if opts.Docker != nil {
		f.backend = &dockerBackend{cli: opts.Docker, label: f.id, mu: &f.mu, logger: f.logger, cmd: opts.Command, daemon: daemon, daemons: map[string]*containerDaemon{}}
	} else {
		// Made before the cleanup below is registered, so removed after it
		// (cleanups run last first), when every process is dead.
		f.backend = &hostBackend{root: t.TempDir(), groups: map[string]map[int]struct{}{}, logger: f.logger, daemon: daemon, daemons: map[string]*hostDaemon{}}
	}

	if opts.ExternalGateway != "" {
		if _, _, err := net.SplitHostPort(opts.ExternalGateway); err != nil {
			t.Fatalf("daytonatest: Options.ExternalGateway %q is not host:port: %v", opts.ExternalGateway, err)
		}
		f.gateway = opts.ExternalGateway
	} else if err := f.startGateway(); err != nil {
		t.Fatalf("daytonatest: %v", err)
	}
	if err := f.startHTTP(); err != nil {
		if f.sshLn != nil {
			f.sshLn.Close()
		}
		t.Fatalf("daytonatest: %v", err)
	}
	f.startAutoStop()
	t.Cleanup(func() {
		if err := f.close(); err != nil {
			t.Errorf("daytonatest: %v", err)
		}
	})
	return f
}

// close stops the servers, cancels every transition, kills every process
// and removes every container, then waits for the fake's goroutines.
func (f *Fake) close() error {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = map[*ssh.ServerConn]struct{}{}
	f.mu.Unlock()
	f.cancel()
	if f.sshLn != nil {
		f.sshLn.Close()
	}
	for c := range conns {
		c.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = f.httpSrv.Shutdown(ctx)
	err := f.backend.close(ctx)
	f.wg.Wait()
	// Containers made by transitions that ended meanwhile.
	if err2 := f.backend.close(ctx); err == nil {
		err = err2
	}
	return err
}

// URL is the API's base URL: http://127.0.0.1:PORT/api.
func (f *Fake) URL() string { return f.base + "/api" }

// APIKey is the organization's API key: the bearer token of every
// request but the two that only the SSH gateway may make.
func (f *Fake) APIKey() string { return f.key }

// GatewayAPIKey is the SSH gateway's API key, for running Daytona's real
// gateway against the fake (its API_KEY): it alone may validate SSH
// access tokens and find a sandbox's runner, and it may read a sandbox
// and post its activity; anything else answers 403.
func (f *Fake) GatewayAPIKey() string { return f.gatewayKey }

// Organization is the fake's organization id: X-Daytona-Organization-ID,
// when a request sends it, must equal it.
func (f *Fake) Organization() string { return f.org }

// GatewayAddr is the SSH gateway's address, 127.0.0.1:PORT, or
// Options.ExternalGateway.
func (f *Fake) GatewayAddr() string { return f.gateway }

// HostKey is the gateway's (ed25519) host key (nil with an external
// gateway).
func (f *Fake) HostKey() ssh.PublicKey { return f.hostKey }

// KnownHostsLine is a known_hosts line for the gateway's host key, for the
// host "[127.0.0.1]:PORT" ("" with an external gateway).
func (f *Fake) KnownHostsLine() string {
	if f.hostKey == nil {
		return ""
	}
	_, port, _ := net.SplitHostPort(f.gateway)
	return fmt.Sprintf("[127.0.0.1]:%s %s", port, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(f.hostKey))))
}

// FailNext makes the next created sandbox end in state (api.StateError or
// api.StateBuildFailed) with errorReason reason instead of started.
func (f *Fake) FailNext(state api.State, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = append(f.failNext, failure{state: state, reason: reason})
}

// Throttle makes the next n API and toolbox requests get 429 Too Many
// Requests, with Retry-After-<throttler> (whole seconds, rounded up), as
// Daytona's named throttlers send it: sandbox-create for a create,
// sandbox-lifecycle for a start, stop or delete, authenticated for the
// rest.
func (f *Fake) Throttle(n int, retryAfter time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.throttle = throttle{n: n, retryAfter: retryAfter}
}

// ExpireTokens expires every SSH access token issued so far.
func (f *Fake) ExpireTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	for _, tk := range f.tokens {
		if tk.expiresAt.After(now) {
			tk.expiresAt = now
		}
	}
}

// DropConnections closes every open gateway connection from the server
// side.
func (f *Fake) DropConnections() {
	f.mu.Lock()
	conns := f.conns
	f.conns = map[*ssh.ServerConn]struct{}{}
	f.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Requests returns every API and toolbox request received, in order.
func (f *Fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Request, len(f.requests))
	copy(out, f.requests)
	return out
}

// Sandbox returns a sandbox as GET would show it, by id, at once. A
// deleted sandbox is still found, in state destroyed.
func (f *Fake) Sandbox(id string) (api.Sandbox, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.boxes[id]
	if !ok {
		return api.Sandbox{}, false
	}
	return s.view(), true
}

// Sandboxes returns every sandbox GET finds (not destroyed, nor failed
// and being deleted), oldest first, as GET shows them, at once (not as
// the lagging list does).
func (f *Fake) Sandboxes() []api.Sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Sandbox
	for _, id := range f.order {
		if s := f.boxes[id]; s.visible() {
			out = append(out, s.view())
		}
	}
	return out
}

// Stats returns the fake's counters.
func (f *Fake) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Container is the Docker container id of a sandbox ("" on the host
// backend, or before the container exists).
func (f *Fake) Container(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.boxes[id]; ok {
		return s.container
	}
	return ""
}

// Home is the sandbox user's home: /home/daytona in Docker, a host
// directory on the host backend ("" for an unknown sandbox).
func (f *Fake) Home(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.boxes[id]; ok {
		return s.home
	}
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newUUID is a random (version 4) UUID.
func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// newHostKey generates the gateway's ed25519 host key.
func newHostKey() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate the gateway's host key: %w", err)
	}
	return ssh.NewSignerFromKey(priv)
}
