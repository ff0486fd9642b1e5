package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/proxy"
	"github.com/amelia-sandbox/amelia/proxy/proxytest"
)

// mcpProxy is a proxy on loopback with one run whose MCP server "echo"
// is cat: what it reads, it answers.
func mcpProxy(t *testing.T) (proxyURL string, run *proxy.Run) {
	t.Helper()
	return proxytest.Start(t, proxy.RunConfig{
		ID:     "mcp-1",
		OpenAI: proxy.Upstream{BaseURL: "http://127.0.0.1:9/v1"}, // never reached
		MCP:    []proxy.MCPServer{{Name: "echo", Command: []string{"cat"}}},
	})
}

// The bridge refuses, in one line on stderr and exit 1 with nothing on
// stdout, what cannot work: no proxy in its environment, a name the
// profile does not list, a token the proxy does not know.
func TestMCPBridgeRefusals(t *testing.T) {
	proxyURL, run := mcpProxy(t)
	tests := []struct {
		name string
		env  []string
		arg  string
		want string
	}{
		{"no proxy URL", []string{"AMELIA_PROXY_TOKEN=" + run.Token()}, "echo",
			"amelia-worker mcp echo: AMELIA_PROXY_URL is not set: run it where amelia starts the agent, whose environment has the proxy's URL"},
		{"no token", []string{"AMELIA_PROXY_URL=" + proxyURL}, "echo",
			"amelia-worker mcp echo: AMELIA_PROXY_TOKEN is not set: run it where amelia starts the agent, whose environment has the run's token"},
		{"a name the profile does not list", []string{"AMELIA_PROXY_URL=" + proxyURL, "AMELIA_PROXY_TOKEN=" + run.Token()}, "github",
			`amelia-worker mcp github: the proxy refused: no MCP server "github" in profile dev (its MCP servers: echo)`},
		{"a token the proxy does not know", []string{"AMELIA_PROXY_URL=" + proxyURL, "AMELIA_PROXY_TOKEN=amr_not-a-token"}, "echo",
			"amelia-worker mcp echo: the proxy refused the run's token (AMELIA_PROXY_TOKEN): missing or invalid run token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runWorker(t, tt.env, strings.NewReader(""), "mcp", tt.arg)
			stderr := string(r.stderr)
			if r.code != 1 || len(r.stdout) != 0 || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, tt.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout and one line starting %q", r.code, r.stdout, stderr, tt.want)
			}
			if strings.Contains(stderr, run.Token()) {
				t.Error("stderr shows the run's token")
			}
		})
	}
}

// The bridge splices its stdin and stdout to the session: a line in comes
// back from the host's server, and the end of its stdin ends it, exit 0.
func TestMCPBridgeSplices(t *testing.T) {
	proxyURL, run := mcpProxy(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, "mcp", "echo")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0",
		"AMELIA_PROXY_URL=" + proxyURL, "AMELIA_PROXY_TOKEN=" + run.Token()}
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
	out := bufio.NewReader(stdout)
	for _, method := range []string{"notifications/one", "notifications/two"} {
		if _, err := io.WriteString(stdin, `{"jsonrpc":"2.0","method":"`+method+`","params":{}}`+"\n"); err != nil {
			t.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil || !strings.Contains(line, `"method":"`+method+`"`) {
			t.Fatalf("read %q, %v; want the line %s back", line, err, method)
		}
	}
	stdin.Close()
	if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
		t.Errorf("after its stdin ended, the bridge wrote %q (%v)", rest, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the bridge ended with %v, want exit 0; stderr:\n%s", err, stderr.String())
	}
}
