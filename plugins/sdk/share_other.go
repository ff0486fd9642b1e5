//go:build !linux

package sdk

import (
	"errors"
	"os"
)

// serveShared is never reached: plugins are shared on Linux only (a
// peer's uid comes from SO_PEERCRED), so no host starts one here.
func serveShared(*server, serveConfig, *os.File, sharedConfig) error {
	return errors.New("provider plugins are not shared on this system")
}
