// Package agentbin builds and caches the real third-party programs the
// CLI-agent tests run in sandboxes: the opencode coding agent and the MCP
// "everything" server of the MCP Go SDK. Neither can be pulled from a
// registry here, so both are built from their Go modules, static, for
// linux on the host's architecture, into a cache outside the clone, one
// directory per version (package gobuildcache): about 15 minutes on 2
// cores the first time, seconds after. make agent-binaries fills it;
// tests get the paths from package agentbintest.
package agentbin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"github.com/amelia-sandbox/amelia/internal/gobuildcache"
)

// The versions built. opencode (MIT) is the last release of
// github.com/opencode-ai/opencode; the everything server is the example
// server of the MCP Go SDK (MIT), which exercises every MCP feature.
const (
	OpencodeVersion = "v0.0.55"
	MCPSDKVersion   = "v1.8.0"

	opencodePackage   = "github.com/opencode-ai/opencode"
	everythingPackage = "github.com/modelcontextprotocol/go-sdk/examples/server/everything"
)

// CacheEnv names the directory the built programs are cached in.
const CacheEnv = "AMELIA_AGENT_CACHE"

// CacheDir is where built programs are cached: $AMELIA_AGENT_CACHE, else
// amelia/agents under the user's cache directory ($XDG_CACHE_HOME or
// ~/.cache).
func CacheDir() (string, error) {
	if d := os.Getenv(CacheEnv); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the cache directory for the CLI-agent tests' programs (set %s): %w", CacheEnv, err)
	}
	return filepath.Join(d, "amelia", "agents"), nil
}

// Binaries are the absolute paths of a cached build.
type Binaries struct {
	// Opencode is the opencode binary (OpencodeVersion). It wants rg and
	// fzf on its PATH.
	Opencode string
	// MCPEverything is the MCP everything server (MCPSDKVersion): MCP over
	// stdio, or streamable HTTP at ADDR with -http ADDR.
	MCPEverything string
}

// entry is one cached program: its cache directory, named for its
// version, and the binary in it.
type entry struct {
	dir, bin string
}

func entries(root string) (opencode, everything entry) {
	opencode.dir = filepath.Join(root, "opencode-"+OpencodeVersion)
	opencode.bin = filepath.Join(opencode.dir, "bin", "opencode")
	everything.dir = filepath.Join(root, "mcp-go-sdk-"+MCPSDKVersion)
	everything.bin = filepath.Join(everything.dir, "bin", "mcp-everything")
	return opencode, everything
}

// Cached returns the programs cached under root, or an error saying how to
// build them when they are not all there.
func Cached(root string) (Binaries, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return Binaries{}, fmt.Errorf("find the CLI-agent tests' programs: %w", err)
	}
	oc, ev := entries(root)
	for _, e := range []entry{oc, ev} {
		if _, err := os.Stat(e.bin); err != nil {
			return Binaries{}, fmt.Errorf("the CLI-agent tests' programs are not built in %s (%s missing): run make agent-binaries (about 15 minutes the first time)", root, filepath.Base(e.dir))
		}
	}
	return Binaries{Opencode: oc.bin, MCPEverything: ev.bin}, nil
}

// Build fills the cache under root with what Cached needs, building only
// what is missing; what is cached already takes no time. Concurrent
// callers build once, and a build cut short leaves nothing that counts as
// built (package gobuildcache).
func Build(ctx context.Context, root string, log *slog.Logger) (Binaries, error) {
	if b, err := Cached(root); err == nil {
		return b, nil
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return Binaries{}, fmt.Errorf("build the CLI-agent tests' programs: %w", err)
	}
	oc, ev := entries(root)
	// opencode takes its version from -ldflags when it is not the main
	// module, as here.
	ocFlags := "-s -w -X " + opencodePackage + "/internal/version.Version=" + OpencodeVersion
	if err := gobuildcache.Fill(ctx, root, log, []gobuildcache.Entry{
		{Dir: oc.dir, What: "opencode " + OpencodeVersion, Build: func(ctx context.Context, tmp string) error {
			return buildPackage(ctx, tmp, opencodePackage, OpencodeVersion, ocFlags, oc.bin)
		}},
		{Dir: ev.dir, What: "the MCP everything server of go-sdk " + MCPSDKVersion, Build: func(ctx context.Context, tmp string) error {
			return buildPackage(ctx, tmp, everythingPackage, MCPSDKVersion, "-s -w", ev.bin)
		}},
	}); err != nil {
		return Binaries{}, err
	}
	return Cached(root)
}

// buildPackage builds the main package pkg at version, static, for linux
// on the host's architecture, into tmp/bin under the name final has. It
// builds in a scratch module in tmp/src that requires only pkg's module
// (go install pkg@version would do the same, but it asks the module proxy
// for the version list, which the proxy may refuse).
func buildPackage(ctx context.Context, tmp, pkg, version, ldflags, final string) error {
	src := filepath.Join(tmp, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	env := []string{"GOWORK=off", "GOFLAGS=-mod=mod -buildvcs=false", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + runtime.GOARCH}
	if _, err := gobuildcache.Go(ctx, src, env, "mod", "init", "agentbin.build"); err != nil {
		return err
	}
	if _, err := gobuildcache.Go(ctx, src, env, "get", pkg+"@"+version); err != nil {
		return err
	}
	// -trimpath keeps the temporary directory out of the build cache's
	// keys, so a rebuild reuses the compiled packages.
	_, err := gobuildcache.Go(ctx, src, env, "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(tmp, "bin", filepath.Base(final)), pkg)
	return err
}
