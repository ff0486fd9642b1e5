package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amelia-sandbox/amelia/core/mcpwire"
	"github.com/amelia-sandbox/amelia/internal/agentbin/agentbintest"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
	"github.com/amelia-sandbox/amelia/proxy"
)

// mcpMarkEnv marks the processes of a test's MCP servers, to find them
// (sharedtest.Processes) and see them gone.
const mcpMarkEnv = "AMELIA_MCP_TEST_MARK"

// The MCP servers' credentials: the sandbox never sees them, nor does
// the audit log.
const (
	mcpEnvSecret    = "mcp-env-secret-5d1e0f9a"
	mcpHeaderSecret = "mcp-header-secret-77c2b1"
)

// noLLM is the LLM upstream of runs that use only MCP: never reached.
var noLLM = proxy.Upstream{BaseURL: "http://127.0.0.1:9/v1"}

// newMark is a marker no other process has.
func newMark(t *testing.T) string {
	b := make([]byte, 8)
	rand.Read(b)
	return "mcp-test-" + hex.EncodeToString(b)
}

// marked are the running processes whose environment has mark.
func marked(mark string) []int {
	return sharedtest.Processes(func(_, environ []byte) bool {
		return bytes.Contains(environ, []byte("\x00"+mcpMarkEnv+"="+mark+"\x00"))
	})
}

// everythingHTTP starts the everything server as a streamable HTTP server
// on a free loopback port, ended with the test, and returns its URL once
// it accepts connections.
func everythingHTTP(t *testing.T, bin string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "-http", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("the everything server's stderr:\n%s", stderr.String())
		}
	})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("the everything server ended before it listened on %s:\n%s", addr, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the everything server does not listen on %s: %v", addr, err)
		}
	}
	return "http://" + addr
}

// frontDoor is a reverse proxy in front of an MCP server that wants a key
// in X-Api-Key, as a hosted server would, and notes the protocol versions
// the requests after initialize carry.
type frontDoor struct {
	URL      string
	mu       sync.Mutex
	versions []string
	refused  int
}

func newFrontDoor(t *testing.T, target, key string) *frontDoor {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	f := &frontDoor{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		if r.Header.Get("X-Api-Key") != key {
			f.refused++
			f.mu.Unlock()
			http.Error(w, "wrong key", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Mcp-Session-Id") != "" {
			f.versions = append(f.versions, r.Header.Get("Mcp-Protocol-Version"))
		}
		f.mu.Unlock()
		// The body is read before it is forwarded: streamed through
		// httputil.ReverseProxy, an answer now and then ends short
		// (seen in about 1 run of 60; never with it read first, nor
		// without this front door).
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// bridge is an MCP client session with server name of the run through
// the bridge, amelia-worker mcp NAME, as an agent starts it.
func bridge(t *testing.T, proxyURL, token, name string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(workerBin, "mcp", name)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0",
		"AMELIA_PROXY_URL=" + proxyURL, "AMELIA_PROXY_TOKEN=" + token}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("amelia-worker mcp %s's stderr:\n%s", name, stderr.String())
		}
	})
	c := mcp.NewClient(&mcp.Implementation{Name: "bridge-test", Version: "0"}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to MCP server %s through the bridge: %v", name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// greet lists s's tools, calls greet and checks its answer.
func greet(t *testing.T, s *mcp.ClientSession, who string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if got := s.InitializeResult().ServerInfo.Name; got != "everything" {
		t.Errorf("the server is %q, want everything", got)
	}
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "greet" }) {
		t.Fatalf("tools/list has no greet: %d tools", len(tools.Tools))
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": who}})
	if err != nil {
		t.Fatalf("tools/call greet: %v", err)
	}
	if len(res.Content) != 1 || res.IsError {
		t.Fatalf("greet answered %d contents, isError %v", len(res.Content), res.IsError)
	}
	if text, ok := res.Content[0].(*mcp.TextContent); !ok || text.Text != "Hi "+who {
		t.Errorf("greet answered %#v, want the text Hi %s", res.Content[0], who)
	}
}

// TestMCPThroughTheBridge: an agent's MCP client, through amelia-worker
// mcp NAME and the proxy, uses a server the host runs (stdio, in a
// process group of its own, gone when the session ends) and one it
// reaches (streamable HTTP, with the profile's headers); each tools/call
// is in the audit log, and no credential is anywhere the sandbox or the
// log sees.
func TestMCPThroughTheBridge(t *testing.T) {
	bins := agentbintest.Binaries(t)
	mark := newMark(t)
	door := newFrontDoor(t, everythingHTTP(t, bins.MCPEverything), mcpHeaderSecret)
	p := newProxy(t, proxy.Options{Environ: os.Environ()})
	run := p.start(t, proxy.RunConfig{OpenAI: noLLM, MCP: []proxy.MCPServer{
		{
			Name: "everything",
			// A child of its own too, which must not outlive the session.
			Command: []string{"sh", "-c", `sleep 1000 & exec "$0"`, bins.MCPEverything},
			Env:     map[string]string{mcpMarkEnv: mark, "EVERYTHING_TOKEN": mcpEnvSecret},
		},
		{Name: "remote", URL: door.URL + "/", Headers: map[string]string{"X-Api-Key": mcpHeaderSecret}},
	}})

	t.Run("command", func(t *testing.T) {
		s := bridge(t, p.URL, run.Token(), "everything")
		greet(t, s, "amelia")
		pids := marked(mark)
		if len(pids) != 2 {
			t.Fatalf("the server's processes are %v, want the server and its child", pids)
		}
		if err := s.Close(); err != nil {
			t.Errorf("close the session: %v", err)
		}
		for _, pid := range pids {
			sharedtest.WaitGone(t, pid, "a process of the MCP server, once its session ended")
		}
	})
	t.Run("url", func(t *testing.T) {
		s := bridge(t, p.URL, run.Token(), "remote")
		greet(t, s, "sandbox")
		if err := s.Close(); err != nil {
			t.Errorf("close the session: %v", err)
		}
		door.mu.Lock()
		defer door.mu.Unlock()
		if door.refused > 0 || len(door.versions) == 0 {
			t.Errorf("the server refused %d requests for their key and saw %d after initialize, want 0 and some", door.refused, len(door.versions))
		}
		for _, v := range door.versions {
			if v == "" {
				t.Errorf("a request after initialize has no Mcp-Protocol-Version: %q", door.versions)
				break
			}
		}
	})

	recs := readAudit(t, run)
	var calls, sessions []proxy.Record
	for _, r := range recs {
		switch r.Route {
		case "mcp-call":
			calls = append(calls, r)
		case "mcp":
			sessions = append(sessions, r)
		}
	}
	if len(sessions) != 2 {
		t.Errorf("%d session records, want 2: %+v", len(sessions), sessions)
	}
	for _, r := range sessions {
		if r.Status != http.StatusSwitchingProtocols || r.RequestBytes == 0 || r.ResponseBytes == 0 || r.Error != "" {
			t.Errorf("session record %+v, want 101, bytes both ways and no error", r)
		}
	}
	var called []string
	for _, r := range calls {
		called = append(called, r.MCPServer+"/"+r.Tool)
		if r.Method != "tools/call" || r.Path != "/mcp/"+r.MCPServer || r.Status != http.StatusOK || r.IsError == nil || *r.IsError || r.Error != "" {
			t.Errorf("call record %+v, want tools/call of %s answered without an error", r, r.Path)
		}
	}
	if !slices.Equal(called, []string{"everything/greet", "remote/greet"}) {
		t.Errorf("the audit log's calls are %q, want greet on each server", called)
	}
	assertNoSecret(t, run.AuditPath(), mcpEnvSecret, mcpHeaderSecret, run.Token())
}

// rawSession opens a session on the wire itself, without the bridge.
func rawSession(t *testing.T, proxyURL, token, name string) (net.Conn, *bufio.Reader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := mcpwire.Dial(ctx, proxyURL, token, name)
	if err != nil {
		t.Fatalf("open a session with %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// TestMCPServerEndsMidCall: what a server sends has the run's and the
// servers' credentials redacted; a call the server never answers (it
// ended) is answered with an error saying so, and audited so.
func TestMCPServerEndsMidCall(t *testing.T) {
	mark := newMark(t)
	p := newProxy(t, proxy.Options{Environ: os.Environ()})
	// Answers its first line with its token, then ends at the second.
	script := `read -r line; printf '{"jsonrpc":"2.0","id":1,"result":{"echo":"%s"}}\n' "$SOME_TOKEN"; read -r line; exit 3`
	run := p.start(t, proxy.RunConfig{OpenAI: noLLM, MCP: []proxy.MCPServer{
		{Name: "flaky", Command: []string{"sh", "-c", script}, Env: map[string]string{mcpMarkEnv: mark, "SOME_TOKEN": mcpEnvSecret}},
	}})
	c, r := rawSession(t, p.URL, run.Token(), "flaky")
	fmt.Fprintln(c, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"leak","arguments":{"k":"v"}}}`)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(line, mcpEnvSecret) || !strings.Contains(line, `"echo":"[redacted]"`) {
		t.Errorf("the server's answer reached the sandbox as %q, want its token redacted", line)
	}
	fmt.Fprintln(c, `{"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"boom","arguments":{}}}`)
	line, err = r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, `"id":"two"`) || !strings.Contains(line, `"error"`) || !strings.Contains(line, "no answer: the MCP server ended") {
		t.Errorf("the call the server did not answer was answered %q, want an error saying the server ended", line)
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Error("the session goes on after its server ended")
	}
	for _, pid := range marked(mark) {
		sharedtest.WaitGone(t, pid, "the ended MCP server")
	}

	recs := readAudit(t, run)
	var got []string
	for _, rec := range recs {
		if rec.Route == "mcp-call" {
			got = append(got, fmt.Sprintf("%s %d %s", rec.Tool, rec.Status, rec.Error))
		}
	}
	want := []string{"leak 200 ", "boom 502 no answer: the MCP server ended"}
	if !slices.Equal(got, want) {
		t.Errorf("the audit log's calls are %q, want %q", got, want)
	}
	assertNoSecret(t, run.AuditPath(), mcpEnvSecret, `"k"`)
}

// TestMCPRunEndEndsSessions: a run's end ends its sessions and their
// servers.
func TestMCPRunEndEndsSessions(t *testing.T) {
	mark := newMark(t)
	p := newProxy(t, proxy.Options{Environ: os.Environ()})
	run := p.start(t, proxy.RunConfig{OpenAI: noLLM, MCP: []proxy.MCPServer{
		{Name: "cat", Command: []string{"cat"}, Env: map[string]string{mcpMarkEnv: mark}},
	}})
	c, r := rawSession(t, p.URL, run.Token(), "cat")
	// cat answers what it reads: a round trip proves the server runs.
	fmt.Fprintln(c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pids := marked(mark)
	if len(pids) != 1 {
		t.Fatalf("the server's processes are %v, want one", pids)
	}
	if err := run.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err == nil {
		t.Error("the session goes on after its run ended")
	}
	sharedtest.WaitGone(t, pids[0], "the MCP server of an ended run")
}

func TestMCPRefusals(t *testing.T) {
	p := newProxy(t, proxy.Options{Environ: os.Environ()})
	run := p.start(t, proxy.RunConfig{OpenAI: noLLM, MCP: []proxy.MCPServer{
		{Name: "b", Command: []string{"cat"}},
		{Name: "a", URL: "http://127.0.0.1:9/mcp"},
		{Name: "missing", Command: []string{"no-such-mcp-server-program"}},
	}})
	bare := p.start(t, proxy.RunConfig{ID: "run-2", Profile: "bare", OpenAI: noLLM})
	dial := func(token, name string) error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		c, err := mcpwire.Dial(ctx, p.URL, token, name)
		if err == nil {
			c.Close()
		}
		return err
	}
	tests := []struct {
		name, token, server string
		status              int
		msg                 string
	}{
		{"unknown server", run.Token(), "c", 404, `no MCP server "c" in profile dev (its MCP servers: a, b, missing)`},
		{"a profile without servers", bare.Token(), "a", 404, `no MCP server "a": profile bare has no MCP servers (add them under mcp: in the profile)`},
		{"wrong token", "amr_wrong", "a", 401, "missing or invalid run token"},
		{"no token", "", "a", 401, "missing or invalid run token"},
		{"a program the host does not have", run.Token(), "missing", 502, `MCP server missing: start no-such-mcp-server-program: exec: "no-such-mcp-server-program": executable file not found in $PATH`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dial(tt.token, tt.server)
			var refused *mcpwire.RefusedError
			if !errors.As(err, &refused) {
				t.Fatalf("Dial: %v, want a refusal", err)
			}
			if refused.Status != tt.status || !strings.Contains(refused.Message, tt.msg) {
				t.Errorf("refused with %d %q, want %d and %q", refused.Status, refused.Message, tt.status, tt.msg)
			}
		})
	}
	t.Run("a request that does not upgrade", func(t *testing.T) {
		status, body := do(t, http.MethodGet, p.URL+"/mcp/b", run.Token(), "")
		if _, msg := apiError(t, body); status != http.StatusUpgradeRequired || !strings.Contains(msg, "amelia-worker mcp b") {
			t.Errorf("answered %d %s, want 426 naming the bridge", status, body)
		}
	})
}

func TestMCPStartValidates(t *testing.T) {
	p := newProxy(t, proxy.Options{})
	for _, tt := range []struct {
		name string
		mcp  []proxy.MCPServer
		want string
	}{
		{"bad name", []proxy.MCPServer{{Name: "a/b", URL: "http://x.test"}}, `MCP server name "a/b": use letters, digits, '-' and '_', at most 64 characters`},
		{"twice", []proxy.MCPServer{{Name: "a", URL: "http://x.test"}, {Name: "a", Command: []string{"x"}}}, "MCP server a is listed twice"},
		{"both", []proxy.MCPServer{{Name: "a", URL: "http://x.test", Command: []string{"x"}}}, "MCP server a has both a command and a URL; give one"},
		{"neither", []proxy.MCPServer{{Name: "a"}}, "MCP server a has neither a command nor a URL"},
		{"bad URL", []proxy.MCPServer{{Name: "a", URL: "x.test/mcp"}}, "MCP server a: its URL is not an absolute http(s) URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Start(proxy.RunConfig{ID: "run-1", AuditDir: t.TempDir(), OpenAI: noLLM, MCP: tt.mcp})
			if err == nil || err.Error() != "run run-1: "+tt.want {
				t.Errorf("Start: %v, want %q", err, tt.want)
			}
		})
	}
}
