package worker_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/agentbin/agentbintest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/pythontest"
	"github.com/amelia-sandbox/amelia/proxy"
	"github.com/amelia-sandbox/amelia/proxy/proxytest"
)

// The real opencode works in a checkout through the worker: its tool
// call writes the file, what it did is derived from its LLM traffic, its
// answer is the result, and nothing of its own lands in the checkout.
func TestCLIAgentOpencode(t *testing.T) {
	bin := agentbintest.Binaries(t).Opencode
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: llmtest.AgentScript(
		llmtest.Turn{Text: "Writing the file.", ToolCalls: []llmtest.ToolCall{call("write", `{"file_path": "hello.txt", "content": "hello from opencode\n"}`)},
			Usage: &llmtest.Usage{PromptTokens: 100, CompletionTokens: 20}},
		llmtest.Turn{Text: "Done: hello.txt is written.", Usage: &llmtest.Usage{PromptTokens: 150, CompletionTokens: 10}},
	)})
	repo := gitRepo(t)
	state := filepath.Join(t.TempDir(), "agent")
	r := agentic(t, srv, repo, "write hello.txt", "--agent", "opencode", "--agent-bin", bin, "--state-dir", state)
	msgs := r.decode(t)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", r.code, r.stderr, r.stdout)
	}
	var types []string
	for _, m := range msgs {
		types = append(types, string(m.Type))
	}
	if got, want := strings.Join(types, " "), "thinking tool_call tool_result result usage"; got != want {
		t.Fatalf("messages %q, want %q\nstdout:\n%s", got, want, r.stdout)
	}
	call, res, final, use := msgs[1], msgs[2], msgs[3], msgs[4].Usage
	var input map[string]string
	if err := json.Unmarshal(call.ToolInput, &input); err != nil || *call.ToolName != "write" || input["file_path"] != "hello.txt" {
		t.Errorf("tool call %s %s", *call.ToolName, call.ToolInput)
	}
	if *res.ToolCallID != *call.ToolCallID || res.IsError {
		t.Errorf("tool result %+v for call %s", res, *call.ToolCallID)
	}
	if final.IsError || *final.Content != "Done: hello.txt is written." {
		t.Errorf("result %q (error %v)", *final.Content, final.IsError)
	}
	if *use.NumTurns < 2 || *use.InputTokens < 250 || *use.OutputTokens < 30 {
		t.Errorf("usage: %d turns, %d in, %d out", *use.NumTurns, *use.InputTokens, *use.OutputTokens)
	}
	if b, err := os.ReadFile(filepath.Join(repo, "hello.txt")); err != nil || string(b) != "hello from opencode\n" {
		t.Errorf("hello.txt: %q, %v", b, err)
	}
	entries, _ := os.ReadDir(repo)
	for _, e := range entries {
		if n := e.Name(); n != ".git" && n != "README.md" && n != "hello.txt" {
			t.Errorf("the agent left %s in the checkout", n)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "data", "opencode.db")); err != nil {
		t.Errorf("opencode's state is not in its state directory: %v", err)
	}
	checkWithPythonModels(t, r.stdout)
	for _, req := range srv.Requests() {
		if req.Chat.Model != "test-model" {
			t.Errorf("a request asked for model %q, not the run's", req.Chat.Model)
		}
		if got := req.Header.Get("Authorization"); got != "Bearer "+runToken {
			t.Errorf("a request carried Authorization %q, not the run's token", got)
		}
	}
}

// checkWithPythonModels validates protocol lines with the Python Amelia's
// models.
func checkWithPythonModels(t *testing.T, stdout []byte) {
	t.Helper()
	python := pythontest.Python(t, "a CLI agent's lines against the Python models")
	lines := writeFile(t, t.TempDir(), "agent-stdout.jsonl", string(stdout))
	if out, err := exec.Command(python, checkScript, lines).CombinedOutput(); err != nil {
		t.Fatalf("the Python models reject the CLI agent's lines: %v\n%s", err, out)
	}
}

// SIGTERM while opencode runs a command (what stopping a run sends the
// worker): opencode and everything it started are stopped, and the run
// ends with its interrupted result and its usage, then exit 130.
func TestCLIAgentInterrupted(t *testing.T) {
	bin := agentbintest.Binaries(t).Opencode
	repo := gitRepo(t)
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: llmtest.AgentScript(
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("bash", `{"command": "echo $$ > ready; sleep 1000"}`)}},
	)})
	// bash tells the test it runs, and its pid, through a FIFO: opening
	// it for reading blocks until bash writes.
	ready := filepath.Join(repo, "ready")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	prompt := writeFile(t, t.TempDir(), "p.txt", "wait")
	cmd := exec.Command(workerBin, "agentic", "--prompt-file", prompt, "--cwd", repo, "--model", "m", "--agent", "opencode", "--agent-bin", bin)
	cmd.Env = append(proxyEnv(srv), "PATH="+os.Getenv("PATH"), "HOME="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	bashPid := pidFrom(t, ready)
	cmd.Process.Signal(syscall.SIGTERM)
	r := result{stdout: mustReadAll(t, bufio.NewReader(stdout))}
	err = cmd.Wait()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); !ok || exitErr.ExitCode() != 130 {
		t.Fatalf("worker ended with %v, want exit 130\n%s", err, r.stdout)
	}
	res, _ := r.ending(t, true)
	contains(t, "result", str(res.Content), "interrupted")
	waitGone(t, bashPid)
}

// Claude Code (its scripted stand-in, which follows its documented flags,
// environment and stream-json) through the worker, the relay and the
// real proxy, which translates its Anthropic requests for an OpenAI-only
// upstream, with the host's MCP server bridged in: its events become the
// protocol's lines, its tools write in the checkout and reach the MCP
// server, its result and usage end the run, the Python models read the
// lines, and nothing of its own lands in the checkout.
func TestCLIAgentClaudeCodeThroughTheProxy(t *testing.T) {
	bins := agentbintest.Binaries(t)
	claude := filepath.Join(t.TempDir(), "claude")
	if out, err := exec.Command("go", "build", "-o", claude, "./cliagent/standin").CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in: %v\n%s", err, out)
	}
	up := llmtest.NewWithOptions(t, llmtest.Options{Script: llmtest.AgentScript(
		llmtest.Turn{Text: "Writing the file.", ToolCalls: []llmtest.ToolCall{call("Write", `{"file_path": "hello.txt", "content": "hello from claude\n"}`)},
			Usage: &llmtest.Usage{PromptTokens: 30, CompletionTokens: 7}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("mcp__everything__greet", `{"name": "amelia"}`)}, Usage: &llmtest.Usage{PromptTokens: 40, CompletionTokens: 5}},
		llmtest.Turn{Text: "Done: hello.txt is written.", Usage: &llmtest.Usage{PromptTokens: 50, CompletionTokens: 6}},
	)})
	proxyURL, run := proxytest.Start(t, proxy.RunConfig{Model: "test-model",
		OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1", Key: "sk-upstream"},
		MCP:    []proxy.MCPServer{{Name: "everything", Command: []string{bins.MCPEverything}}}})
	repo := gitRepo(t)
	prompt := writeFile(t, t.TempDir(), "prompt.txt", "write hello.txt")
	r := runWorker(t, []string{"AMELIA_PROXY_URL=" + proxyURL, "AMELIA_PROXY_TOKEN=" + run.Token()}, nil,
		"agentic", "--prompt-file", prompt, "--cwd", repo, "--model", "test-model", "--agent", "claude-code", "--agent-bin", claude, "--mcp", "everything")
	msgs := r.decode(t)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s\nstdout:\n%s", r.code, r.stderr, r.stdout)
	}
	var types []string
	for _, m := range msgs {
		types = append(types, string(m.Type))
	}
	if got, want := strings.Join(types, " "), "thinking tool_call tool_result tool_call tool_result result usage"; got != want {
		t.Fatalf("messages %q, want %q\nstdout:\n%s", got, want, r.stdout)
	}
	if *msgs[1].ToolName != "Write" || *msgs[3].ToolName != "mcp__everything__greet" || !strings.Contains(*msgs[4].ToolOutput, "Hi amelia") {
		t.Errorf("tool calls %s, %s; the MCP tool said %q", *msgs[1].ToolName, *msgs[3].ToolName, *msgs[4].ToolOutput)
	}
	if res := msgs[5]; res.IsError || *res.Content != "Done: hello.txt is written." || res.SessionID == nil {
		t.Errorf("result %q (error %v, session %v)", *res.Content, res.IsError, res.SessionID)
	}
	if u := msgs[6].Usage; *u.NumTurns != 3 || *u.InputTokens != 120 || *u.OutputTokens != 18 {
		t.Errorf("usage: %d turns, %d in, %d out; want Claude Code's own 3, 120, 18", *u.NumTurns, *u.InputTokens, *u.OutputTokens)
	}
	if b, err := os.ReadFile(filepath.Join(repo, "hello.txt")); err != nil || string(b) != "hello from claude\n" {
		t.Errorf("hello.txt: %q, %v", b, err)
	}
	if out, err := exec.Command("git", "-C", repo, "status", "--porcelain").Output(); err != nil || string(out) != "?? README.md\n?? hello.txt\n" {
		t.Errorf("the checkout holds %q (%v), want its README and hello.txt alone", out, err)
	}
	for _, req := range up.Requests() {
		if req.Header.Get("Authorization") != "Bearer sk-upstream" || req.Chat.Model != "test-model" {
			t.Errorf("the upstream got a request with %q for model %q", req.Header.Get("Authorization"), req.Chat.Model)
		}
	}
	checkWithPythonModels(t, r.stdout)
}
