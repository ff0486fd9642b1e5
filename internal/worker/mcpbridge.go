package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/mcpwire"
)

// mcpDialTimeout bounds opening a session with the proxy.
const mcpDialTimeout = 30 * time.Second

// mcpCmd is `amelia-worker mcp NAME`: a stdio MCP server, as an agent
// starts one, that is the profile's MCP server NAME on the host. It opens
// a session on the proxy's /mcp/NAME (package mcpwire) with
// AMELIA_PROXY_URL and AMELIA_PROXY_TOKEN, and splices its stdin and
// stdout to it: the agent's lines go to the server, the server's come
// back. Its stdout carries only the server's lines; it ends when its
// stdin ends (the agent is done: the session, and the host's server, end
// with it) or the proxy closes the session (the server ended, or the run).
func (w *worker) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp NAME",
		Short: "A stdio MCP server that is the profile's MCP server NAME on the host, through the proxy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := w.mcpBridge(cmd.Context(), args[0]); err != nil {
				fmt.Fprintf(w.p.Stderr, "amelia-worker mcp %s: %v\n", args[0], err)
				return exitCode(exitFailed)
			}
			return nil
		},
	}
}

func (w *worker) mcpBridge(ctx context.Context, name string) error {
	proxyURL, token := w.p.Getenv(EnvProxyURL), w.p.Getenv(EnvProxyToken)
	switch {
	case proxyURL == "":
		return fmt.Errorf("%s is not set: run it where amelia starts the agent, whose environment has the proxy's URL", EnvProxyURL)
	case token == "":
		return fmt.Errorf("%s is not set: run it where amelia starts the agent, whose environment has the run's token", EnvProxyToken)
	}
	dctx, cancel := context.WithTimeout(ctx, mcpDialTimeout)
	conn, err := mcpwire.Dial(dctx, proxyURL, token, name)
	cancel()
	var refused *mcpwire.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Status == 401:
		return fmt.Errorf("the proxy refused the run's token (%s): %s", EnvProxyToken, refused.Message)
	case errors.As(err, &refused):
		return fmt.Errorf("the proxy refused: %s", refused.Message)
	case err != nil:
		return fmt.Errorf("open a session with the proxy at %s: %w", EnvProxyURL, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	go func() {
		// The agent's lines to the server; its stdin's end ends the
		// session (the proxy ends the server, then closes the stream).
		if _, err := io.Copy(conn, w.p.Stdin); err != nil {
			conn.Close()
			return
		}
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			conn.Close()
		}
	}()
	// The server's lines to the agent, until the proxy closes the stream.
	_, err = io.Copy(w.p.Stdout, conn)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil && !errors.Is(err, net.ErrClosed):
		return fmt.Errorf("the session with the proxy broke: %w", err)
	}
	return nil
}
