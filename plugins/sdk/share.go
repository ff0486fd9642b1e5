package sdk

import (
	"os"
	"time"

	"github.com/amelia-sandbox/amelia/internal/providerwire"
)

// Shared plugins: a host may start a plugin to be shared by every host of
// its user with the same plugin and scope (see internal/pluginclient's
// Share). Serve then serves on the socket the host named, each host with a
// data channel of its own, and exits once it has had no host for its idle
// time. A provider need do nothing for it; WithoutSharing opts out.

// sharedConfig is what a plugin Share started is told.
type sharedConfig struct {
	sock string
	idle time.Duration
}

// sharedServe reports whether this process was started as a shared
// plugin, and with what, removing the variables that say so; with
// noSharing it is never one (the host then sees go-plugin's handshake).
func sharedServe(noSharing bool) (sharedConfig, bool) {
	sock, ok := os.LookupEnv(providerwire.SharedEnv)
	idle := os.Getenv(providerwire.SharedIdleEnv)
	os.Unsetenv(providerwire.SharedEnv)
	os.Unsetenv(providerwire.SharedIdleEnv)
	if !ok || noSharing {
		return sharedConfig{}, false
	}
	cfg := sharedConfig{sock: sock, idle: providerwire.DefaultIdle}
	if d, err := time.ParseDuration(idle); err == nil && d >= 0 {
		cfg.idle = d
	}
	return cfg, true
}
