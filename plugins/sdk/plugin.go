package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/experimental"

	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// Handshake is the go-plugin handshake between Amelia and provider plugins.
// The cookie only keeps a plugin binary from being run by hand by mistake; it
// is not a security measure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  APIVersion,
	MagicCookieKey:   "AMELIA_PROVIDER_PLUGIN",
	MagicCookieValue: "3c5d1a2e-amelia-sandbox-provider",
}

// pluginKey is the name the provider is dispensed under.
const pluginKey = "provider"

// shutdownWait is how long a stopping plugin gives running execs to end
// (their processes get SIGTERM at once) before it closes the provider. It is
// under go-plugin's 2 s allowance for a graceful exit.
const shutdownWait = 1500 * time.Millisecond

// hostWatchInterval is how often a plugin checks that its host is alive.
const hostWatchInterval = 250 * time.Millisecond

// grpcPlugin binds a Provider to go-plugin's gRPC transport.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	server *Server
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	RegisterServer(s, p.server)
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &dispensed{client: NewClient(cc), conn: cc}, nil
}

type dispensed struct {
	client *Client
	conn   *grpc.ClientConn
}

// ServeOption configures Serve.
type ServeOption func(*serveConfig)

type serveConfig struct {
	logger        *slog.Logger
	noDataChannel bool
	noSharing     bool
}

// WithLogger sets the logger Serve reports on (default: NewLogger on stderr).
func WithLogger(l *slog.Logger) ServeOption {
	return func(c *serveConfig) { c.logger = l }
}

// WithoutDataChannel has Serve decline the data channel a host offers, as
// a plugin built with an SDK before it did: every exec's bytes then go over
// the gRPC stream, through its TLS. For diagnosis and compatibility tests.
func WithoutDataChannel() ServeOption {
	return func(c *serveConfig) { c.noDataChannel = true }
}

// WithoutSharing has Serve refuse to be a shared plugin (see Share), as a
// plugin built with an SDK before sharing did: every host then starts a
// process of its own. For a provider that keeps state one host must not
// see another's use of, and for compatibility tests.
func WithoutSharing() ServeOption {
	return func(c *serveConfig) { c.noSharing = true }
}

// Serve runs p as a plugin: call it from main and nothing else. It returns
// when the host stops the plugin; if the host dies instead, it stops running
// execs and exits. Either way its socket goes with it.
//
// Started by Share, it is a shared plugin instead: it serves every host of
// this user that connects to its socket, each with a data channel of its
// own, and exits once it has had no host for a while (see Share).
//
// Before anything else it points file descriptor 1 at stderr and keeps the
// real stdout for go-plugin's handshake line alone, so nothing the provider
// or its child processes print can corrupt the handshake; such output ends
// up in the host's log.
func Serve(p Provider, opts ...ServeOption) {
	if handshake, err := guardStdout(); err == nil {
		os.Stdout = handshake
	}
	cfg := serveConfig{}
	for _, o := range opts {
		o(&cfg)
	}
	shared, sharing := sharedServe(cfg.noSharing)
	if os.Getenv("GOMAXPROCS") == "" && !sharing {
		// A plugin relays bytes: its goroutines hand each chunk to one
		// another (a transport's reader, the provider's copy into the
		// host's pipe; a local process's output is spliced), which with
		// more than one P costs futex wakeups and scheduler spinning for
		// every chunk. With one, the hand-off is a switch on the same
		// thread: exec output through the local plugin took 1.1-2.4 CPU
		// seconds per GiB beyond a pipe instead of about 3, at 0.84-1.03x
		// the pipe's speed instead of 0.62-0.75x (make bench, on a loaded
		// 2-core machine). Blocking system calls still run in parallel.
		// A shared plugin keeps every processor: it serves many hosts'
		// execs at once.
		runtime.GOMAXPROCS(1)
	}
	if cfg.logger == nil {
		cfg.logger = NewLogger(os.Stderr, slog.LevelDebug)
	}
	// A host that died leaves stdout and stderr pipes nobody reads: a
	// write to them (the log line below) must fail, not kill the plugin
	// with SIGPIPE before it has stopped its execs. Caught, not ignored:
	// the processes it starts get the default action back.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	srv := NewServer(p)
	if sharing {
		// Each host hands its data channel over the socket (see Share).
		datachan.Decline()
		if err := serveShared(srv, cfg, os.Stdout, shared); err != nil {
			cfg.logger.Error("shared provider plugin", "error", err)
			os.Exit(1)
		}
		return
	}
	// Before go-plugin's handshake, which the host reads as the sign
	// that the plugin has said whether it takes the data channel.
	if cfg.noDataChannel {
		datachan.Decline()
	} else if data, err := datachan.Accept(); err != nil {
		cfg.logger.Warn("the host's data channel cannot be used; exec bytes go over gRPC", "error", err)
		datachan.Decline()
	} else {
		srv.data = data
	}
	removeSocket := privateSocketDir()
	go watchHost(os.Getppid(), func() {
		cfg.logger.Warn("host process is gone; stopping the provider plugin")
		srv.Shutdown(shutdownWait)
		removeSocket()
		os.Exit(0)
	})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{APIVersion: {pluginKey: &grpcPlugin{server: srv}}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, serverTuning()...)...)
		},
	})
	srv.Shutdown(shutdownWait)
	removeSocket()
}

// socketDirPrefix starts the name of the directory a plugin's socket is
// made in (privateSocketDir).
const socketDirPrefix = "amelia-plugin-"

// privateSocketDir has go-plugin make the plugin's socket in a directory
// of its own, unless the host named one, and returns what removes it: a
// plugin that exits without closing its listener (its host died) leaves
// nothing behind in the temporary directory.
func privateSocketDir() func() {
	if os.Getenv(plugin.EnvUnixSocketDir) != "" {
		return func() {}
	}
	dir, err := os.MkdirTemp("", socketDirPrefix)
	if err != nil {
		return func() {}
	}
	os.Setenv(plugin.EnvUnixSocketDir, dir)
	return func() { os.RemoveAll(dir) }
}

// watchHost calls stop once the process that started this one has gone
// (the plugin is then re-parented, so its parent pid changes).
func watchHost(ppid int, stop func()) {
	if ppid <= 1 {
		return
	}
	t := time.NewTicker(hostWatchInterval)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != ppid {
			stop()
			return
		}
	}
}

// gRPC's default window (64 KiB, grown by bandwidth probing) is made for
// networks; on the plugin's local socket fixed large windows stream exec
// output faster where gRPC carries it: for a plugin without the data
// channel (an SDK before it, or not on Linux). Windows bound what a slow
// reader leaves buffered: streamWindow per exec, connWindow for all of a
// plugin's execs. The socket buffers stay gRPC's default size: 512 KiB
// ones made that path ~5% faster, but cost each concurrent run's process
// about 0.4 MB (BenchmarkTwentyRunsOnDocker), and exec bytes go over the
// data channel's pipes, not gRPC.
const (
	streamWindow = 4 << 20
	connWindow   = 16 << 20
	socketBuffer = 32 << 10
)

func serverTuning() []grpc.ServerOption {
	pool := newBufferPool()
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{pool}),
		experimental.BufferPool(pool),
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		grpc.ReadBufferSize(socketBuffer),
		grpc.WriteBufferSize(socketBuffer),
	}
}

func dialTuning() []grpc.DialOption {
	pool := newBufferPool()
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(codec{pool})),
		experimental.WithBufferPool(pool),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithReadBufferSize(socketBuffer),
		grpc.WithWriteBufferSize(socketBuffer),
	}
}

// RegisterServer registers the shim on a gRPC server.
func RegisterServer(s grpc.ServiceRegistrar, srv *Server) {
	pb.RegisterProviderServer(s, srv)
}

// LaunchOptions configure Launch.
type LaunchOptions struct {
	// Name is the plugin's name, used in logs and errors.
	Name string
	// Logger receives the plugin's log records and go-plugin's own.
	Logger *slog.Logger
	// StartTimeout bounds the handshake; zero means 30 s.
	StartTimeout time.Duration
	// NoDataChannel keeps every exec's bytes on the gRPC stream, as a
	// host before the data channel did: for diagnosis and compatibility
	// tests.
	NoDataChannel bool
}

// Plugin is a running provider plugin: a Provider whose calls go over gRPC to
// a subprocess. Close stops it.
type Plugin struct {
	name   string
	client *plugin.Client
	conn   *grpc.ClientConn
	rpc    *Client
	data   *datachan.Host // nil: exec bytes go over gRPC
	log    *hostLogger
	socket string // the plugin's unix socket, if it listens on one
	// shared is the connection to a shared plugin (Share), which client
	// does not manage: nil for a process of the host's own (Launch).
	shared *sharedLink
}

// Launch starts the plugin binary cmd (not yet started) and connects to it
// over go-plugin's gRPC transport with automatic mutual TLS. The plugin is
// managed: plugin.CleanupClients stops it if Close is never called.
//
// Beside it, Launch offers the plugin a data channel for the bytes of its
// execs: one end of a unix socket pair, handed to the process at start
// (cmd.ExtraFiles) and named by AMELIA_PROVIDER_DATA_FD. A plugin that
// takes it (Serve does) moves exec stdin, stdout and stderr there, outside
// TLS and protobuf, at pipe speed; cancel, resize and exit status stay on
// gRPC. A plugin that does not keeps them on gRPC.
//
// The plugin's environment follows os/exec: a nil cmd.Env means the host's
// whole environment; a non-nil one is all the plugin gets, besides the
// handshake variables go-plugin adds (its cookie and PLUGIN_*) and the data
// channel's. go-plugin would otherwise add the host's environment to any
// cmd.Env.
func Launch(cmd *exec.Cmd, opts LaunchOptions) (*Plugin, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	logger := newHostLogger(opts.Logger.With("plugin", opts.Name))
	// The environment is made whole here, so that the data channel's
	// variable is the host's alone to set (and no shared plugin's comes
	// along).
	cmd.Env = pluginEnv(cmd.Env)
	var dataHost, dataChild *os.File
	if !opts.NoDataChannel {
		var err error
		if dataHost, dataChild, err = datachan.Offer(); err != nil {
			logger.Warn("no data channel for the plugin; exec bytes go over gRPC", "error", err)
		} else {
			// go-plugin leaves ExtraFiles as they are: the child's end is
			// fd 3 and up, in order.
			cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", datachan.Env, 3+len(cmd.ExtraFiles)))
			cmd.ExtraFiles = append(cmd.ExtraFiles, dataChild)
		}
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{APIVersion: {pluginKey: &grpcPlugin{}}},
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Managed:          true,
		Logger:           logger,
		StartTimeout:     opts.StartTimeout,
		GRPCDialOptions:  dialTuning(),
		SyncStdout:       &lineLogger{log: logger, level: hclog.Debug},
		SyncStderr:       &lineLogger{log: logger, level: hclog.Debug},
	})
	rpc, err := client.Client()
	if dataChild != nil {
		// The child has its copy (or never started): the plugin must be
		// the channel's only peer.
		_ = dataChild.Close()
		cmd.ExtraFiles = slices.DeleteFunc(cmd.ExtraFiles, func(f *os.File) bool { return f == dataChild })
	}
	if err != nil {
		if dataHost != nil {
			_ = dataHost.Close()
		}
		client.Kill()
		return nil, fmt.Errorf("start provider plugin %q: %w", opts.Name, err)
	}
	var data *datachan.Host
	if dataHost != nil {
		if data, err = datachan.Connect(dataHost); err != nil {
			logger.Warn("the plugin's data channel cannot be used; exec bytes go over gRPC", "error", err)
		}
	}
	raw, err := rpc.Dispense(pluginKey)
	if err != nil {
		if data != nil {
			_ = data.Close()
		}
		client.Kill()
		return nil, fmt.Errorf("connect to provider plugin %q: %w", opts.Name, err)
	}
	d := raw.(*dispensed)
	if data != nil {
		d.client = newClient(d.conn, data)
	}
	pl := &Plugin{name: opts.Name, client: client, conn: d.conn, rpc: d.client, data: data, log: logger}
	if rc := client.ReattachConfig(); rc != nil && rc.Addr != nil && rc.Addr.Network() == "unix" {
		pl.socket = rc.Addr.String()
	}
	return pl, nil
}

// Close stops the plugin process, and removes its socket should it have
// left it (it crashed, or was killed). A shared plugin (Share) is not
// stopped: Close ends this host's connection to it, and with it the execs
// this host still ran there.
func (p *Plugin) Close() {
	if p.shared != nil {
		_ = p.conn.Close()
		if p.data != nil {
			_ = p.data.Close()
		}
		p.shared.end()
		return
	}
	p.client.Kill()
	if p.data != nil {
		_ = p.data.Close()
	}
	if p.socket == "" {
		return
	}
	os.Remove(p.socket)
	// The directory Serve made for it, once empty.
	if dir := filepath.Dir(p.socket); strings.HasPrefix(filepath.Base(dir), socketDirPrefix) {
		os.Remove(dir)
	}
}

// DataChannel reports whether the plugin took the data channel: whether
// its execs' bytes go beside gRPC rather than over it.
func (p *Plugin) DataChannel() bool { return p.data.Usable() }

// Pid is the plugin process's id (0 when it is not running): what a
// benchmark meters the CPU time of, or a diagnostic names.
func (p *Plugin) Pid() int {
	if p.shared != nil {
		return p.shared.pid
	}
	if rc := p.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Exited reports whether the plugin process has ended (crashed, or was
// killed); for a shared plugin, whether this host's connection to it is
// lost, which is for good (a host does not reconnect: Share again).
func (p *Plugin) Exited() bool {
	if p.shared != nil {
		return p.shared.lost()
	}
	return p.client.Exited()
}

// Shared reports whether the plugin is a shared one (Share) rather than a
// process of this host's own (Launch).
func (p *Plugin) Shared() bool { return p.shared != nil }

var (
	_ Provider          = (*Plugin)(nil)
	_ Lister            = (*Plugin)(nil)
	_ Forwarder         = (*Plugin)(nil)
	_ SettingsValidator = (*Plugin)(nil)
	_ Preflighter       = (*Plugin)(nil)
)

func (p *Plugin) Info(ctx context.Context) (Info, error) {
	info, err := p.rpc.Info(ctx)
	return info, p.explain(ctx, err)
}

func (p *Plugin) EnsureRunning(ctx context.Context, spec Spec) (Sandbox, error) {
	sb, err := p.rpc.EnsureRunning(ctx, spec)
	return sb, p.explain(ctx, err)
}

func (p *Plugin) Exec(ctx context.Context, req ExecRequest, eio ExecIO) (ExitStatus, error) {
	st, err := p.rpc.Exec(ctx, req, eio)
	return st, p.explain(ctx, err)
}

func (p *Plugin) Teardown(ctx context.Context, ref SandboxRef) error {
	return p.explain(ctx, p.rpc.Teardown(ctx, ref))
}

func (p *Plugin) HealthCheck(ctx context.Context, ref SandboxRef) (Health, error) {
	h, err := p.rpc.HealthCheck(ctx, ref)
	return h, p.explain(ctx, err)
}

// List lists the plugin's sandboxes; a plugin that cannot list gives
// ErrUnsupported.
func (p *Plugin) List(ctx context.Context, req ListRequest) ([]Listed, error) {
	l, err := p.rpc.List(ctx, req)
	return l, p.explain(ctx, err)
}

// ValidateSettings has the plugin check a settings block; a plugin that
// cannot gives ErrUnsupported.
func (p *Plugin) ValidateSettings(ctx context.Context, req ValidateRequest) ([]Problem, error) {
	problems, err := p.rpc.ValidateSettings(ctx, req)
	return problems, p.explain(ctx, err)
}

// Preflight asks the plugin why EnsureRunning(spec) would fail; a plugin
// that cannot tell gives ErrUnsupported.
func (p *Plugin) Preflight(ctx context.Context, spec Spec) error {
	return p.explain(ctx, p.rpc.Preflight(ctx, spec))
}

// Forward runs the provider's Forwarder; a provider without one gives
// ErrUnsupported.
func (p *Plugin) Forward(ctx context.Context, req ForwardRequest, listening func(addr string)) error {
	return p.explain(ctx, p.rpc.Forward(ctx, req, listening))
}

// Bounds for explain: how long a failed call waits to see whether the
// connection is going down, and then for the process to be reaped (which is
// when all of its stderr has been read).
const (
	connLossWait = 500 * time.Millisecond
	exitWait     = 2 * time.Second
)

// explain turns "the connection broke" into "the plugin crashed, and why",
// using the plugin's last error lines (its panic message, typically). Only
// ErrUnavailable can mean a lost plugin; it costs up to connLossWait when a
// live provider returns it itself.
func (p *Plugin) explain(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(err, ErrUnavailable) {
		return err
	}
	wait, cancel := context.WithTimeout(context.Background(), connLossWait)
	defer cancel()
	for p.conn.GetState() == connectivity.Ready && !p.Exited() {
		if !p.conn.WaitForStateChange(wait, connectivity.Ready) {
			return err // still connected: the provider itself said "unavailable"
		}
	}
	if p.shared != nil {
		return p.shared.explain(p.name)
	}
	deadline := time.Now().Add(exitWait)
	for !p.client.Exited() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // go-plugin offers no exit notification
	}
	msg := fmt.Sprintf("provider plugin %q stopped unexpectedly", p.name)
	if reason := p.log.tail.reason(); reason != "" {
		msg += ": " + reason
	}
	return &kindError{msg: msg, kind: ErrUnavailable}
}
