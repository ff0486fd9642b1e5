// Command amelia-provider-ssh is the SSH provider as a plugin binary of its
// own; amelia-providers serves the same provider (`plugin serve ssh`),
// so this is only needed to ship it separately.
package main

import (
	"log/slog"
	"os"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/ssh"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	logger := sdk.NewLogger(os.Stderr, slog.LevelDebug)
	sdk.Serve(ssh.New(ssh.Options{Version: version, Logger: logger}), sdk.WithLogger(logger))
}
