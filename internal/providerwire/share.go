package providerwire

import (
	"fmt"
	"strings"
	"time"
)

// Shared plugins (see pluginclient.Share): what the host that starts one
// and the plugin agree on.

// Environment variables of a shared plugin, which Serve removes from its
// own environment before the provider runs.
const (
	// SharedEnv is the socket a shared plugin serves on.
	SharedEnv = "AMELIA_PROVIDER_SHARED"
	// SharedIdleEnv is how long it outlives its last host (a Go
	// duration).
	SharedIdleEnv = "AMELIA_PROVIDER_SHARED_IDLE"
)

// DefaultIdle is how long a shared plugin outlives its last host, unless
// the host that started it said otherwise: a host that comes back within
// it (the next run) finds the plugin there.
const DefaultIdle = 2 * time.Minute

// SocketSuffix ends the name of a shared plugin's socket; its lock file,
// log and unshared mark are named as it is, with their own suffixes.
const SocketSuffix = ".sock"

const (
	lockSuffix     = ".lock"
	logSuffix      = ".log"
	unsharedSuffix = ".unshared"
)

// SharedFiles are the files of one shared plugin, in the directory of a
// user's shared plugins.
type SharedFiles struct {
	// Sock is its socket, Lock the file hosts and the plugin flock while
	// they start, find or stop it, Log its log, and Unshared the mark a
	// host leaves when the binary answered as a plugin that does not
	// share.
	Sock, Lock, Log, Unshared string
}

// FilesOf are the files of the shared plugin whose socket is sock.
func FilesOf(sock string) SharedFiles {
	base := strings.TrimSuffix(sock, SocketSuffix)
	return SharedFiles{Sock: sock, Lock: base + lockSuffix, Log: base + logSuffix, Unshared: base + unsharedSuffix}
}

// Lines of the shared plugin's protocol. The plugin writes ReadyLine on
// stdout once it listens; a host begins each connection with HelloLine
// (and its data channel's end) and the plugin, having taken them, answers
// AckLine; then the connection is gRPC's.
var (
	ReadyLine = fmt.Sprintf("amelia-provider-shared %d\n", Version)
	HelloLine = fmt.Sprintf("amelia-provider-host %d\n", Version)
)

// AckLine is the plugin's answer to a host's HelloLine.
const AckLine = "amelia-provider-shared ok\n"
