// Package pluginclient is the host's end of a provider plugin: Launch
// starts a plugin process for this host, Share connects to (or starts) one
// that every host of this user shares, and either is a Plugin, an
// sdk.Provider whose calls go over go-plugin's gRPC to the process.
// NewClient is the gRPC client itself, for a provider served some other
// way (sdk.ServeListener).
//
// It is internal to Amelia: the host (core/pluginhost) and the
// conformance kit (plugins/sdk/sdktest) use it; a provider never does.
package pluginclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// grpcPlugin binds go-plugin's gRPC transport to a Client, on the host's
// side.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

func (p *grpcPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("the host serves no provider")
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return &dispensed{client: NewClient(cc), conn: cc}, nil
}

type dispensed struct {
	client *Client
	conn   *grpc.ClientConn
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
		HandshakeConfig:  providerwire.Handshake,
		VersionedPlugins: map[int]plugin.PluginSet{providerwire.Version: {providerwire.PluginKey: &grpcPlugin{}}},
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Managed:          true,
		Logger:           logger,
		StartTimeout:     opts.StartTimeout,
		GRPCDialOptions:  providerwire.DialOptions(),
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
	raw, err := rpc.Dispense(providerwire.PluginKey)
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
	if dir := filepath.Dir(p.socket); strings.HasPrefix(filepath.Base(dir), providerwire.SocketDirPrefix) {
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
	_ sdk.Provider          = (*Plugin)(nil)
	_ sdk.Lister            = (*Plugin)(nil)
	_ sdk.Forwarder         = (*Plugin)(nil)
	_ sdk.SettingsValidator = (*Plugin)(nil)
	_ sdk.Preflighter       = (*Plugin)(nil)
	_ sdk.Preparer          = (*Plugin)(nil)
	_ sdk.SetupPruner       = (*Plugin)(nil)
	_ sdk.Archiver          = (*Plugin)(nil)
)

func (p *Plugin) Info(ctx context.Context) (sdk.Info, error) {
	info, err := p.rpc.Info(ctx)
	return info, p.explain(ctx, err)
}

func (p *Plugin) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	sb, err := p.rpc.EnsureRunning(ctx, spec)
	return sb, p.explain(ctx, err)
}

func (p *Plugin) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	st, err := p.rpc.Exec(ctx, req, eio)
	return st, p.explain(ctx, err)
}

func (p *Plugin) Teardown(ctx context.Context, ref sdk.SandboxRef) error {
	return p.explain(ctx, p.rpc.Teardown(ctx, ref))
}

func (p *Plugin) HealthCheck(ctx context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	h, err := p.rpc.HealthCheck(ctx, ref)
	return h, p.explain(ctx, err)
}

// List lists the plugin's sandboxes; a plugin that cannot list gives
// ErrUnsupported.
func (p *Plugin) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	l, err := p.rpc.List(ctx, req)
	return l, p.explain(ctx, err)
}

// ValidateSettings has the plugin check a settings block; a plugin that
// cannot gives ErrUnsupported.
func (p *Plugin) ValidateSettings(ctx context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	problems, err := p.rpc.ValidateSettings(ctx, req)
	return problems, p.explain(ctx, err)
}

// Preflight asks the plugin why EnsureRunning(spec) would fail; a plugin
// that cannot tell gives ErrUnsupported.
func (p *Plugin) Preflight(ctx context.Context, spec sdk.Spec) error {
	return p.explain(ctx, p.rpc.Preflight(ctx, spec))
}

// Prepare has the plugin prepare spec's setup; a plugin that cannot keep
// one gives ErrUnsupported.
// PutArchive runs the provider's Archiver; a provider without one gives
// ErrUnsupported.
func (p *Plugin) PutArchive(ctx context.Context, ref sdk.SandboxRef, dir string, r io.Reader) error {
	return p.explain(ctx, p.rpc.PutArchive(ctx, ref, dir, r))
}

// GetArchive runs the provider's Archiver; a provider without one gives
// ErrUnsupported.
func (p *Plugin) GetArchive(ctx context.Context, ref sdk.SandboxRef, path string, w io.Writer) error {
	return p.explain(ctx, p.rpc.GetArchive(ctx, ref, path, w))
}

func (p *Plugin) Prepare(ctx context.Context, spec sdk.Spec) (sdk.Prepared, error) {
	res, err := p.rpc.Prepare(ctx, spec)
	return res, p.explain(ctx, err)
}

// PruneSetups has the plugin prune the setups it kept; a plugin that
// keeps none gives ErrUnsupported.
func (p *Plugin) PruneSetups(ctx context.Context, req sdk.PruneRequest) ([]sdk.PrunedSetup, error) {
	res, err := p.rpc.PruneSetups(ctx, req)
	return res, p.explain(ctx, err)
}

// Forward runs the provider's Forwarder; a provider without one gives
// ErrUnsupported.
func (p *Plugin) Forward(ctx context.Context, req sdk.ForwardRequest, listening func(addr string)) error {
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
	if err == nil || ctx.Err() != nil || !errors.Is(err, sdk.ErrUnavailable) {
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
	return sdk.Errorf(sdk.ErrUnavailable, "%s", msg)
}
