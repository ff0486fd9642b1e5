package worker_test

import (
	"encoding/json"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/agentbin/agentbintest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/proxy"
	"github.com/amelia-sandbox/amelia/proxy/proxytest"
)

// mcpLLMProxy is a proxy on loopback whose run reaches the LLM srv and
// the MCP everything server (the program everything), and the
// environment amelia run gives the worker with it.
func mcpLLMProxy(t *testing.T, srv *llmtest.Server, everything string) (*proxy.Run, []string) {
	t.Helper()
	url, run := proxytest.Start(t, proxy.RunConfig{
		ID:     "own-mcp",
		OpenAI: proxy.Upstream{BaseURL: srv.URL() + "/v1"},
		MCP:    []proxy.MCPServer{{Name: "everything", Command: []string{everything}}},
	})
	return run, []string{"AMELIA_PROXY_URL=" + url, "AMELIA_PROXY_TOKEN=" + run.Token()}
}

// greetSchema is the input schema the everything server itself lists
// for greet.
func greetSchema(t *testing.T, everything string) any {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "worker-test", Version: "0"}, nil)
	s, err := c.Connect(t.Context(), &mcp.CommandTransport{Command: exec.Command(everything)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name == "greet" {
			return tool.InputSchema
		}
	}
	t.Fatal("the everything server lists no greet")
	return nil
}

// The worker's own agent, given --mcp everything, offers the model the
// server's tools, through the proxy as the run has it: the model sees
// greet as mcp__everything__greet with the server's schema, calls it, and
// the call reaches the server (in the proxy's audit log) and its answer
// the model.
func TestAgenticOwnAgentMCPTools(t *testing.T) {
	everything := agentbintest.Binaries(t).MCPEverything
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("mcp__everything__greet", `{"name":"amelia"}`)}},
		llmtest.Turn{Text: "The server said hi."},
	)
	run, env := mcpLLMProxy(t, srv, everything)
	prompt := writeFile(t, t.TempDir(), "prompt.txt", "Greet amelia.")
	r := runWorker(t, env, nil, "agentic", "--prompt-file", prompt, "--cwd", t.TempDir(), "--model", "test-model", "--mcp", "everything")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	res, _ := r.ending(t, false)
	if got := str(res.Content); got != "The server said hi." {
		t.Errorf("result %q, want the model's answer", got)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the LLM got %d requests, want 2", len(reqs))
	}
	var listed *llmtest.FunctionDefinition
	var names []string
	for _, tool := range reqs[0].Chat.Tools {
		names = append(names, tool.Function.Name)
		if tool.Function.Name == "mcp__everything__greet" {
			listed = &tool.Function
		}
	}
	if listed == nil || !strings.Contains(strings.Join(names, " "), "read_file") {
		t.Fatalf("the model's tools are %q, want the worker's and mcp__everything__greet", names)
	}
	var params any
	if err := json.Unmarshal(listed.Parameters, &params); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(greetSchema(t, everything))
	var wantParams any
	json.Unmarshal(want, &wantParams)
	if !reflect.DeepEqual(params, wantParams) {
		t.Errorf("mcp__everything__greet's parameters are %s, want the server's schema %s", listed.Parameters, want)
	}

	var out *protocol.AgenticMessage
	for _, m := range r.msgs {
		if m.Type == protocol.ToolResult && str(m.ToolName) == "mcp__everything__greet" {
			out = m
		}
	}
	if out == nil || out.IsError || str(out.ToolOutput) != "Hi amelia" {
		t.Errorf("the tool_result of mcp__everything__greet is %+v, want Hi amelia", out)
	}
	if msgs := reqs[1].Chat.Messages; len(msgs) == 0 || str(msgs[len(msgs)-1].Content) != "Hi amelia" {
		t.Errorf("the model's second request does not end with the tool's answer Hi amelia")
	}

	calls := proxytest.Records(t, run, "mcp-call")
	if len(calls) != 1 || calls[0].MCPServer != "everything" || calls[0].Tool != "greet" || calls[0].IsError == nil || *calls[0].IsError {
		t.Errorf("the audit log's MCP calls are %+v, want one, of greet on everything, without an error", calls)
	}
}

// An MCP server the profile does not list fails the run before the model
// is asked, with one line naming it.
func TestAgenticOwnAgentUnknownMCPServer(t *testing.T) {
	everything := agentbintest.Binaries(t).MCPEverything
	srv := llmtest.New(t)
	_, env := mcpLLMProxy(t, srv, everything)
	prompt := writeFile(t, t.TempDir(), "prompt.txt", "Greet amelia.")
	r := runWorker(t, env, nil, "agentic", "--prompt-file", prompt, "--cwd", t.TempDir(), "--model", "test-model", "--mcp", "nosuch")
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
	res, _ := r.ending(t, true)
	want := `MCP server nosuch: the proxy refused: no MCP server "nosuch" in profile dev (its MCP servers: everything)`
	if got := str(res.Content); got != want {
		t.Errorf("result %q, want %q", got, want)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("the LLM got %d requests, want none", n)
	}
}
