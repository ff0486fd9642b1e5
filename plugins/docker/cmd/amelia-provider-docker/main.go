// Command amelia-provider-docker is the Docker provider as a plugin binary
// of its own; amelia-providers serves the same provider (`plugin serve
// docker`), so this is only needed to ship it separately.
package main

import (
	"log/slog"
	"os"

	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	self, _ := os.Executable()
	logger := sdk.NewLogger(os.Stderr, slog.LevelDebug)
	sdk.Serve(docker.New(docker.Options{
		Version:    version,
		WorkerDirs: workerbin.Dirs(os.Getenv("AMELIA_WORKER_DIR"), self),
		Logger:     logger,
	}), sdk.WithLogger(logger))
}
