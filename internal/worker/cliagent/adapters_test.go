package cliagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/amelia-sandbox/amelia/core/protocol"
)

// testRun is a run with every field set, an MCP server of each kind.
func testRun(api API) Run {
	return Run{
		Binary: "/opt/agent/bin/agent", Prompt: "Fix the failing test.", Cwd: "/workspace/repo",
		Model: "model-x", MaxTurns: 7, StateDir: "/run/amelia/state", API: api,
		LLM: Endpoints{OpenAIBase: "http://127.0.0.1:4000/v1", AnthropicBase: "http://127.0.0.1:4000/anthropic", Key: testKey},
		MCP: []MCPServer{
			{Name: "docs", Command: []string{"amelia-worker", "mcp", "docs"}},
			{Name: "tracker", URL: "http://127.0.0.1:4000/mcp/tracker", Headers: map[string]string{"X-Amelia-Mcp": "tracker"}},
		},
	}
}

func TestCommand(t *testing.T) {
	tests := []struct {
		name    string
		adapter Adapter
		api     API
		argv    []string
		env     map[string]string
		keyEnv  string
		stdin   string
		check   func(t *testing.T, files map[string][]byte)
	}{{
		name: "claude-code", adapter: claudeCode{}, api: Anthropic,
		argv: []string{"/opt/agent/bin/agent", "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions",
			"--model", "model-x", "--max-turns", "7", "--mcp-config", "/run/amelia/state/claude/mcp.json", "--strict-mcp-config"},
		env: map[string]string{
			"HOME": "/run/amelia/state/home", "CLAUDE_CONFIG_DIR": "/run/amelia/state/claude",
			"ANTHROPIC_BASE_URL": "http://127.0.0.1:4000/anthropic", "ANTHROPIC_API_KEY": testKey,
			"DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "IS_SANDBOX": "1",
		},
		keyEnv: "ANTHROPIC_API_KEY", stdin: "Fix the failing test.",
		check: func(t *testing.T, files map[string][]byte) {
			var cfg struct {
				MCPServers map[string]struct {
					Type, Command, URL string
					Args               []string
					Headers            map[string]string
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal(files["/run/amelia/state/claude/mcp.json"], &cfg); err != nil {
				t.Fatal(err)
			}
			d, tr := cfg.MCPServers["docs"], cfg.MCPServers["tracker"]
			if d.Type != "stdio" || d.Command != "amelia-worker" || !slices.Equal(d.Args, []string{"mcp", "docs"}) ||
				tr.Type != "http" || tr.URL != "http://127.0.0.1:4000/mcp/tracker" || tr.Headers["X-Amelia-Mcp"] != "tracker" {
				t.Errorf("mcp config = %+v", cfg)
			}
		},
	}, {
		name: "codex", adapter: codex{}, api: OpenAI,
		argv: []string{"/opt/agent/bin/agent", "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
			"-C", "/workspace/repo", "-m", "model-x", "-"},
		env:    map[string]string{"HOME": "/run/amelia/state/home", "CODEX_HOME": "/run/amelia/state/codex", "AMELIA_CODEX_KEY": testKey},
		keyEnv: "AMELIA_CODEX_KEY", stdin: "Fix the failing test.",
		check: func(t *testing.T, files map[string][]byte) {
			var cfg struct {
				Model          string `toml:"model"`
				ModelProvider  string `toml:"model_provider"`
				CheckUpdate    *bool  `toml:"check_for_update_on_startup"`
				ModelProviders map[string]struct {
					Name    string `toml:"name"`
					BaseURL string `toml:"base_url"`
					EnvKey  string `toml:"env_key"`
					WireAPI string `toml:"wire_api"`
				} `toml:"model_providers"`
				MCPServers map[string]struct {
					Command     string            `toml:"command"`
					Args        []string          `toml:"args"`
					URL         string            `toml:"url"`
					HTTPHeaders map[string]string `toml:"http_headers"`
				} `toml:"mcp_servers"`
			}
			md, err := toml.Decode(string(files["/run/amelia/state/codex/config.toml"]), &cfg)
			if err != nil {
				t.Fatal(err)
			}
			if u := md.Undecoded(); len(u) > 0 {
				t.Errorf("config.toml has keys the test does not know: %v", u)
			}
			p := cfg.ModelProviders[cfg.ModelProvider]
			if cfg.Model != "model-x" || cfg.CheckUpdate == nil || *cfg.CheckUpdate ||
				p.BaseURL != "http://127.0.0.1:4000/v1" || p.EnvKey != "AMELIA_CODEX_KEY" || p.WireAPI != "responses" {
				t.Errorf("config = %+v", cfg)
			}
			d, tr := cfg.MCPServers["docs"], cfg.MCPServers["tracker"]
			if d.Command != "amelia-worker" || !slices.Equal(d.Args, []string{"mcp", "docs"}) ||
				tr.URL != "http://127.0.0.1:4000/mcp/tracker" || tr.HTTPHeaders["X-Amelia-Mcp"] != "tracker" {
				t.Errorf("mcp servers = %+v", cfg.MCPServers)
			}
		},
	}, {
		name: "gemini", adapter: gemini{}, api: Gemini,
		argv: []string{"/opt/agent/bin/agent", "--output-format", "stream-json", "--yolo", "-m", "model-x", "-p", "Fix the failing test."},
		env: map[string]string{
			"HOME": "/run/amelia/state/home", "GEMINI_CLI_HOME": "/run/amelia/state/gemini",
			"GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:4000/gemini", "GEMINI_API_KEY": testKey,
		},
		keyEnv: "GEMINI_API_KEY",
		check: func(t *testing.T, files map[string][]byte) {
			var cfg struct {
				General struct {
					EnableAutoUpdate *bool `json:"enableAutoUpdate"`
				} `json:"general"`
				Privacy struct {
					UsageStatisticsEnabled *bool `json:"usageStatisticsEnabled"`
				} `json:"privacy"`
				Model struct {
					MaxSessionTurns int `json:"maxSessionTurns"`
				} `json:"model"`
				MCPServers map[string]struct {
					Command, HTTPURL string
					Args             []string
					Headers          map[string]string
					Trust            bool
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal(files["/run/amelia/state/gemini/.gemini/settings.json"], &cfg); err != nil {
				t.Fatal(err)
			}
			if cfg.General.EnableAutoUpdate == nil || *cfg.General.EnableAutoUpdate || cfg.Privacy.UsageStatisticsEnabled == nil ||
				*cfg.Privacy.UsageStatisticsEnabled || cfg.Model.MaxSessionTurns != 7 {
				t.Errorf("settings = %+v", cfg)
			}
			d, tr := cfg.MCPServers["docs"], cfg.MCPServers["tracker"]
			if d.Command != "amelia-worker" || !slices.Equal(d.Args, []string{"mcp", "docs"}) || !d.Trust ||
				tr.HTTPURL != "http://127.0.0.1:4000/mcp/tracker" || tr.Headers["X-Amelia-Mcp"] != "tracker" {
				t.Errorf("mcp servers = %+v", cfg.MCPServers)
			}
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := testRun(tc.api)
			c, err := tc.adapter.Command(r)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Argv, tc.argv) {
				t.Errorf("argv = %q\nwant %q", c.Argv, tc.argv)
			}
			if len(c.Env) != len(tc.env) {
				t.Errorf("env = %v\nwant %v", c.Env, tc.env)
			}
			for k, v := range tc.env {
				if c.Env[k] != v {
					t.Errorf("env %s = %q, want %q", k, c.Env[k], v)
				}
			}
			if c.Stdin != tc.stdin {
				t.Errorf("stdin = %q, want %q", c.Stdin, tc.stdin)
			}
			// The key is in its variable and nowhere else.
			for k, v := range c.Env {
				if strings.Contains(v, testKey) != (k == tc.keyEnv) {
					t.Errorf("env %s = %q: the key belongs in %s only", k, v, tc.keyEnv)
				}
			}
			if strings.Contains(strings.Join(c.Argv, " "), testKey) {
				t.Error("the key is on the command line")
			}
			files := map[string][]byte{}
			for _, f := range c.Files {
				if bytes.Contains(f.Data, []byte(testKey)) {
					t.Errorf("the key is in %s", f.Path)
				}
				if !strings.HasPrefix(f.Path, r.StateDir+"/") || strings.HasPrefix(f.Path, r.Cwd+"/") {
					t.Errorf("file %s is not under the state directory", f.Path)
				}
				if f.Mode != 0 && f.Mode&0o077 != 0 {
					t.Errorf("file %s is mode %o", f.Path, f.Mode)
				}
				files[f.Path] = f.Data
			}
			for k, v := range c.Env {
				if strings.HasPrefix(v, r.Cwd) {
					t.Errorf("env %s = %q points into the checkout", k, v)
				}
			}
			tc.check(t, files)
			if a, err := Lookup(tc.name); err != nil || a.Name() != tc.name {
				t.Errorf("Lookup(%q) = %v, %v", tc.name, a, err)
			}
		})
	}
}

func TestCommandRefuses(t *testing.T) {
	long := testRun(Gemini)
	long.Prompt = strings.Repeat("x", maxArgPrompt+1)
	noBridge := testRun(Anthropic)
	noBridge.MCP = []MCPServer{{Name: "bare"}}
	tests := []struct {
		name    string
		adapter Adapter
		run     Run
		want    string
	}{
		{"claude-code on openai", claudeCode{}, testRun(OpenAI), "speaks only the anthropic API"},
		{"codex on anthropic", codex{}, testRun(Anthropic), "speaks the openai API"},
		{"gemini on openai", gemini{}, testRun(OpenAI), "speaks only the gemini API"},
		{"gemini's long prompt", gemini{}, long, "shorten it"},
		{"an MCP server with no way in", claudeCode{}, noBridge, "neither a bridge command nor a URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.adapter.Command(tc.run)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// translate runs Events on a stream: the messages, each through
// protocol.AppendJSON and the protocol's decoder, and the Outcome.
func translate(t *testing.T, a EventStreamer, stream []byte) ([]*protocol.AgenticMessage, Outcome, error) {
	t.Helper()
	var lines []byte
	o, err := a.Events(bytes.NewReader(stream), func(m *protocol.AgenticMessage) error {
		var err error
		if lines, err = protocol.AppendJSON(lines, m); err != nil {
			return err
		}
		lines = append(lines, '\n')
		return nil
	})
	var msgs []*protocol.AgenticMessage
	dec := protocol.NewDecoder(bytes.NewReader(lines))
	for {
		m, derr := dec.Decode()
		if derr != nil {
			break
		}
		msgs = append(msgs, m)
	}
	if got := bytes.Count(lines, []byte("\n")); got != len(msgs) {
		t.Fatalf("%d lines written, %d decoded", got, len(msgs))
	}
	return msgs, o, err
}

func TestEventsSamples(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	f64 := func(v float64) *float64 { return &v }
	str := func(s string) *string { return &s }
	tests := []struct {
		file    string
		adapter EventStreamer
		want    []string
		outcome Outcome
	}{{
		file: "claude-code.jsonl", adapter: claudeCode{},
		want: []string{
			"thinking: The test fails on an off-by-one.",
			"thinking: Let me run the tests first.",
			`tool_call Bash {"command":"go test ./...","description":"Run the tests"}`,
			"tool_result!: --- FAIL: TestSum (0.00s)\nFAIL",
			`tool_call Edit {"file_path":"/workspace/repo/sum.go","old_string":"i <= len(xs)","new_string":"i < len(xs)"}`,
			"tool_result: The file /workspace/repo/sum.go has been updated.",
			`tool_call mcp__docs__search {"query":"range loops"}`,
			"tool_result: Use for i := range xs.\n[image]",
		},
		outcome: Outcome{Result: "Fixed the off-by-one in Sum; the tests pass.", SessionID: "3f1c6a52-8a52-4f0e-9d0c-6a0f4b1b2c11",
			Usage: &protocol.DriverUsage{InputTokens: i64(22), OutputTokens: i64(612), CacheReadTokens: i64(16100), CacheCreationTokens: i64(5640),
				CostUSD: f64(0.0421575), DurationMs: i64(18235), NumTurns: i64(7), Model: str("claude-sonnet-4-5-20250929")}},
	}, {
		file: "codex.jsonl", adapter: codex{},
		want: []string{
			"thinking: **Finding the failing test**",
			`tool_call shell {"command":"bash -lc 'go test ./...'"}`,
			"tool_result!: --- FAIL: TestSum (0.00s)\nFAIL\n",
			`tool_call apply_patch {"changes":[{"path":"/workspace/repo/sum.go","kind":"update"}]}`,
			"tool_result: update /workspace/repo/sum.go",
			`tool_call mcp__docs__search {"query":"range loops"}`,
			"tool_result: Use for i := range xs.",
			`tool_call shell {"command":"bash -lc 'go test ./...'"}`,
			"tool_result: ok  \texample.com/sum\t0.01s\n",
			"thinking: - [x] Fix Sum\n- [x] Run the tests",
		},
		outcome: Outcome{Result: "Fixed the off-by-one in Sum; the tests pass.", SessionID: "0199a213-81c0-7800-8aa1-bbab2a035a53",
			Usage: &protocol.DriverUsage{InputTokens: i64(24763), OutputTokens: i64(122), CacheReadTokens: i64(24448)}},
	}, {
		file: "gemini.jsonl", adapter: gemini{},
		want: []string{
			"thinking: Let me run the tests.",
			`tool_call run_shell_command {"command":"go test ./...","description":"Run the tests"}`,
			"tool_result: --- FAIL: TestSum (0.00s)\nFAIL",
			`tool_call replace {"file_path":"/workspace/repo/sum.go","old_string":"i <= len(xs)","new_string":"i < len(xs)"}`,
			"tool_result: ",
			`tool_call read_file {"absolute_path":"/workspace/repo/missing.go"}`,
			"tool_result!: File not found: /workspace/repo/missing.go",
		},
		outcome: Outcome{Result: "Fixed the off-by-one in Sum; the tests pass.", SessionID: "c25acda3-b0b9-4b1e-a2b4-7e3f0c4d5e6f",
			Usage: &protocol.DriverUsage{InputTokens: i64(12800), OutputTokens: i64(210), CacheReadTokens: i64(8000), DurationMs: i64(5200), Model: str("gemini-2.5-pro")}},
	}}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			stream, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			msgs, o, err := translate(t, tc.adapter, stream)
			if err != nil {
				t.Fatal(err)
			}
			if got := summaries(msgs, "\x00"); !slices.Equal(got, tc.want) {
				t.Errorf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			gotJSON, _ := json.Marshal(o.Usage)
			wantJSON, _ := json.Marshal(tc.outcome.Usage)
			if o.Result != tc.outcome.Result || o.IsError != tc.outcome.IsError || o.SessionID != tc.outcome.SessionID || !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("outcome = %+v %s\nwant %+v %s", o, gotJSON, tc.outcome, wantJSON)
			}
		})
	}
}

// TestEventsFailures: how each agent says its run failed, and streams
// that end too soon.
func TestEventsFailures(t *testing.T) {
	tests := []struct {
		name    string
		adapter EventStreamer
		stream  string
		result  string // the failed Outcome's result; "" expects an error
		msgs    []string
	}{{
		name: "claude-code api error", adapter: claudeCode{},
		stream: `{"type":"system","subtype":"init","session_id":"s1","model":"m"}
{"type":"assistant","message":{"id":"x","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"API Error: 401 {\"error\":{\"message\":\"invalid x-api-key\"}}"}]},"session_id":"s1"}
{"type":"result","subtype":"success","is_error":true,"result":"API Error: 401 {\"error\":{\"message\":\"invalid x-api-key\"}}","session_id":"s1","num_turns":1,"total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0}}`,
		result: `API Error: 401 {"error":{"message":"invalid x-api-key"}}`,
	}, {
		name: "claude-code max turns", adapter: claudeCode{},
		stream: `{"type":"assistant","message":{"content":[{"type":"text","text":"Still working."}]},"session_id":"s1"}
{"type":"result","subtype":"error_max_turns","is_error":false,"session_id":"s1","num_turns":3,"total_cost_usd":0.01,"usage":{"input_tokens":9,"output_tokens":9},"errors":["Reached maximum number of turns (3)"]}`,
		result: "Reached maximum number of turns (3)", msgs: []string{"thinking: Still working."},
	}, {
		name: "claude-code without its result", adapter: claudeCode{},
		stream: `{"type":"system","subtype":"init","session_id":"s1","model":"m"}`,
	}, {
		name: "codex turn failed", adapter: codex{},
		stream: `{"type":"thread.started","thread_id":"t1"}
{"type":"turn.started"}
{"type":"error","message":"unexpected status 401 Unauthorized: invalid key"}
{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: invalid key"}}`,
		result: "unexpected status 401 Unauthorized: invalid key",
	}, {
		name: "codex error only", adapter: codex{},
		stream: `{"type":"thread.started","thread_id":"t1"}
{"type":"error","message":"stream disconnected before completion"}`,
		result: "stream disconnected before completion",
	}, {
		name: "codex config error: nothing on stdout", adapter: codex{}, stream: "",
	}, {
		name: "gemini api error", adapter: gemini{},
		stream: `{"type":"init","session_id":"g1","model":"m"}
{"type":"result","status":"error","error":{"type":"ApiError","message":"[API Error: API key not valid.]"},"stats":{"input_tokens":0,"output_tokens":0,"cached":0,"duration_ms":0}}`,
		result: "[API Error: API key not valid.]",
	}, {
		name: "gemini turn limit", adapter: gemini{},
		stream: `{"type":"init","session_id":"g1","model":"m"}
{"type":"message","role":"assistant","content":"Working on it.","delta":true}
{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"Reached max session turns for this session."}}`,
		result: "Reached max session turns for this session.", msgs: []string{"thinking: Working on it."},
	}, {
		name: "a broken line", adapter: gemini{}, stream: `{"type":"init",`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msgs, o, err := translate(t, tc.adapter, []byte(tc.stream))
			if tc.result == "" {
				if err == nil {
					t.Fatalf("no error; outcome %+v", o)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !o.IsError || o.Result != tc.result {
				t.Errorf("outcome = %+v, want a failure saying %q", o, tc.result)
			}
			if got := summaries(msgs, "\x00"); !slices.Equal(got, tc.msgs) {
				t.Errorf("messages = %q, want %q", got, tc.msgs)
			}
		})
	}
}

// TestStandinRefuses: the stand-in fails as the real CLIs do on what the
// adapters must get right.
func TestStandinRefuses(t *testing.T) {
	bin := buildStandin(t, "standin")
	home := t.TempDir()
	chatConfig := filepath.Join(home, "codex")
	if err := os.MkdirAll(chatConfig, 0o700); err != nil {
		t.Fatal(err)
	}
	err := os.WriteFile(filepath.Join(chatConfig, "config.toml"), []byte("model_provider = \"p\"\n[model_providers.p]\nbase_url = \"http://127.0.0.1:9/v1\"\nwire_api = \"chat\"\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		env    []string
		exit   int
		stderr string
	}{
		{"claude unknown option", []string{"claude", "-p", "--bogus"}, nil, 1, "error: unknown option '--bogus'"},
		{"claude stream-json without verbose", []string{"claude", "-p", "--output-format", "stream-json", "hi"}, nil, 1, "requires --verbose"},
		{"codex unknown argument", []string{"codex", "exec", "--bogus"}, nil, 2, "error: unexpected argument '--bogus' found"},
		{"codex chat wire", []string{"codex", "exec", "--json", "--skip-git-repo-check", "hi"}, []string{"CODEX_HOME=" + chatConfig}, 1, "`wire_api = \"chat\"` is no longer supported"},
		{"gemini unknown argument", []string{"gemini", "-p", "hi", "--bogus"}, nil, 1, "Unknown argument: bogus"},
		{"gemini without auth", []string{"gemini", "-p", "hi", "--output-format", "stream-json"}, nil, 41, "Please set an Auth method"},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct {
			name   string
			args   []string
			env    []string
			exit   int
			stderr string
		}{"claude bypassing permissions as root", []string{"claude", "-p", "--dangerously-skip-permissions", "hi"}, nil, 1, "cannot be used with root/sudo privileges"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			cmd.Dir = t.TempDir()
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.exit {
				t.Errorf("exit: %v, want %d", err, tc.exit)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr = %q, want %q", stderr.String(), tc.stderr)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout = %q", stdout.String())
			}
		})
	}
}
