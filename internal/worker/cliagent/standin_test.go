package cliagent

// End-to-end tests of the adapters against the stand-in
// (./standin), which follows each agent's documented contract: the
// adapter's command runs in a git checkout against a scripted upstream,
// its stdout goes through Events, and what came out is checked.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// testKey is the run token the tests hand the agents.
const testKey = "amelia-run-token-test-0123456789"

func TestMain(m *testing.M) {
	if os.Getenv("CLIAGENT_TEST_MCP") == "1" {
		echoMCP(os.Stdin, os.Stdout)
		return
	}
	os.Exit(m.Run())
}

// echoMCP is a stdio MCP server with one tool, echo, for the stand-ins
// to start: the test binary runs it when CLIAGENT_TEST_MCP=1.
func echoMCP(in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string `json:"name"`
				Arguments struct {
					Text string `json:"text"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &req) != nil || req.ID == nil {
			continue
		}
		var result any
		switch req.Method {
		case "initialize":
			result = obj{"protocolVersion": "2025-06-18", "capabilities": obj{"tools": obj{}}, "serverInfo": obj{"name": "echo", "version": "1"}}
		case "tools/list":
			result = obj{"tools": []obj{{"name": "echo", "description": "Echoes its text.", "inputSchema": obj{"type": "object", "properties": obj{"text": obj{"type": "string"}}}}}}
		case "tools/call":
			result = obj{"content": []obj{{"type": "text", "text": "echo: " + req.Params.Arguments.Text}}, "isError": false}
		default:
			result = obj{}
		}
		b, _ := json.Marshal(obj{"jsonrpc": "2.0", "id": req.ID, "result": result})
		out.Write(append(b, '\n'))
	}
}

// buildStandin builds the stand-in into a temporary directory as name.
func buildStandin(t *testing.T, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", bin, "./standin")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in: %v\n%s", err, out)
	}
	return bin
}

// checkout is a git checkout with one commit.
func checkout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "start"},
	} {
		if out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// untracked lists what git sees in dir that was not committed.
func untracked(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=all").Output()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			files = append(files, l)
		}
	}
	return files
}

// ran is what an agent's run gave.
type ran struct {
	msgs    []*protocol.AgenticMessage
	outcome Outcome
	err     error
	exit    int
	stderr  string
}

// runAgent writes the command's files, runs it as the worker would, with
// only PATH of the test's environment, and translates its stdout. Every
// message goes through protocol.AppendJSON and back through the
// protocol's decoder.
func runAgent(t *testing.T, a EventStreamer, r Run) ran {
	t.Helper()
	c, err := a.Command(r)
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	for _, f := range c.Files {
		if !strings.HasPrefix(f.Path, r.StateDir+string(filepath.Separator)) {
			t.Fatalf("file %s is not under the state directory", f.Path)
		}
		if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.Path, f.Data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(c.Argv[0], c.Argv[1:]...)
	cmd.Dir = r.Cwd
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range c.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(c.Stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	var lines []byte
	outcome, evErr := a.Events(stdout, func(m *protocol.AgenticMessage) error {
		var err error
		lines, err = protocol.AppendJSON(lines, m)
		lines = append(lines, '\n')
		return err
	})
	_, _ = io.Copy(io.Discard, stdout)
	waitErr := cmd.Wait()
	res := ran{outcome: outcome, err: evErr, stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		res.exit = ee.ExitCode()
	} else if waitErr != nil {
		t.Fatal(waitErr)
	}
	dec := protocol.NewDecoder(bytes.NewReader(lines))
	for {
		m, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("decode the messages: %v", err)
		}
		res.msgs = append(res.msgs, m)
	}
	return res
}

// summary is a message in one line, the checkout's path as $CWD.
func summary(m *protocol.AgenticMessage, cwd string) string {
	s := string(m.Type)
	if m.IsError {
		s += "!"
	}
	if m.ToolName != nil {
		s += " " + *m.ToolName
	}
	if m.ToolInput != nil {
		s += " " + string(m.ToolInput)
	}
	for _, p := range []*string{m.Content, m.ToolOutput} {
		if p != nil {
			s += ": " + *p
		}
	}
	return strings.ReplaceAll(s, cwd, "$CWD")
}

func summaries(msgs []*protocol.AgenticMessage, cwd string) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, summary(m, cwd))
	}
	return out
}

// endToEnd is one agent's end-to-end case.
type endToEnd struct {
	agent  EventStreamer
	binary string
	api    API
	server func(t *testing.T, turns ...turn) *scripted
	base   func(s *scripted) Endpoints
	turns  []turn
	want   []string
	keyIn  func(h map[string][]string) string
}

func endToEndCases() map[string]endToEnd {
	anthropic := func(t *testing.T, turns ...turn) *scripted {
		return newScripted(t, "/anthropic/v1/messages", writeAnthropic, turns...)
	}
	responses := func(t *testing.T, turns ...turn) *scripted {
		return newScripted(t, "/v1/responses", writeResponses, turns...)
	}
	geminiAPI := func(t *testing.T, turns ...turn) *scripted {
		return newScripted(t, "/gemini/v1beta/models/scripted-model:streamGenerateContent", writeGemini, turns...)
	}
	endpoints := func(s *scripted) Endpoints {
		return Endpoints{OpenAIBase: s.srv.URL + "/v1", AnthropicBase: s.srv.URL + "/anthropic", Key: testKey}
	}
	get := func(name string) func(h map[string][]string) string {
		return func(h map[string][]string) string { return strings.Join(h[name], ",") }
	}
	return map[string]endToEnd{
		"claude-code": {
			agent: claudeCode{}, binary: "claude", api: Anthropic, server: anthropic, base: endpoints,
			turns: []turn{
				{Thinking: "The user wants hello.txt.", Text: "I'll write hello.txt.", Calls: []call{{ID: "toolu_1", Name: "Write", Args: `{"file_path":"hello.txt","content":"hello from claude\n"}`}}},
				{Calls: []call{{ID: "toolu_2", Name: "Bash", Args: `{"command":"cat hello.txt"}`}}},
				{Calls: []call{{ID: "toolu_3", Name: "mcp__echo__echo", Args: `{"text":"hi"}`}}},
				{Text: "Wrote hello.txt."},
			},
			want: []string{
				"thinking: The user wants hello.txt.",
				"thinking: I'll write hello.txt.",
				`tool_call Write {"file_path":"hello.txt","content":"hello from claude\n"}`,
				"tool_result: File created successfully at: $CWD/hello.txt",
				`tool_call Bash {"command":"cat hello.txt"}`,
				"tool_result: hello from claude",
				`tool_call mcp__echo__echo {"text":"hi"}`,
				"tool_result: echo: hi",
			},
			keyIn: get("X-Api-Key"),
		},
		"codex": {
			agent: codex{}, binary: "codex", api: OpenAI, server: responses, base: endpoints,
			turns: []turn{
				{Thinking: "The user wants hello.txt.", Text: "I'll write hello.txt.", Calls: []call{{ID: "call_1", Name: "apply_patch", Args: `{"input":"*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch"}`}}},
				{Calls: []call{{ID: "call_2", Name: "shell", Args: `{"command":["bash","-lc","cat hello.txt"]}`}}},
				{Calls: []call{{ID: "call_3", Name: "echo__echo", Args: `{"text":"hi"}`}}},
				{Text: "Wrote hello.txt."},
			},
			want: []string{
				"thinking: The user wants hello.txt.",
				"thinking: I'll write hello.txt.",
				`tool_call apply_patch {"changes":[{"path":"$CWD/hello.txt","kind":"add"}]}`,
				"tool_result: add $CWD/hello.txt",
				`tool_call shell {"command":"bash -lc 'cat hello.txt'"}`,
				"tool_result: hello from codex\n",
				`tool_call mcp__echo__echo {"text":"hi"}`,
				"tool_result: echo: hi",
			},
			keyIn: func(h map[string][]string) string {
				return strings.TrimPrefix(strings.Join(h["Authorization"], ","), "Bearer ")
			},
		},
		"gemini": {
			agent: gemini{}, binary: "gemini", api: Gemini, server: geminiAPI, base: endpoints,
			turns: []turn{
				{Thinking: "The user wants hello.txt.", Text: "I'll write hello.txt.", Calls: []call{{Name: "write_file", Args: `{"file_path":"hello.txt","content":"hello from gemini\n"}`}}},
				{Calls: []call{{Name: "run_shell_command", Args: `{"command":"cat hello.txt"}`}}},
				{Calls: []call{{Name: "mcp_echo_echo", Args: `{"text":"hi"}`}}},
				{Text: "Wrote hello.txt."},
			},
			want: []string{
				"thinking: I'll write hello.txt.",
				`tool_call write_file {"file_path":"hello.txt","content":"hello from gemini\n"}`,
				"tool_result: ",
				`tool_call run_shell_command {"command":"cat hello.txt"}`,
				"tool_result: hello from gemini\n",
				`tool_call mcp_echo_echo {"text":"hi"}`,
				"tool_result: echo: hi",
			},
			keyIn: get("X-Goog-Api-Key"),
		},
	}
}

// TestEndToEnd runs each adapter's command against the stand-in and a
// scripted model that writes a file, reads it back with the shell, calls
// an MCP tool and answers.
func TestEndToEnd(t *testing.T) {
	for name, tc := range endToEndCases() {
		t.Run(name, func(t *testing.T) {
			bin := buildStandin(t, tc.binary)
			srv := tc.server(t, tc.turns...)
			cwd, state := checkout(t), t.TempDir()
			r := Run{
				Binary: bin, Prompt: "Write hello.txt.", Cwd: cwd, Model: "scripted-model", MaxTurns: 10,
				StateDir: state, LLM: tc.base(srv), API: tc.api,
				MCP: []MCPServer{{Name: "echo", Command: []string{"env", "CLIAGENT_TEST_MCP=1", os.Args[0], "-test.run=^$"}}},
			}
			res := runAgent(t, tc.agent, r)
			if res.err != nil || res.exit != 0 {
				t.Fatalf("run: events %v, exit %d\nstderr: %s", res.err, res.exit, res.stderr)
			}
			if errs := srv.errors(); len(errs) > 0 {
				t.Errorf("the server met: %v", errs)
			}
			// Each tool call's id links it to its result.
			got := summaries(res.msgs, cwd)
			if !slices.Equal(got, tc.want) {
				t.Errorf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			var calls []string
			for _, m := range res.msgs {
				switch m.Type {
				case protocol.ToolCall:
					calls = append(calls, *m.ToolCallID)
				case protocol.ToolResult:
					if len(calls) == 0 || *m.ToolCallID != calls[len(calls)-1] || *m.ToolCallID == "" {
						t.Errorf("tool result %q follows no call of its id (calls %v)", *m.ToolCallID, calls)
					}
				}
			}
			o := res.outcome
			if o.Result != "Wrote hello.txt." || o.IsError || o.SessionID == "" {
				t.Errorf("outcome = %+v", o)
			}
			if o.Usage == nil || o.Usage.InputTokens == nil || *o.Usage.InputTokens != 4*turnIn ||
				*o.Usage.OutputTokens != 4*turnOut || *o.Usage.CacheReadTokens != 4*turnCached {
				t.Errorf("usage = %+v", o.Usage)
			}
			data, err := os.ReadFile(filepath.Join(cwd, "hello.txt"))
			if err != nil || string(data) != "hello from "+tc.binary+"\n" {
				t.Errorf("hello.txt = %q, %v", data, err)
			}
			if files := untracked(t, cwd); !slices.Equal(files, []string{"?? hello.txt"}) {
				t.Errorf("the checkout has %v; want only the model's hello.txt", files)
			}
			reqs := srv.requests()
			if len(reqs) != len(tc.turns) {
				t.Fatalf("%d requests, want %d", len(reqs), len(tc.turns))
			}
			for i, q := range reqs {
				if k := tc.keyIn(q.Header); k != testKey {
					t.Errorf("request %d carried the key %q, want the run's", i, k)
				}
				if !strings.Contains(q.Body, `"scripted-model"`) && !strings.Contains(q.Path, "scripted-model") {
					t.Errorf("request %d does not name the model", i)
				}
			}
			if !strings.Contains(reqs[2].Body, "hello from "+tc.binary) {
				t.Errorf("the shell's output did not reach the model: %s", reqs[2].Body)
			}
			if !strings.Contains(reqs[3].Body, "echo: hi") {
				t.Errorf("the MCP tool's output did not reach the model: %s", reqs[3].Body)
			}
			// The agent kept its session under the state directory.
			var kept []string
			_ = filepath.WalkDir(r.StateDir, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					kept = append(kept, p)
				}
				return nil
			})
			if len(kept) < 2 {
				t.Errorf("the state directory holds %v; want the configuration and a session file", kept)
			}
		})
	}
}

// TestEndToEndUpstreamError: an upstream refusing the key is the agent's
// failed run, with the real CLI's exit code.
func TestEndToEndUpstreamError(t *testing.T) {
	exits := map[string]int{"claude-code": 1, "codex": 1, "gemini": 401 & 0xff}
	for name, tc := range endToEndCases() {
		t.Run(name, func(t *testing.T) {
			bin := buildStandin(t, tc.binary)
			srv := tc.server(t, turn{Status: 401, Error: "invalid x-api-key"})
			cwd := checkout(t)
			res := runAgent(t, tc.agent, Run{Binary: bin, Prompt: "hi", Cwd: cwd, Model: "scripted-model", StateDir: t.TempDir(), LLM: tc.base(srv), API: tc.api})
			if res.err != nil {
				t.Fatalf("events: %v\nstderr: %s", res.err, res.stderr)
			}
			if res.exit != exits[name] {
				t.Errorf("exit %d, want %d", res.exit, exits[name])
			}
			if !res.outcome.IsError || !strings.Contains(res.outcome.Result, "401") && !strings.Contains(res.outcome.Result, "invalid x-api-key") {
				t.Errorf("outcome = %+v", res.outcome)
			}
			if files := untracked(t, cwd); len(files) > 0 {
				t.Errorf("the checkout has %v", files)
			}
		})
	}
}
