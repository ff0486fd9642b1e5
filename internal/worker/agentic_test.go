package worker_test

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

const runToken = "run-token-0123456789abcdef"

// proxyEnv is the environment amelia run gives the worker, with srv as the
// proxy.
func proxyEnv(srv *llmtest.Server) []string {
	return []string{"AMELIA_PROXY_URL=" + srv.URL(), "AMELIA_PROXY_TOKEN=" + runToken}
}

// gitRepo makes a git repository with one file.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"config", "user.name", "t"}, {"config", "user.email", "t@example.com"}} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	writeFile(t, dir, "README.md", "# demo\n")
	return dir
}

func agentic(t *testing.T, srv *llmtest.Server, cwd, prompt string, extra ...string) result {
	t.Helper()
	promptFile := writeFile(t, t.TempDir(), "prompt.txt", prompt)
	args := append([]string{"agentic", "--prompt-file", promptFile, "--cwd", cwd, "--model", "test-model"}, extra...)
	return runWorker(t, proxyEnv(srv), nil, args...)
}

func call(name, args string) llmtest.ToolCall { return llmtest.ToolCall{Name: name, Arguments: args} }

func usage(prompt, completion, cached int, cost float64) *llmtest.Usage {
	return &llmtest.Usage{PromptTokens: prompt, CompletionTokens: completion, CachedTokens: cached, Cost: &cost}
}

// The whole loop against a scripted model: it writes, edits, greps,
// executes and reads in a git repository, and the files end up as the
// script intended.
func TestAgenticScriptedSession(t *testing.T) {
	repo := gitRepo(t)
	srv := llmtest.New(t,
		llmtest.Turn{Text: "I'll look around first.", ToolCalls: []llmtest.ToolCall{
			call("ls", `{"path": "."}`),
			call("write_file", `{"file_path": "greet.go", "content": "package greet\n\nfunc Hello() string { return \"hi\" }\n"}`),
		}, Usage: usage(100, 20, 10, 0.001)},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			call("edit_file", `{"file_path": "greet.go", "old_string": "\"hi\"", "new_string": "\"hello, world\""}`),
		}, Usage: usage(150, 15, 50, 0.002)},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			call("grep", `{"pattern": "hello, w[a-z]+", "path": ".", "output_mode": "content"}`),
		}, Usage: usage(200, 10, 0, 0.003)},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			call("execute", `{"command": "git add -A && git commit -qm 'Add greet' && git log --format=%s"}`),
		}, Usage: usage(250, 12, 0, 0.004)},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			call("write_todos", `{"todos": [{"content": "write greet", "status": "completed"}]}`),
			call("read_file", `{"file_path": "greet.go"}`),
		}, Usage: usage(300, 9, 0, 0.005)},
		llmtest.Turn{Text: "Added greet.go, which says hello.", Usage: usage(350, 8, 0, 0.006)},
	)
	r := agentic(t, srv, repo, "Add a greeting.")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	res, u := r.ending(t, false)

	// The files, as the script intended.
	if got, want := readFile(t, filepath.Join(repo, "greet.go")), "package greet\n\nfunc Hello() string { return \"hello, world\" }\n"; got != want {
		t.Errorf("greet.go = %q, want %q", got, want)
	}
	out, err := exec.Command("git", "-C", repo, "log", "--format=%s").Output()
	if err != nil || string(out) != "Add greet\n" {
		t.Errorf("git log = %q, %v; want the commit the agent made", out, err)
	}

	// The transcript: each step once, in order.
	var steps []string
	results := map[string]*protocol.AgenticMessage{}
	for _, m := range r.msgs {
		if m.Type != protocol.Usage && str(m.Model) != "test-model" {
			t.Errorf("%s line has model %s", m.Type, str(m.Model))
		}
		switch m.Type {
		case protocol.ToolCall:
			steps = append(steps, "call "+str(m.ToolName))
		case protocol.ToolResult:
			steps = append(steps, "result "+str(m.ToolName))
			results[str(m.ToolName)] = m
			if m.IsError {
				t.Errorf("%s failed: %s", str(m.ToolName), str(m.ToolOutput))
			}
		default:
			steps = append(steps, string(m.Type))
		}
	}
	want := []string{"thinking", "call ls", "result ls", "call write_file", "result write_file",
		"call edit_file", "result edit_file", "call grep", "result grep", "call execute", "result execute",
		"call write_todos", "result write_todos", "call read_file", "result read_file", "result", "usage"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps:\n got %v\nwant %v", steps, want)
	}
	if got := str(r.msgs[0].Content); got != "I'll look around first." {
		t.Errorf("thinking = %q", got)
	}
	if got := str(res.Content); got != "Added greet.go, which says hello." {
		t.Errorf("result = %q", got)
	}
	contains(t, "ls output", str(results["ls"].ToolOutput), "README.md")
	contains(t, "grep output", str(results["grep"].ToolOutput), "greet.go:3:")
	contains(t, "execute output", str(results["execute"].ToolOutput), "Add greet")
	contains(t, "execute output", str(results["execute"].ToolOutput), "exit code 0")
	contains(t, "read_file output", str(results["read_file"].ToolOutput), "     3\tfunc Hello() string { return \"hello, world\" }")

	// Tool calls carry the model's arguments (reassembled from many chunks)
	// and ids that tie them to their results.
	reqs := srv.Requests()
	sent := reqs[1].Chat.Messages // the history after turn 1
	var call0 *protocol.AgenticMessage
	for _, m := range r.msgs {
		if m.Type == protocol.ToolCall && str(m.ToolName) == "write_file" {
			call0 = m
		}
	}
	var wantInput bytes.Buffer
	json.Compact(&wantInput, []byte(`{"file_path": "greet.go", "content": "package greet\n\nfunc Hello() string { return \"hi\" }\n"}`))
	if string(call0.ToolInput) != wantInput.String() {
		t.Errorf("write_file tool_input = %s, want %s", call0.ToolInput, wantInput.String())
	}
	toolMsgs := 0
	for _, m := range sent {
		if m.Role == "tool" {
			toolMsgs++
			if m.ToolCallID == str(call0.ToolCallID) && !strings.Contains(m.Text(), "greet.go") {
				t.Errorf("the model got %q for write_file", m.Text())
			}
		}
	}
	if toolMsgs != 2 {
		t.Errorf("second request has %d tool messages, want 2", toolMsgs)
	}

	// What the server got: the token, streaming with usage, the tools, the
	// prompt.
	if len(reqs) != 6 {
		t.Fatalf("server got %d requests, want 6", len(reqs))
	}
	for i, req := range reqs {
		if got := req.Header.Get("Authorization"); got != "Bearer "+runToken {
			t.Errorf("request %d Authorization = %q", i, got)
		}
		if !req.Chat.Stream || !req.Chat.IncludeUsage() || req.Chat.Model != "test-model" {
			t.Errorf("request %d: stream=%v include_usage=%v model=%q", i, req.Chat.Stream, req.Chat.IncludeUsage(), req.Chat.Model)
		}
	}
	var tools []string
	for _, tool := range reqs[0].Chat.Tools {
		tools = append(tools, tool.Function.Name)
	}
	if want := []string{"ls", "read_file", "write_file", "edit_file", "glob", "grep", "execute", "write_todos"}; !slices.Equal(tools, want) {
		t.Errorf("tools offered = %v, want %v", tools, want)
	}
	first := reqs[0].Chat.Messages
	if len(first) != 2 || first[0].Role != "system" || first[1].Role != "user" || first[1].Text() != "Add a greeting." {
		t.Errorf("first request messages = %+v, want system then the prompt", first)
	}
	contains(t, "system prompt", first[0].Text(), repo)

	// Usage: the sums of what the server reported.
	uu := u.Usage
	if num(uu.InputTokens) != "1350" || num(uu.OutputTokens) != "74" || num(uu.CacheReadTokens) != "60" ||
		num(uu.NumTurns) != "6" || str(uu.Model) != "test-model" || uu.DurationMs == nil {
		t.Errorf("usage = in %s out %s cache_read %s turns %s model %s duration %s",
			num(uu.InputTokens), num(uu.OutputTokens), num(uu.CacheReadTokens), num(uu.NumTurns), str(uu.Model), num(uu.DurationMs))
	}
	if uu.CacheCreationTokens != nil {
		t.Errorf("cache_creation_tokens = %d, want null: the upstream never reported it", *uu.CacheCreationTokens)
	}
	if uu.CostUSD == nil || math.Abs(*uu.CostUSD-0.021) > 1e-9 {
		t.Errorf("cost_usd = %v, want 0.021", uu.CostUSD)
	}
}

// Mistakes of the model go back to it as tool errors and the loop goes on:
// bad JSON, an unknown tool, paths outside the working directory.
func TestAgenticToolErrorsGoBackToTheModel(t *testing.T) {
	parent := t.TempDir()
	cwd := filepath.Join(parent, "work")
	os.Mkdir(cwd, 0o755)
	outside := writeFile(t, parent, "secret.txt", "outside\n")
	if err := os.Symlink(outside, filepath.Join(cwd, "link.txt")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		call llmtest.ToolCall
		want string
	}{
		{call("read_file", `{"file_path": "greet.go"`), "JSON"},
		{call("delete_everything", `{}`), "unknown tool"},
		{call("read_file", `{"file_path": "../secret.txt"}`), "outside the working directory"},
		{call("write_file", `{"file_path": "`+outside+`", "content": "pwned"}`), "outside the working directory"},
		{call("edit_file", `{"file_path": "link.txt", "old_string": "outside", "new_string": "pwned"}`), "outside the working directory"},
		{call("read_file", `{"file_path": "missing.txt"}`), "missing.txt"},
	}
	var turns []llmtest.Turn
	for _, c := range cases {
		turns = append(turns, llmtest.Turn{ToolCalls: []llmtest.ToolCall{c.call}})
	}
	turns = append(turns, llmtest.Turn{Text: "I could not do it."})
	srv := llmtest.New(t, turns...)

	r := agentic(t, srv, cwd, "Try things.")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	r.ending(t, false)
	var results []*protocol.AgenticMessage
	for _, m := range r.msgs {
		if m.Type == protocol.ToolResult {
			results = append(results, m)
		}
	}
	if len(results) != len(cases) {
		t.Fatalf("%d tool results, want %d", len(results), len(cases))
	}
	for i, c := range cases {
		if !results[i].IsError {
			t.Errorf("%s %s: is_error false, output %q", c.call.Name, c.call.Arguments, str(results[i].ToolOutput))
		}
		contains(t, c.call.Name+" "+c.call.Arguments, str(results[i].ToolOutput), c.want)
	}
	if got := readFile(t, outside); got != "outside\n" {
		t.Errorf("the file outside the working directory became %q", got)
	}
	// The invalid arguments were not an object: tool_input is null.
	if m := r.msgs[0]; m.Type != protocol.ToolCall || m.ToolInput != nil {
		t.Errorf("first line = %s with tool_input %s, want a tool_call with null tool_input", m.Type, m.ToolInput)
	}
	if n := len(srv.Requests()); n != len(cases)+1 {
		t.Errorf("%d LLM calls, want %d", n, len(cases)+1)
	}
}

// execute's timeout kills the command's whole process group, children
// included, and the run goes on.
func TestAgenticExecuteTimeoutKillsChildren(t *testing.T) {
	cwd := t.TempDir()
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{
			call("execute", `{"command": "sleep 1000 & echo $! > sleep.pid; wait", "timeout": 1}`),
		}},
		llmtest.Turn{Text: "It hung."},
	)
	r := agentic(t, srv, cwd, "Run it.")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	r.ending(t, false)
	execResult := r.msgs[1]
	if !execResult.IsError {
		t.Errorf("execute result is_error false: %s", str(execResult.ToolOutput))
	}
	contains(t, "execute output", str(execResult.ToolOutput), "timed out after 1s")
	waitGone(t, pidFrom(t, filepath.Join(cwd, "sleep.pid")))
}

func TestAgenticFailures(t *testing.T) {
	cases := []struct {
		name  string
		turns []llmtest.Turn
		args  []string
		want  string
		calls string // num_turns: the LLM calls that completed
	}{
		{"malformed stream", []llmtest.Turn{{RawSSE: "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"hi\"\n\n"}},
			nil, "not a chat completion chunk", "0"},
		{"stream cut short", []llmtest.Turn{{RawSSE: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n"}},
			nil, "ended before the answer was complete", "0"},
		{"upstream refuses", []llmtest.Turn{{Status: 401, Error: "invalid run token"}},
			nil, "HTTP 401: invalid run token", "0"},
		{"turn limit", []llmtest.Turn{
			{ToolCalls: []llmtest.ToolCall{call("ls", `{}`)}},
			{ToolCalls: []llmtest.ToolCall{call("ls", `{}`)}},
		}, []string{"--max-turns", "2"}, "stopped after 2 turns without a final answer", "2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := llmtest.New(t, c.turns...)
			r := agentic(t, srv, t.TempDir(), "Do it.", c.args...)
			if r.code != 1 {
				t.Errorf("exit %d, want 1; stderr:\n%s", r.code, r.stderr)
			}
			res, u := r.ending(t, true)
			contains(t, "result", str(res.Content), c.want)
			if got := num(u.Usage.NumTurns); got != c.calls {
				t.Errorf("num_turns = %s, want %s", got, c.calls)
			}
		})
	}
}

// Failures before the first LLM call still end with result and usage.
func TestAgenticSetupFailures(t *testing.T) {
	srv := llmtest.New(t)
	prompt := writeFile(t, t.TempDir(), "p.txt", "x")
	cases := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no prompt file", proxyEnv(srv), []string{"--prompt-file", "/nonexistent/p.txt", "--cwd", t.TempDir()}, "read prompt"},
		{"no cwd", proxyEnv(srv), []string{"--prompt-file", prompt, "--cwd", "/nonexistent/dir"}, "working directory"},
		{"no proxy", nil, []string{"--prompt-file", prompt, "--cwd", t.TempDir()}, "AMELIA_PROXY_URL is not set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runWorker(t, c.env, nil, append([]string{"agentic", "--model", "m"}, c.args...)...)
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			res, _ := r.ending(t, true)
			contains(t, "result", str(res.Content), c.want)
		})
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("the LLM was called %d times", n)
	}
}

// Command-line mistakes are usage errors on stderr; stdout stays empty.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"agentic", "--cwd", "."},
		{"agentic", "--prompt-file", "p", "--cwd", ".", "--model", "m", "--instructions", "a", "--instructions-file", "f"},
		{"frobnicate"},
		{"tunnel", "--listen", "0.0.0.0:8430"},
		{"git-credential"},
	} {
		r := runWorker(t, nil, nil, args...)
		if r.code != 2 || len(r.stdout) != 0 || len(r.stderr) == 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2, a message on stderr only", args, r.code, r.stdout, r.stderr)
		}
	}
}

// --instructions-file comes first in the system prompt; LLM_PROXY_URL
// overrides the proxy's LLM route; JSON logs go to stderr only.
func TestAgenticInstructionsOverrideAndLogs(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Text: "ok"})
	instr := writeFile(t, t.TempDir(), "instr.txt", "Always answer in French.")
	prompt := writeFile(t, t.TempDir(), "p.txt", "hi")
	env := []string{
		"AMELIA_PROXY_URL=http://127.0.0.1:1", // would fail: the override wins
		"LLM_PROXY_URL=" + srv.URL() + "/v1",
		"AMELIA_PROXY_TOKEN=" + runToken,
		"AMELIA_LOG_FORMAT=json",
	}
	r := runWorker(t, env, nil, "agentic", "--prompt-file", prompt, "--cwd", t.TempDir(), "--model", "m", "--instructions-file", instr)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	if res, _ := r.ending(t, false); str(res.Content) != "ok" {
		t.Errorf("result = %q", str(res.Content))
	}
	sys := srv.Requests()[0].Chat.Messages[0]
	if sys.Role != "system" || !strings.HasPrefix(sys.Text(), "Always answer in French.") {
		t.Errorf("system message = %s %q", sys.Role, sys.Text())
	}
	lines := bytes.Split(bytes.TrimSpace(r.stderr), []byte("\n"))
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal(l, &rec); err != nil || rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("stderr line is not a JSON log record: %s", l)
		}
	}
	if bytes.Contains(r.stderr, []byte(runToken)) {
		t.Error("the run token appears in the logs")
	}
}
