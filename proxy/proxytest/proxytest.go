// Package proxytest starts the real proxy on loopback with one run, for
// the tests of what reaches the host through it (the worker's relay, its
// MCP bridge and tools, CLI agents), and reads the run's audit log.
package proxytest

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/proxy"
)

// Start serves a proxy on a loopback port with one run of cfg, whose ID,
// profile ("dev"), audit directory and network policy (open) are filled
// in where cfg leaves them empty. The proxy has the test's environment
// (for the run's MCP command servers). It returns the proxy's root URL,
// as the sandbox's AMELIA_PROXY_URL leads there, and the run; both are
// closed when the test ends.
func Start(tb testing.TB, cfg proxy.RunConfig) (string, *proxy.Run) {
	tb.Helper()
	if cfg.ID == "" {
		cfg.ID = "run-1"
	}
	if cfg.Profile == "" {
		cfg.Profile = "dev"
	}
	if cfg.AuditDir == "" {
		cfg.AuditDir = tb.TempDir()
	}
	if cfg.Network == "" {
		cfg.Network = sdk.NetworkOpen
	}
	srv := proxy.New(proxy.Options{Environ: os.Environ()})
	addr, err := srv.ListenAndServe("")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	run, err := srv.Start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { run.Close() })
	return "http://" + addr, run
}

// Records ends run, so that every request's record is written, and
// returns its audit log's records whose route is one of routes (all of
// them when none is given).
func Records(tb testing.TB, run *proxy.Run, routes ...string) []proxy.Record {
	tb.Helper()
	if err := run.Close(); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Open(run.AuditPath())
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var recs []proxy.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec proxy.Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			tb.Fatalf("audit line %q: %v", sc.Bytes(), err)
		}
		if len(routes) == 0 || slices.Contains(routes, rec.Route) {
			recs = append(recs, rec)
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return recs
}
