package mcptools_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/agentbin/agentbintest"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
	"github.com/amelia-sandbox/amelia/internal/worker/mcptools"
	"github.com/amelia-sandbox/amelia/internal/worker/tools"
	"github.com/amelia-sandbox/amelia/proxy"
	"github.com/amelia-sandbox/amelia/proxy/proxytest"
)

// markEnv marks the processes of a test's MCP servers, to find them
// (sharedtest.Processes) and see them gone.
const markEnv = "AMELIA_MCPTOOLS_TEST_MARK"

// host is a proxy on loopback with one run whose profile "dev" lists the
// everything server, whose processes have mark in their environment.
type host struct {
	url  string
	run  *proxy.Run
	mark string
}

func newHost(t *testing.T) *host {
	t.Helper()
	bins := agentbintest.Binaries(t)
	b := make([]byte, 8)
	rand.Read(b)
	h := &host{mark: "mcptools-test-" + hex.EncodeToString(b)}
	h.url, h.run = proxytest.Start(t, proxy.RunConfig{
		ID:     "mcptools-1",
		OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:9/v1"}, // never reached
		MCP: []proxy.MCPServer{{
			Name: "everything", Command: []string{bins.MCPEverything},
			Env: map[string]string{markEnv: h.mark},
		}},
	})
	return h
}

// servers are the running processes of h's MCP servers.
func (h *host) servers() []int {
	return sharedtest.Processes(func(_, environ []byte) bool {
		return bytes.Contains(environ, []byte("\x00"+markEnv+"="+h.mark+"\x00"))
	})
}

// waitNoServers waits for every process of h's MCP servers to end.
func (h *host) waitNoServers(t *testing.T, pids []int) {
	t.Helper()
	for _, pid := range pids {
		sharedtest.WaitGone(t, pid, "the MCP server, once its session ended")
	}
}

// calls ends h's run and returns its audit log's mcp-call records.
func (h *host) calls(t *testing.T) []proxy.Record {
	t.Helper()
	return proxytest.Records(t, h.run, "mcp-call")
}

func baseTools(t *testing.T) *tools.Set {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/README.md", []byte("# demo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := tools.New(dir, tools.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Close() })
	return set
}

// The toolbox offers the worker's tools, then the server's under
// mcp__everything__ (names model APIs accept, the server's schemas), and
// calls each where it belongs; the proxy audits every MCP call under the
// tool's real name; Close ends the session, and the server with it.
func TestToolbox(t *testing.T) {
	h := newHost(t)
	set := baseTools(t)
	box, err := mcptools.Open(t.Context(), set, []string{"everything"}, mcptools.Options{ProxyURL: h.url, Token: h.run.Token()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })

	defs := box.Definitions()
	base := set.Definitions()
	if len(defs) <= len(base) {
		t.Fatalf("the toolbox has %d tools, the worker's %d: no MCP tool", len(defs), len(base))
	}
	for i, d := range base {
		if defs[i].Name != d.Name {
			t.Errorf("tool %d is %s, want the worker's %s first", i, defs[i].Name, d.Name)
		}
	}
	byName := map[string]tools.Definition{}
	for _, d := range defs[len(base):] {
		byName[d.Name] = d
		if len(d.Name) > 64 || strings.Trim(d.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Errorf("tool name %q: model APIs want ^[a-zA-Z0-9_-]{1,64}$", d.Name)
		}
		if !strings.HasPrefix(d.Name, "mcp__everything__") {
			t.Errorf("tool name %q, want mcp__everything__TOOL", d.Name)
		}
		var schema map[string]any
		if err := json.Unmarshal(d.Parameters, &schema); err != nil || schema["type"] != "object" || schema["properties"] == nil {
			t.Errorf("%s's parameters %s: want an object schema with properties", d.Name, d.Parameters)
		}
	}
	greet, ok := byName["mcp__everything__greet"]
	if !ok {
		t.Fatalf("no mcp__everything__greet among %v", slices.Sorted(func(yield func(string) bool) {
			for n := range byName {
				if !yield(n) {
					return
				}
			}
		}))
	}
	var schema struct {
		Properties map[string]struct{ Type string } `json:"properties"`
		Required   []string                         `json:"required"`
	}
	if err := json.Unmarshal(greet.Parameters, &schema); err != nil || schema.Properties["name"].Type != "string" || !slices.Equal(schema.Required, []string{"name"}) {
		t.Errorf("greet's parameters %s: want the server's schema, a required string name", greet.Parameters)
	}
	if greet.Description != "say hi" {
		t.Errorf("greet's description %q, want the server's", greet.Description)
	}
	structured, ok := byName["mcp__everything__greet__structured_"]
	if !ok || !strings.Contains(structured.Description, `"greet (structured)"`) {
		t.Errorf("greet (structured) is %+v, want it as mcp__everything__greet__structured_, its description naming it", structured)
	}

	tests := []struct {
		name, tool, args string
		want             string
		wantErr          bool
	}{
		{"an MCP tool", "mcp__everything__greet", `{"name":"amelia"}`, "Hi amelia", false},
		{"a renamed MCP tool", "mcp__everything__greet__structured_", `{"name":"sandbox"}`, "sandbox", false},
		{"the worker's own tool", "ls", `{}`, "README.md", false},
		{"an MCP tool the server does not have", "mcp__everything__nosuch", `{}`, "unknown tool", true},
		{"arguments that are not an object", "mcp__everything__greet", `["amelia"]`, "must be a JSON object", true},
		{"arguments the server refuses", "mcp__everything__greet", `{"name":3}`, "name", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := box.Call(t.Context(), tt.tool, json.RawMessage(tt.args))
			if res.IsError != tt.wantErr || !strings.Contains(res.Output, tt.want) {
				t.Errorf("Call(%s, %s) = %+v; want is_error %v and output containing %q", tt.tool, tt.args, res, tt.wantErr, tt.want)
			}
		})
	}

	pids := h.servers()
	if len(pids) != 1 {
		t.Fatalf("the MCP server's processes are %v, want one", pids)
	}
	if err := box.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	h.waitNoServers(t, pids)
	if res := box.Call(t.Context(), "mcp__everything__greet", json.RawMessage(`{"name":"late"}`)); !res.IsError {
		t.Errorf("a call after Close answered %+v, want an error", res)
	}

	var called []string
	for _, rec := range h.calls(t) {
		called = append(called, rec.Tool)
	}
	if !slices.Contains(called, "greet") || !slices.Contains(called, "greet (structured)") {
		t.Errorf("the audit log's MCP calls are %q, want greet and greet (structured)", called)
	}
}

// Open fails, with one line naming the server and why, when a server
// cannot be used; the sessions it opened already end.
func TestOpenRefusals(t *testing.T) {
	h := newHost(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() // nothing listens there once closed
	ln.Close()
	tests := []struct {
		name     string
		servers  []string
		url, tok string
		want     string
	}{
		{"no proxy URL", []string{"everything"}, "", h.run.Token(),
			"AMELIA_PROXY_URL is not set: the worker reaches the profile's MCP servers through the amelia proxy"},
		{"no token", []string{"everything"}, h.url, "",
			"AMELIA_PROXY_TOKEN is not set: the worker reaches the profile's MCP servers with the run's token"},
		{"a name the profile does not list", []string{"everything", "nosuch"}, h.url, h.run.Token(),
			`MCP server nosuch: the proxy refused: no MCP server "nosuch" in profile dev (its MCP servers: everything)`},
		{"a token the proxy does not know", []string{"everything"}, h.url, "amr_not-a-token",
			"MCP server everything: the proxy refused the run's token (AMELIA_PROXY_TOKEN): missing or invalid run token"},
		{"no proxy there", []string{"everything"}, closed, h.run.Token(),
			"MCP server everything: open a session with the proxy at AMELIA_PROXY_URL: connect to the proxy: "},
		{"a name that is no name", []string{"every/thing"}, h.url, h.run.Token(),
			"MCP server every/thing: an MCP server's name is letters, digits, '-' and '_'"},
		{"a name given twice", []string{"everything", "everything"}, h.url, h.run.Token(),
			"MCP server everything is given twice: give each once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			box, err := mcptools.Open(t.Context(), baseTools(t), tt.servers, mcptools.Options{ProxyURL: tt.url, Token: tt.tok})
			if err == nil {
				box.Close()
				t.Fatal("Open succeeded")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("Open: %q; want one line starting %q", msg, tt.want)
			}
			if strings.Contains(msg, h.run.Token()) {
				t.Error("the error shows the run's token")
			}
			h.waitNoServers(t, h.servers())
		})
	}
}
