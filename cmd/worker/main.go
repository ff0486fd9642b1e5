// Command amelia-worker runs inside every sandbox: the agent, the sandbox end
// of the tunnel and git's credential helper. See internal/worker.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/amelia-sandbox/amelia/internal/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := worker.Run(ctx, os.Args[1:], worker.Process{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv,
	})
	stop()
	os.Exit(code)
}
