package agentbin_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/agentbin"
	"github.com/amelia-sandbox/amelia/internal/agentbin/agentbintest"
)

func TestCacheDir(t *testing.T) {
	xdg := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", xdg)
	t.Setenv("HOME", t.TempDir())
	t.Chdir(t.TempDir())
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ env, want string }{
		{"", filepath.Join(xdg, "amelia", "agents")},
		{"/var/cache/agents", "/var/cache/agents"},
		{"rel", filepath.Join(wd, "rel")},
	} {
		t.Setenv(agentbin.CacheEnv, tc.env)
		got, err := agentbin.CacheDir()
		if err != nil || got != tc.want {
			t.Errorf("%s=%q: CacheDir() = %q, %v; want %q", agentbin.CacheEnv, tc.env, got, err, tc.want)
		}
	}
}

func TestCached(t *testing.T) {
	t.Run("empty cache says how to fill it", func(t *testing.T) {
		_, err := agentbin.Cached(t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "run make agent-binaries") {
			t.Fatalf("Cached(empty dir) = %v, want an error saying to run make agent-binaries", err)
		}
	})
	t.Run("half a cache says what is missing", func(t *testing.T) {
		root := t.TempDir()
		put(t, filepath.Join(root, "opencode-"+agentbin.OpencodeVersion, "bin", "opencode"))
		_, err := agentbin.Cached(root)
		if err == nil || !strings.Contains(err.Error(), "mcp-go-sdk-"+agentbin.MCPSDKVersion+" missing") {
			t.Fatalf("Cached(without the MCP server) = %v, want an error naming its entry", err)
		}
	})
	t.Run("a filled cache gives absolute paths by version", func(t *testing.T) {
		t.Chdir(t.TempDir())
		put(t, filepath.Join("c", "opencode-"+agentbin.OpencodeVersion, "bin", "opencode"))
		put(t, filepath.Join("c", "mcp-go-sdk-"+agentbin.MCPSDKVersion, "bin", "mcp-everything"))
		b, err := agentbin.Cached("c")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{b.Opencode, b.MCPEverything} {
			if !filepath.IsAbs(p) {
				t.Errorf("%s is not absolute", p)
			}
			if _, err := os.Stat(p); err != nil {
				t.Error(err)
			}
		}
	})
}

func put(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o755); err != nil {
		t.Fatal(err)
	}
}

// runnable returns the cached programs when this host can run them (they
// are built for linux).
func runnable(t *testing.T) agentbin.Binaries {
	t.Helper()
	b := agentbintest.Binaries(t)
	if runtime.GOOS != "linux" {
		t.Skipf("SKIPPING: the CLI-agent programs are built for linux, and this is %s", runtime.GOOS)
	}
	return b
}

func TestOpencodeVersion(t *testing.T) {
	b := runnable(t)
	cmd := exec.CommandContext(t.Context(), b.Opencode, "--version")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("opencode --version: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != agentbin.OpencodeVersion {
		t.Errorf("opencode --version printed %q, want %q", got, agentbin.OpencodeVersion)
	}
}

// TestMCPEverythingOverStdio speaks MCP to the everything server as a
// client does: initialize, then list its tools and call greet, which
// answers "Hi " and its name argument.
func TestMCPEverythingOverStdio(t *testing.T) {
	b := runnable(t)
	// A guard against a server that stops answering: a read ends when the
	// process is killed. (Not t.Context: that ends before the cleanup
	// below closes the server's input and waits for it to end.)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, b.MCPEverything)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("the everything server did not end cleanly when its input closed: %v", err)
		}
		if t.Failed() {
			t.Logf("the everything server's stderr (the messages it read and wrote):\n%s", stderr.String())
		}
	})
	c := &rpc{t: t, in: stdin, out: bufio.NewReaderSize(stdout, 1<<20)}

	var init struct {
		ProtocolVersion string                `json:"protocolVersion"`
		ServerInfo      struct{ Name string } `json:"serverInfo"`
	}
	c.call(1, "initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "agentbin-test", "version": "0"},
	}, &init)
	if init.ServerInfo.Name != "everything" || init.ProtocolVersion == "" {
		t.Fatalf("initialize answered %+v, want the everything server and a protocol version", init)
	}
	c.send(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})

	var list struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	c.call(2, "tools/list", map[string]any{}, &list)
	var names []string
	var greet json.RawMessage
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Name == "greet" {
			greet = tool.InputSchema
		}
	}
	if greet == nil {
		t.Fatalf("tools/list lists %q, want greet among them", names)
	}
	if !strings.Contains(string(greet), `"name"`) {
		t.Errorf("greet's input schema is %s, want a name property", greet)
	}

	var res struct {
		Content []struct{ Type, Text string } `json:"content"`
		IsError bool                          `json:"isError"`
	}
	c.call(3, "tools/call", map[string]any{"name": "greet", "arguments": map[string]any{"name": "amelia"}}, &res)
	if res.IsError || len(res.Content) != 1 || res.Content[0].Text != "Hi amelia" {
		t.Errorf("greet answered %+v, want the one text Hi amelia", res)
	}
}

// rpc speaks JSON-RPC 2.0 in lines, as MCP's stdio transport does.
type rpc struct {
	t   *testing.T
	in  io.Writer
	out *bufio.Reader
}

func (c *rpc) send(msg any) {
	c.t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.t.Fatalf("write to the everything server: %v", err)
	}
}

// call sends a request and decodes the result of the answer with its id
// into result, passing over the server's notifications.
func (c *rpc) call(id int, method string, params, result any) {
	c.t.Helper()
	c.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	for {
		line, err := c.out.ReadBytes('\n')
		if err != nil {
			c.t.Fatalf("read the answer to %s: %v", method, err)
		}
		var msg struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int
				Message string
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &msg); err != nil {
			c.t.Fatalf("the answer to %s is not JSON-RPC: %v: %s", method, err, line)
		}
		if msg.ID == nil || *msg.ID != id {
			continue
		}
		if msg.Error != nil {
			c.t.Fatalf("%s failed: %d %s", method, msg.Error.Code, msg.Error.Message)
		}
		if err := json.Unmarshal(msg.Result, result); err != nil {
			c.t.Fatalf("decode the result of %s: %v: %s", method, err, msg.Result)
		}
		return
	}
}
