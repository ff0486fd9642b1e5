// Command agent-binaries builds the programs the CLI-agent tests run
// (package agentbin) into the cache, $AMELIA_AGENT_CACHE or
// ~/.cache/amelia/agents, and prints their paths; make agent-binaries runs
// it. What is cached already takes no time.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/amelia-sandbox/amelia/internal/agentbin"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, log); err != nil {
		fmt.Fprintln(os.Stderr, "agent-binaries:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	if len(os.Args) > 1 {
		return fmt.Errorf("takes no arguments (got %q): it builds opencode %s and the MCP everything server of go-sdk %s into $%s, else ~/.cache/amelia/agents",
			os.Args[1:], agentbin.OpencodeVersion, agentbin.MCPSDKVersion, agentbin.CacheEnv)
	}
	root, err := agentbin.CacheDir()
	if err != nil {
		return err
	}
	start := time.Now()
	b, err := agentbin.Build(ctx, root, log)
	if err != nil {
		return err
	}
	fmt.Printf("CLI-agent test programs ready in %s (%s):\n  %s\n  %s\n", root, time.Since(start).Round(time.Second), b.Opencode, b.MCPEverything)
	return nil
}
