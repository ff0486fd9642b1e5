// Command amelia-providers is amelia with its built-in providers linked
// in. amelia starts it to serve one (`amelia-providers plugin serve NAME`)
// and hands it the commands that drive the docker provider in its own
// process (`image build`, `init`); the amelia that runs, lists and stops
// sandboxes links no provider, which keeps each concurrent run's process
// small. It lives beside amelia.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin/linked"
	"github.com/amelia-sandbox/amelia/cmd/amelia/cli"
)

func main() {
	tuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, linked.Providers())
	stop()
	os.Exit(code)
}
