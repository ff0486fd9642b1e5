package sdk

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// shutdownWait is how long a stopping plugin gives running execs to end
// (their processes get SIGTERM at once) before it closes the provider. It is
// under go-plugin's 2 s allowance for a graceful exit.
const shutdownWait = 1500 * time.Millisecond

// hostWatchInterval is how often a plugin checks that its host is alive.
const hostWatchInterval = 250 * time.Millisecond

// grpcPlugin binds a Provider to go-plugin's gRPC transport, on the
// plugin's side.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	server *server
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterProviderServer(s, p.server)
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("a provider plugin is no host")
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
	srv := newServer(p)
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
		HandshakeConfig:  providerwire.Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{APIVersion: {providerwire.PluginKey: &grpcPlugin{server: srv}}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, providerwire.ServerOptions()...)...)
		},
	})
	srv.Shutdown(shutdownWait)
	removeSocket()
}

// privateSocketDir has go-plugin make the plugin's socket in a directory
// of its own, unless the host named one, and returns what removes it: a
// plugin that exits without closing its listener (its host died) leaves
// nothing behind in the temporary directory.
func privateSocketDir() func() {
	if os.Getenv(plugin.EnvUnixSocketDir) != "" {
		return func() {}
	}
	dir, err := os.MkdirTemp("", providerwire.SocketDirPrefix)
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

// ServeListener serves p on lis in this process, as Serve does for a
// host, but with neither go-plugin, its TLS, nor the data channel: for a
// test that serves a Provider value rather than a plugin binary (sdktest
// does, given Config.Provider). A plugin's main calls Serve instead. stop
// ends every exec (each with its grace period, for up to a second), stops
// serving, and closes p if it is an io.Closer.
func ServeListener(p Provider, lis net.Listener) (stop func()) {
	return serveListener(newServer(p), lis)
}

func serveListener(srv *server, lis net.Listener) (stop func()) {
	gs := grpc.NewServer(providerwire.ServerOptions()...)
	pb.RegisterProviderServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	return func() {
		gs.Stop()
		srv.Shutdown(time.Second)
	}
}
