package pluginclient

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
)

// Shared plugins. Launch starts a plugin process for one host; Share
// connects a host to a plugin process that every host of this user with
// the same plugin (binary, arguments, environment) and scope (the
// provider's settings and the profile, say) shares, and starts it when
// there is none. The plugin stays a process of its own speaking the same
// gRPC API; what changes is who starts it and how a host reaches it:
//
//   - It listens on a unix socket in a directory of the user's alone
//     (mode 0700, ShareOptions.Dir), named by a digest of what it was
//     started with, and checks each peer's uid (SO_PEERCRED): a process
//     of another user is refused even if it could reach the socket. On
//     such a socket the gRPC connection has no TLS: the kernel vouches
//     for the peer, as it does for the socket pair a per-host plugin's
//     data channel is.
//   - Each host that connects hands it, over that socket (SCM_RIGHTS),
//     one end of a socket pair of its own: that host's data channel,
//     private to the two of them, as Launch's is.
//   - Creating it is race-free: hosts hold a lock file (flock) while they
//     look for it and start it, so two hosts starting at once make one.
//   - It outlives the host that started it (it is in a session of its
//     own), logs to a file beside its socket, and exits once it has had
//     no host for its idle time, having closed its provider. It holds no
//     user work: a host that comes later starts another. A host never
//     stops it (there is no Shutdown to call on it), and a host that dies
//     loses only its own execs, which end with its connection.
//   - A server that died leaves a socket nobody answers on: the next
//     host to find it starts a new one there.
//
// A plugin built with an SDK before sharing (or one served with
// sdk.WithoutSharing) answers Share's start as a go-plugin plugin would: Share
// stops it, remembers that this binary does not share, and returns an error
// matching ErrNotShareable; the host then Launches it, once per host, as
// before.

// DefaultIdle is how long a shared plugin outlives its last host, unless
// ShareOptions.Idle says otherwise: a host that comes back within it (the
// next run) finds the plugin there.
const DefaultIdle = providerwire.DefaultIdle

// ErrNotShareable matches Share's error for a plugin that cannot be shared
// (its SDK predates sharing, or it was served sdk.WithoutSharing), or a system
// where plugins are not shared: Launch it instead.
var ErrNotShareable = errors.New("the provider plugin cannot be shared")

// ShareOptions configure Share.
type ShareOptions struct {
	// Name, Logger, StartTimeout and NoDataChannel are as for Launch;
	// StartTimeout also bounds connecting to a running plugin.
	LaunchOptions
	// Dir holds the shared plugins' sockets, lock files and logs. It must
	// be this user's alone: Share makes it (mode 0700) if it is absent,
	// and refuses it if it is not a directory owned by this user with
	// mode 0700. Its paths must be short enough for a socket's
	// (ShareDir).
	Dir string
	// Scope is what, beside the command (its executable file, arguments
	// and environment), tells shared plugins apart: hosts whose Scope
	// differs never share a process. The plugin host puts the profile
	// and the provider's settings there.
	Scope string
	// Idle is how long a plugin this Share starts outlives its last host;
	// zero means DefaultIdle. (A running plugin keeps its own.)
	Idle time.Duration
}

// ShareDir is the directory of a user's shared plugins: amelia in
// runtimeDir ($XDG_RUNTIME_DIR, the user's own), or amelia-UID in tempDir
// when runtimeDir is "" or not absolute.
func ShareDir(runtimeDir, tempDir string, uid int) string {
	if filepath.IsAbs(runtimeDir) {
		return filepath.Join(runtimeDir, "amelia")
	}
	return filepath.Join(tempDir, fmt.Sprintf("amelia-%d", uid))
}

// pluginEnv is env (nil: the host's) without the variables that the host
// sets for a plugin: the data channel's and a shared plugin's.
func pluginEnv(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == datachan.Env || name == providerwire.SharedEnv || name == providerwire.SharedIdleEnv
	})
}
