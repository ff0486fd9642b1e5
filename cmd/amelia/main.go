// Command amelia runs coding agents in isolated sandboxes. The program is
// cmd/amelia/cli; main hands it the process and the table of the providers
// that come with it (cmd/amelia/builtin: their names, none linked: the
// built-in providers are served by cmd/amelia-providers).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin"
	"github.com/amelia-sandbox/amelia/cmd/amelia/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr, builtin.Providers())
	stop()
	os.Exit(code)
}
