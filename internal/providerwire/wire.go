// Package providerwire is what both ends of a provider plugin's connection
// agree on beyond the generated code (providerv1): go-plugin's handshake,
// the gRPC tuning and codec, the stdin credit, and the files and lines of a
// shared plugin. The SDK's Serve (plugins/sdk) is one end, the host's
// client (internal/pluginclient) the other.
//
// It imports nothing of Amelia's outside itself, so that package sdk,
// whose types it cannot name, may import it.
package providerwire

import (
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/experimental"
)

// Version is the version of the provider contract (amelia.provider.v1),
// which is also the go-plugin protocol version; sdk.APIVersion is the
// same number.
const Version = 1

// Handshake is the go-plugin handshake between Amelia and provider
// plugins. The cookie only keeps a plugin binary from being run by hand by
// mistake; it is not a security measure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  Version,
	MagicCookieKey:   "AMELIA_PROVIDER_PLUGIN",
	MagicCookieValue: "3c5d1a2e-amelia-sandbox-provider",
}

// PluginKey is the name the provider is dispensed under.
const PluginKey = "provider"

// StdinWindow is the most stdin a host keeps unacknowledged on an Exec
// stream (see the Exec RPC in provider.proto).
const StdinWindow = 1 << 20

// SocketDirPrefix starts the name of the directory a plugin makes for its
// go-plugin socket, which the host removes should the plugin not.
const SocketDirPrefix = "amelia-plugin-"

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

// ServerOptions tune a plugin's gRPC server: the pooled codec, fixed
// windows, small socket buffers.
func ServerOptions() []grpc.ServerOption {
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

// DialOptions tune the host's connection to a plugin as ServerOptions do
// the plugin's end.
func DialOptions() []grpc.DialOption {
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
