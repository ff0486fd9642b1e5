package main

// Codex CLI's `codex exec`, as of 2026 (after the chat wire's removal),
// from https://developers.openai.com/codex/noninteractive, the config
// reference, and codex-rs's exec/src/cli.rs, exec/src/exec_events.rs and
// model-provider-info/src/lib.rs. Reproduced: exec's flags (--json,
// --skip-git-repo-check, --dangerously-bypass-approvals-and-sandbox,
// -s/--sandbox, -C/--cd, -m/--model, -o/--output-last-message, the prompt
// or `-` for stdin), clap's "unexpected argument" (exit 2), the git
// repository check; $CODEX_HOME/config.toml (default ~/.codex): model,
// model_provider, [model_providers.X] base_url / env_key / wire_api (with
// "chat" refused as Codex refuses it), [mcp_servers.X] command / args /
// env; the key from env_key, sent as Bearer; streaming Responses API
// calls to {base_url}/responses; the shell and apply_patch tools (Add File
// and Delete File hunks) and MCP tools as SERVER__TOOL; the --json events
// (thread.started, turn.started, item.started / item.completed with
// agent_message, reasoning, command_execution, file_change and
// mcp_tool_call items, turn.completed with the thread's usage, error and
// turn.failed, exit 1); the session rollout under $CODEX_HOME/sessions.
// Not reproduced: the built-in providers (they would call a public API),
// retries, the sandbox itself (a read-only sandbox only refuses
// apply_patch), Update File hunks, streamable HTTP MCP servers,
// -c overrides, profiles, the human output format.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

type codexFlags struct {
	json, skipGit, bypass   bool
	sandbox, cd, model, out string
	prompt                  string
	hasPrompt               bool
}

func parseCodexFlags(args []string) (codexFlags, error) {
	var f codexFlags
	if len(args) == 0 || args[0] != "exec" {
		return f, errors.New("standin: only `codex exec` is reproduced")
	}
	args = args[1:]
	for i := 0; i < len(args); i++ {
		name, value, has := splitFlag(args[i])
		need := func() (string, error) {
			if has {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", cliMsg("error: a value is required for '%s <VALUE>' but none was supplied\n\nFor more information, try '--help'.", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "--json", "--experimental-json":
			f.json = true
		case "--skip-git-repo-check":
			f.skipGit = true
		case "--dangerously-bypass-approvals-and-sandbox", "--yolo":
			f.bypass = true
		case "--full-auto":
			fmt.Fprintln(os.Stderr, "warning: `--full-auto` is deprecated; use `--sandbox workspace-write` instead.")
			f.sandbox = "workspace-write"
		case "-s", "--sandbox":
			f.sandbox, err = need()
		case "-C", "--cd":
			f.cd, err = need()
		case "-m", "--model":
			f.model, err = need()
		case "-o", "--output-last-message":
			f.out, err = need()
		case "--color":
			_, err = need()
		default:
			if strings.HasPrefix(name, "-") && name != "-" {
				return f, cliMsg("error: unexpected argument '%s' found\n\nUsage: codex exec [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.", args[i])
			}
			if f.hasPrompt {
				return f, cliMsg("error: unexpected argument '%s' found\n\nUsage: codex exec [OPTIONS] [PROMPT]\n\nFor more information, try '--help'.", args[i])
			}
			f.prompt, f.hasPrompt = args[i], true
		}
		if err != nil {
			return f, err
		}
	}
	return f, nil
}

// codexConfig is the part of config.toml the stand-in reads.
type codexConfig struct {
	Model          string `toml:"model"`
	ModelProvider  string `toml:"model_provider"`
	ModelProviders map[string]struct {
		Name    string `toml:"name"`
		BaseURL string `toml:"base_url"`
		EnvKey  string `toml:"env_key"`
		WireAPI string `toml:"wire_api"`
	} `toml:"model_providers"`
	MCPServers map[string]struct {
		Command string            `toml:"command"`
		Args    []string          `toml:"args"`
		Env     map[string]string `toml:"env"`
		URL     string            `toml:"url"`
	} `toml:"mcp_servers"`
}

// codexItem is a thread item of the --json events, its fields in the
// order Codex writes them.
type codexItem struct {
	ID               string          `json:"id"`
	Type             string          `json:"type"`
	Text             *string         `json:"text,omitempty"`
	Command          *string         `json:"command,omitempty"`
	AggregatedOutput *string         `json:"aggregated_output,omitempty"`
	ExitCode         *int            `json:"exit_code,omitempty"`
	Changes          []codexChange   `json:"changes,omitempty"`
	Server           string          `json:"server,omitempty"`
	Tool             string          `json:"tool,omitempty"`
	Arguments        json.RawMessage `json:"arguments,omitempty"`
	Result           *codexMCPResult `json:"result,omitempty"`
	Error            *codexMessage   `json:"error,omitempty"`
	Status           string          `json:"status,omitempty"`
}

type codexChange struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
}

type codexMCPResult struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structured_content"`
}

type codexMessage struct {
	Message string `json:"message"`
}

type codexUsage struct {
	InputTokens       int64 `json:"input_tokens"`
	CachedInputTokens int64 `json:"cached_input_tokens"`
	OutputTokens      int64 `json:"output_tokens"`
}

// codexSession is one exec run.
type codexSession struct {
	out     *out
	cwd     string
	sandbox string
	mcp     mcpSet
	items   int
	usage   codexUsage
}

func (s *codexSession) itemID() string {
	id := fmt.Sprintf("item_%d", s.items)
	s.items++
	return id
}

func codex(args []string) int {
	f, err := parseCodexFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if !f.json {
		fmt.Fprintln(os.Stderr, "standin: codex exec's human output is not reproduced: use --json")
		return 1
	}
	cwd, _ := os.Getwd()
	if f.cd != "" {
		cwd = f.cd
		if !filepath.IsAbs(cwd) {
			cwd, _ = filepath.Abs(cwd)
		}
	}
	if !f.skipGit {
		if _, code := runShell(cwd, "git rev-parse --show-toplevel"); code != 0 {
			fmt.Fprintln(os.Stderr, "Not inside a trusted directory and --skip-git-repo-check was not specified.")
			return 1
		}
	}
	home := os.Getenv("CODEX_HOME")
	if home == "" {
		h, _ := os.UserHomeDir()
		home = filepath.Join(h, ".codex")
	}
	var cfg codexConfig
	if data, err := os.ReadFile(filepath.Join(home, "config.toml")); err == nil {
		if _, err := toml.Decode(string(data), &cfg); err != nil {
			fmt.Fprintf(os.Stderr, "Error loading config.toml: %v\n", err)
			return 1
		}
	}
	if cfg.ModelProvider == "" || cfg.ModelProvider == "openai" {
		fmt.Fprintln(os.Stderr, "standin: the built-in openai provider is not reproduced (it would call OpenAI's API): set model_provider")
		return 1
	}
	prov, ok := cfg.ModelProviders[cfg.ModelProvider]
	if !ok {
		fmt.Fprintf(os.Stderr, "Error loading config.toml: Model provider `%s` not found\n", cfg.ModelProvider)
		return 1
	}
	switch prov.WireAPI {
	case "", "responses":
	case "chat":
		fmt.Fprintln(os.Stderr, "Error loading config.toml: `wire_api = \"chat\"` is no longer supported.\nHow to fix: set `wire_api = \"responses\"` in your provider config.\nMore info: https://github.com/openai/codex/discussions/7782")
		return 1
	default:
		fmt.Fprintf(os.Stderr, "Error loading config.toml: unknown variant `%s`, expected `responses`\n", prov.WireAPI)
		return 1
	}
	if prov.BaseURL == "" {
		fmt.Fprintln(os.Stderr, "standin: the provider has no base_url: the stand-in never calls OpenAI's API")
		return 1
	}
	prompt := f.prompt
	if !f.hasPrompt || prompt == "-" {
		prompt = readStdin()
	}
	if strings.TrimSpace(prompt) == "" {
		fmt.Fprintln(os.Stderr, "No prompt provided via stdin.")
		return 1
	}
	model := f.model
	if model == "" {
		model = cfg.Model
	}
	s := &codexSession{out: newOut(), cwd: cwd, sandbox: f.sandbox}
	if f.bypass {
		s.sandbox = "danger-full-access"
	} else if s.sandbox == "" {
		s.sandbox = "read-only"
	}
	for name, sv := range cfg.MCPServers {
		if sv.Command == "" {
			fmt.Fprintf(os.Stderr, "standin: MCP server %s: only stdio servers are reproduced\n", name)
			continue
		}
		m, err := startMCP(name, sv.Command, sv.Args, sv.Env, cwd)
		if err != nil {
			fmt.Fprintln(os.Stderr, "standin:", err)
			continue
		}
		s.mcp = append(s.mcp, m)
	}
	defer s.mcp.close()

	thread := newUUID()
	now := time.Now().UTC()
	defer s.out.saveSession(filepath.Join(home, "sessions", now.Format("2006/01/02"), "rollout-"+now.Format("2006-01-02T15-04-05")+"-"+thread+".jsonl"))
	s.out.event(map[string]string{"type": "thread.started", "thread_id": thread})
	s.out.event(map[string]string{"type": "turn.started"})
	fail := func(msg string) int {
		s.out.event(map[string]string{"type": "error", "message": msg})
		s.out.event(map[string]any{"type": "turn.failed", "error": codexMessage{msg}})
		return 1
	}
	key := ""
	if prov.EnvKey != "" {
		key = strings.TrimSpace(os.Getenv(prov.EnvKey))
		if key == "" {
			return fail(fmt.Sprintf("Missing environment variable: `%s`.", prov.EnvKey))
		}
	}
	header := http.Header{}
	if key != "" {
		header.Set("Authorization", "Bearer "+key)
	}
	url := strings.TrimSuffix(prov.BaseURL, "/") + "/responses"
	input := []json.RawMessage{mustMarshal(map[string]any{"type": "message", "role": "user", "content": []map[string]string{{"type": "input_text", "text": prompt}}})}
	final := ""
	for {
		items, err := s.respond(url, header, map[string]any{
			"model": model, "instructions": "You are Codex, a coding agent. Working directory: " + cwd,
			"input": input, "tools": s.toolDefs(), "tool_choice": "auto", "parallel_tool_calls": false,
			"store": false, "stream": true,
		})
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				return fail(fmt.Sprintf("unexpected status %s: %s", he.text, he.body))
			}
			return fail(err.Error())
		}
		calls := 0
		for _, raw := range items {
			input = append(input, raw)
			var it struct {
				Type      string `json:"type"`
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
				CallID    string `json:"call_id"`
				Content   []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
				Summary []struct {
					Text string `json:"text"`
				} `json:"summary"`
			}
			if err := json.Unmarshal(raw, &it); err != nil {
				return fail("malformed output item: " + err.Error())
			}
			switch it.Type {
			case "message":
				var texts []string
				for _, c := range it.Content {
					if c.Type == "output_text" {
						texts = append(texts, c.Text)
					}
				}
				text := strings.Join(texts, "")
				final = text
				s.out.event(map[string]any{"type": "item.completed", "item": codexItem{ID: s.itemID(), Type: "agent_message", Text: &text}})
			case "reasoning":
				var texts []string
				for _, p := range it.Summary {
					texts = append(texts, p.Text)
				}
				if text := strings.Join(texts, "\n"); strings.TrimSpace(text) != "" {
					s.out.event(map[string]any{"type": "item.completed", "item": codexItem{ID: s.itemID(), Type: "reasoning", Text: &text}})
				}
			case "function_call":
				calls++
				output := s.runTool(it.Name, it.Arguments)
				input = append(input, mustMarshal(map[string]string{"type": "function_call_output", "call_id": it.CallID, "output": output}))
			}
		}
		if calls == 0 {
			break
		}
	}
	s.out.event(map[string]any{"type": "turn.completed", "usage": s.usage})
	if f.out != "" {
		_ = os.WriteFile(f.out, []byte(final), 0o644)
	}
	return 0
}

// respond makes one streaming Responses request: its output items.
func (s *codexSession) respond(url string, header http.Header, body map[string]any) ([]json.RawMessage, error) {
	resp, err := post(context.Background(), url, header, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var items []json.RawMessage
	completed := false
	err = readSSE(resp.Body, func(_ string, data []byte) error {
		var ev struct {
			Type     string          `json:"type"`
			Item     json.RawMessage `json:"item"`
			Message  string          `json:"message"`
			Response struct {
				Error *codexMessage `json:"error"`
				Usage *struct {
					InputTokens        int64 `json:"input_tokens"`
					InputTokensDetails struct {
						CachedTokens int64 `json:"cached_tokens"`
					} `json:"input_tokens_details"`
					OutputTokens int64 `json:"output_tokens"`
				} `json:"usage"`
			} `json:"response"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("stream event: %w", err)
		}
		switch ev.Type {
		case "response.output_item.done":
			items = append(items, ev.Item)
		case "response.completed":
			completed = true
			if u := ev.Response.Usage; u != nil {
				s.usage.InputTokens += u.InputTokens
				s.usage.CachedInputTokens += u.InputTokensDetails.CachedTokens
				s.usage.OutputTokens += u.OutputTokens
			}
		case "response.failed":
			if ev.Response.Error != nil {
				return errors.New(ev.Response.Error.Message)
			}
			return errors.New("response.failed")
		case "error":
			return errors.New(ev.Message)
		}
		return nil
	})
	if err == nil && !completed {
		err = errors.New("stream disconnected before completion: stream closed before response.completed")
	}
	return items, err
}

// toolDefs are the function tools offered to the model.
func (s *codexSession) toolDefs() []map[string]any {
	defs := []map[string]any{{
		"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.", "strict": false,
		"parameters": json.RawMessage(`{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},"workdir":{"type":"string"},"timeout_ms":{"type":"number"}},"required":["command"],"additionalProperties":false}`),
	}, {
		"type": "function", "name": "apply_patch", "description": "Use the `apply_patch` tool to edit files.", "strict": false,
		"parameters": json.RawMessage(`{"type":"object","properties":{"input":{"type":"string"}},"required":["input"],"additionalProperties":false}`),
	}}
	for _, m := range s.mcp {
		for _, t := range m.tools {
			defs = append(defs, map[string]any{"type": "function", "name": m.name + "__" + t.Name, "description": t.Description, "strict": false, "parameters": t.InputSchema})
		}
	}
	return defs
}

// runTool runs a function call, writing its items: the output for the
// model.
func (s *codexSession) runTool(name, arguments string) string {
	switch name {
	case "shell":
		var in struct {
			Command []string `json:"command"`
			Workdir string   `json:"workdir"`
		}
		if err := json.Unmarshal([]byte(arguments), &in); err != nil || len(in.Command) == 0 {
			return "failed to parse function arguments: missing field `command`"
		}
		dir := s.cwd
		if in.Workdir != "" {
			dir = in.Workdir
			if !filepath.IsAbs(dir) {
				dir = filepath.Join(s.cwd, dir)
			}
		}
		command := shellJoin(in.Command)
		id := s.itemID()
		empty := ""
		s.out.event(map[string]any{"type": "item.started", "item": codexItem{ID: id, Type: "command_execution", Command: &command, AggregatedOutput: &empty, Status: "in_progress"}})
		output, code := runArgv(dir, in.Command)
		status := "completed"
		if code != 0 {
			status = "failed"
		}
		s.out.event(map[string]any{"type": "item.completed", "item": codexItem{ID: id, Type: "command_execution", Command: &command, AggregatedOutput: &output, ExitCode: &code, Status: status}})
		return string(mustMarshal(map[string]any{"output": output, "metadata": map[string]any{"exit_code": code, "duration_seconds": 0.0}}))
	case "apply_patch":
		var in struct {
			Input string `json:"input"`
		}
		if err := json.Unmarshal([]byte(arguments), &in); err != nil {
			return "failed to parse function arguments: missing field `input`"
		}
		changes, err := s.applyPatch(in.Input)
		status := "completed"
		if err != nil {
			status = "failed"
		}
		if len(changes) > 0 || err == nil {
			s.out.event(map[string]any{"type": "item.completed", "item": codexItem{ID: s.itemID(), Type: "file_change", Changes: changes, Status: status}})
		}
		if err != nil {
			return "apply_patch verification failed: " + err.Error()
		}
		var b strings.Builder
		b.WriteString("Success. Updated the following files:\n")
		for _, c := range changes {
			b.WriteString(strings.ToUpper(c.Kind[:1]) + " " + c.Path + "\n")
		}
		return b.String()
	}
	if m, tool := s.mcp.find(name, "", "__"); m != nil {
		id := s.itemID()
		args := json.RawMessage(arguments)
		if !json.Valid(args) {
			args = json.RawMessage("{}")
		}
		s.out.event(map[string]any{"type": "item.started", "item": codexItem{ID: id, Type: "mcp_tool_call", Server: m.name, Tool: tool, Arguments: args, Status: "in_progress"}})
		content, failed, err := m.callRaw(tool, args)
		it := codexItem{ID: id, Type: "mcp_tool_call", Server: m.name, Tool: tool, Arguments: args, Status: "completed"}
		var output string
		if err != nil {
			it.Status, it.Error, output = "failed", &codexMessage{err.Error()}, err.Error()
		} else {
			it.Result = &codexMCPResult{Content: content, StructuredContent: json.RawMessage("null")}
			if failed {
				it.Status = "failed"
			}
			output = string(mustMarshal(content))
		}
		s.out.event(map[string]any{"type": "item.completed", "item": it})
		return output
	}
	return "unsupported call: " + name
}

// applyPatch applies a patch's Add File and Delete File hunks.
func (s *codexSession) applyPatch(patch string) ([]codexChange, error) {
	if s.sandbox == "read-only" {
		return nil, errors.New("writing is blocked by the read-only sandbox")
	}
	lines := strings.Split(strings.TrimSpace(patch), "\n")
	if len(lines) < 2 || strings.TrimSpace(lines[0]) != "*** Begin Patch" || strings.TrimSpace(lines[len(lines)-1]) != "*** End Patch" {
		return nil, errors.New("invalid patch: The first line of the patch must be '*** Begin Patch' and the last '*** End Patch'")
	}
	var changes []codexChange
	for i := 1; i < len(lines)-1; i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "*** Add File: "):
			path := strings.TrimPrefix(line, "*** Add File: ")
			var content strings.Builder
			for i+1 < len(lines)-1 && strings.HasPrefix(lines[i+1], "+") {
				i++
				content.WriteString(strings.TrimPrefix(lines[i], "+") + "\n")
			}
			if _, err := writeFile(s.cwd, path, content.String()); err != nil {
				return changes, err
			}
			changes = append(changes, codexChange{Path: filepath.Join(s.cwd, path), Kind: "add"})
		case strings.HasPrefix(line, "*** Delete File: "):
			path := strings.TrimPrefix(line, "*** Delete File: ")
			if err := os.Remove(filepath.Join(s.cwd, path)); err != nil {
				return changes, err
			}
			changes = append(changes, codexChange{Path: filepath.Join(s.cwd, path), Kind: "delete"})
		default:
			return changes, fmt.Errorf("standin: this hunk is not reproduced: %q", line)
		}
	}
	return changes, nil
}

// runArgv runs argv in dir: its combined output and exit code.
func runArgv(dir string, argv []string) (string, int) {
	if len(argv) == 3 && (argv[0] == "bash" || argv[0] == "sh") && (argv[1] == "-lc" || argv[1] == "-c") {
		return runShell(dir, argv[2])
	}
	return runShell(dir, shellJoin(argv))
}

// shellJoin quotes argv for a shell, as Codex shows commands.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
