package main

// Claude Code in print mode, as documented at
// https://code.claude.com/docs/en/headless, /cli-reference, /env-vars and
// the Agent SDK's message types (/agent-sdk/typescript). Reproduced: -p
// with --output-format stream-json (which needs --verbose), text and json;
// --model, --max-turns, --mcp-config (files or JSON strings, variadic as
// commander reads it), --strict-mcp-config, --dangerously-skip-permissions,
// --permission-mode; the prompt as an argument or on stdin; commander's
// "error: unknown option" (exit 1); the refusal to bypass permissions as
// root without IS_SANDBOX=1; ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY
// (x-api-key) or ANTHROPIC_AUTH_TOKEN (Bearer); streaming Messages API
// calls; the Bash and Write tools and MCP tools as mcp__SERVER__TOOL; one
// assistant event per content block, user events with tool_result blocks;
// the result event (success, error_max_turns, and an API error as a
// success with is_error and "API Error: ..." text, exit 1); the session
// transcript under CLAUDE_CONFIG_DIR (default ~/.claude). Not reproduced:
// retries, hooks, settings files, subagents, compaction, real pricing
// (the cost is Sonnet's list price on the tokens).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

type claudeFlags struct {
	print, verbose, strictMCP, skipPerms bool
	outputFormat, model, permissionMode  string
	maxTurns                             int
	mcpConfigs                           []string
	prompt                               string
}

func parseClaudeFlags(args []string) (claudeFlags, error) {
	f := claudeFlags{outputFormat: "text", model: "claude-sonnet-4-5", permissionMode: "default"}
	var positional []string
	for i := 0; i < len(args); i++ {
		name, value, has := splitFlag(args[i])
		need := func() (string, error) {
			if has {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("error: option '%s' argument missing", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "-p", "--print":
			f.print = true
		case "--verbose":
			f.verbose = true
		case "--strict-mcp-config":
			f.strictMCP = true
		case "--dangerously-skip-permissions":
			f.skipPerms = true
		case "--output-format":
			f.outputFormat, err = need()
			if err == nil && f.outputFormat != "text" && f.outputFormat != "json" && f.outputFormat != "stream-json" {
				err = cliMsg("error: option '--output-format <format>' argument '%s' is invalid. Allowed choices are text, json, stream-json.", f.outputFormat)
			}
		case "--model":
			f.model, err = need()
		case "--permission-mode":
			f.permissionMode, err = need()
		case "--max-turns":
			var v string
			if v, err = need(); err == nil {
				f.maxTurns, err = strconv.Atoi(v)
			}
		case "--mcp-config":
			if has {
				f.mcpConfigs = append(f.mcpConfigs, value)
				break
			}
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
				f.mcpConfigs = append(f.mcpConfigs, args[i])
			}
			if len(f.mcpConfigs) == 0 {
				err = errors.New("error: option '--mcp-config <configs...>' argument missing")
			}
		default:
			if strings.HasPrefix(name, "-") && name != "-" {
				return f, fmt.Errorf("error: unknown option '%s'", args[i])
			}
			positional = append(positional, args[i])
		}
		if err != nil {
			return f, err
		}
	}
	f.prompt = strings.Join(positional, " ")
	return f, nil
}

// anthropic calls the Messages API.
type anthropic struct {
	url    string
	header http.Header
}

// claudeBlock is a content block, sent and received.
type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	Thinking  string          `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   *string         `json:"content,omitempty"`
	IsError   *bool           `json:"is_error,omitempty"`
}

type claudeUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

// claudeReply is one assistant message as the stream built it.
type claudeReply struct {
	ID         string
	Blocks     []claudeBlock
	StopReason string
	Usage      claudeUsage
}

// stream makes one streaming messages request.
func (a *anthropic) stream(ctx context.Context, body map[string]any) (*claudeReply, error) {
	body["stream"] = true
	resp, err := post(ctx, a.url, a.header, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := &claudeReply{}
	partial := map[int]*strings.Builder{}
	err = readSSE(resp.Body, func(event string, data []byte) error {
		var ev struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message struct {
				ID    string      `json:"id"`
				Usage claudeUsage `json:"usage"`
			} `json:"message"`
			ContentBlock claudeBlock `json:"content_block"`
			Delta        struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *claudeUsage `json:"usage"`
			Error *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("a %s event: %w", event, err)
		}
		switch ev.Type {
		case "message_start":
			r.ID, r.Usage = ev.Message.ID, ev.Message.Usage
		case "content_block_start":
			for len(r.Blocks) <= ev.Index {
				r.Blocks = append(r.Blocks, claudeBlock{})
			}
			r.Blocks[ev.Index] = ev.ContentBlock
			if ev.ContentBlock.Type == "tool_use" {
				partial[ev.Index] = &strings.Builder{}
			}
		case "content_block_delta":
			if ev.Index >= len(r.Blocks) {
				return errors.New("a delta for a block that did not start")
			}
			b := &r.Blocks[ev.Index]
			switch ev.Delta.Type {
			case "text_delta":
				b.Text += ev.Delta.Text
			case "thinking_delta":
				b.Thinking += ev.Delta.Thinking
			case "input_json_delta":
				partial[ev.Index].WriteString(ev.Delta.PartialJSON)
			}
		case "content_block_stop":
			if p := partial[ev.Index]; p != nil {
				in := p.String()
				if in == "" {
					in = "{}"
				}
				r.Blocks[ev.Index].Input = json.RawMessage(in)
			}
		case "message_delta":
			r.StopReason = ev.Delta.StopReason
			if ev.Usage != nil {
				// As Anthropic's SDKs accumulate a stream: message_delta's
				// counts are cumulative, and its input counts, where
				// given, replace message_start's.
				r.Usage.OutputTokens = ev.Usage.OutputTokens
				r.Usage.InputTokens = max(r.Usage.InputTokens, ev.Usage.InputTokens)
				r.Usage.CacheReadInputTokens = max(r.Usage.CacheReadInputTokens, ev.Usage.CacheReadInputTokens)
				r.Usage.CacheCreationInputTokens = max(r.Usage.CacheCreationInputTokens, ev.Usage.CacheCreationInputTokens)
			}
		case "error":
			if ev.Error != nil {
				return errors.New(ev.Error.Message)
			}
		}
		return nil
	})
	return r, err
}

// claudeSession is one print-mode run.
type claudeSession struct {
	out       *out
	id, cwd   string
	model     string
	mcp       mcpSet
	turns     int
	usage     claudeUsage
	final     string
	transcrip string
}

func claude(args []string) int {
	f, err := parseClaudeFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !f.print {
		fmt.Fprintln(os.Stderr, "standin: claude's interactive mode is not reproduced: use -p")
		return 1
	}
	if f.outputFormat == "stream-json" && !f.verbose {
		fmt.Fprintln(os.Stderr, "Error: When using --print, --output-format=stream-json requires --verbose")
		return 1
	}
	if f.skipPerms {
		f.permissionMode = "bypassPermissions"
	}
	if f.permissionMode == "bypassPermissions" && os.Geteuid() == 0 && os.Getenv("IS_SANDBOX") != "1" {
		fmt.Fprintln(os.Stderr, "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons")
		return 1
	}
	prompt := f.prompt
	if stdin := readStdin(); stdin != "" {
		if prompt != "" {
			prompt = stdin + "\n" + prompt
		} else {
			prompt = stdin
		}
	}
	if strings.TrimSpace(prompt) == "" {
		fmt.Fprintln(os.Stderr, "Error: Input must be provided either through stdin or as a prompt argument when using --print")
		return 1
	}
	base := os.Getenv("ANTHROPIC_BASE_URL")
	if base == "" {
		fmt.Fprintln(os.Stderr, "standin: ANTHROPIC_BASE_URL is unset: the stand-in never calls Anthropic's API")
		return 1
	}
	cwd, _ := os.Getwd()
	configDir := os.Getenv("CLAUDE_CONFIG_DIR")
	if configDir == "" {
		home, _ := os.UserHomeDir()
		configDir = filepath.Join(home, ".claude")
	}
	s := &claudeSession{out: newOut(), id: newUUID(), cwd: cwd, model: f.model}
	s.transcrip = filepath.Join(configDir, "projects", regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(cwd, "-"), s.id+".jsonl")
	defer s.out.saveSession(s.transcrip)

	statuses, err := s.startMCP(f.mcpConfigs)
	defer s.mcp.close()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	header := http.Header{"Anthropic-Version": {"2023-06-01"}}
	keySource := "none"
	switch {
	case os.Getenv("ANTHROPIC_API_KEY") != "":
		header.Set("X-Api-Key", os.Getenv("ANTHROPIC_API_KEY"))
		keySource = "ANTHROPIC_API_KEY"
	case os.Getenv("ANTHROPIC_AUTH_TOKEN") != "":
		header.Set("Authorization", "Bearer "+os.Getenv("ANTHROPIC_AUTH_TOKEN"))
		keySource = "ANTHROPIC_AUTH_TOKEN"
	}
	tools := []string{"Bash", "Write"}
	for _, m := range s.mcp {
		for _, t := range m.tools {
			tools = append(tools, "mcp__"+m.name+"__"+t.Name)
		}
	}
	if f.outputFormat == "stream-json" {
		s.out.event(map[string]any{
			"type": "system", "subtype": "init", "cwd": cwd, "session_id": s.id, "tools": tools,
			"mcp_servers": statuses, "model": f.model, "permissionMode": f.permissionMode,
			"slash_commands": []string{}, "apiKeySource": keySource, "claude_code_version": "standin",
			"output_style": "default", "agents": []string{}, "skills": []string{}, "plugins": []string{}, "uuid": newUUID(),
		})
	}
	if keySource == "none" {
		return s.result(f, "success", true, "Invalid API key · Please run /login")
	}
	api := &anthropic{url: strings.TrimSuffix(base, "/") + "/v1/messages", header: header}
	messages := []map[string]any{{"role": "user", "content": prompt}}
	for {
		if f.maxTurns > 0 && s.turns >= f.maxTurns {
			return s.result(f, "error_max_turns", true, "")
		}
		s.turns++
		reply, err := api.stream(context.Background(), map[string]any{
			"model": f.model, "max_tokens": 8192, "messages": messages, "tools": s.toolDefs(),
			"system": "You are Claude Code, Anthropic's official CLI for Claude. Working directory: " + cwd,
		})
		if err != nil {
			text := "API Error: " + err.Error()
			s.assistant("msg_"+newID(12), "<synthetic>", claudeBlock{Type: "text", Text: text})
			return s.result(f, "success", true, text)
		}
		s.usage.InputTokens += reply.Usage.InputTokens
		s.usage.OutputTokens += reply.Usage.OutputTokens
		s.usage.CacheReadInputTokens += reply.Usage.CacheReadInputTokens
		s.usage.CacheCreationInputTokens += reply.Usage.CacheCreationInputTokens
		var texts []string
		var uses []claudeBlock
		for _, b := range reply.Blocks {
			s.assistant(reply.ID, f.model, b)
			switch b.Type {
			case "text":
				texts = append(texts, b.Text)
			case "tool_use":
				uses = append(uses, b)
			}
		}
		messages = append(messages, map[string]any{"role": "assistant", "content": reply.Blocks})
		if len(uses) == 0 {
			s.final = strings.Join(texts, "\n")
			return s.result(f, "success", false, s.final)
		}
		var results []claudeBlock
		for _, u := range uses {
			output, failed := s.runTool(u)
			r := claudeBlock{Type: "tool_result", ToolUseID: u.ID, Content: &output, IsError: &failed}
			results = append(results, r)
			s.out.event(map[string]any{
				"type": "user", "message": map[string]any{"role": "user", "content": []claudeBlock{r}},
				"parent_tool_use_id": nil, "session_id": s.id, "uuid": newUUID(),
			})
		}
		messages = append(messages, map[string]any{"role": "user", "content": results})
	}
}

// startMCP starts the servers of the --mcp-config files or JSON strings.
func (s *claudeSession) startMCP(configs []string) ([]map[string]string, error) {
	statuses := []map[string]string{}
	for _, c := range configs {
		data := []byte(c)
		if !strings.HasPrefix(strings.TrimSpace(c), "{") {
			var err error
			if data, err = os.ReadFile(c); err != nil {
				return statuses, fmt.Errorf("Error: Invalid MCP configuration:\nMCP config file not found: %s", c)
			}
		}
		var cfg struct {
			MCPServers map[string]struct {
				Type    string            `json:"type"`
				Command string            `json:"command"`
				Args    []string          `json:"args"`
				Env     map[string]string `json:"env"`
				URL     string            `json:"url"`
			} `json:"mcpServers"`
		}
		if err := json.Unmarshal(data, &cfg); err != nil {
			return statuses, fmt.Errorf("Error: Invalid MCP configuration:\n%s: %v", c, err)
		}
		for name, sv := range cfg.MCPServers {
			if sv.Type != "" && sv.Type != "stdio" {
				fmt.Fprintf(os.Stderr, "standin: MCP server %s: only stdio servers are reproduced, not %s\n", name, sv.Type)
				statuses = append(statuses, map[string]string{"name": name, "status": "failed"})
				continue
			}
			m, err := startMCP(name, sv.Command, sv.Args, sv.Env, s.cwd)
			if err != nil {
				fmt.Fprintln(os.Stderr, "standin:", err)
				statuses = append(statuses, map[string]string{"name": name, "status": "failed"})
				continue
			}
			s.mcp = append(s.mcp, m)
			statuses = append(statuses, map[string]string{"name": name, "status": "connected"})
		}
	}
	return statuses, nil
}

// toolDefs are the tools offered to the model.
func (s *claudeSession) toolDefs() []map[string]any {
	defs := []map[string]any{{
		"name": "Bash", "description": "Executes a bash command in the working directory.",
		"input_schema": json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"description":{"type":"string"}},"required":["command"]}`),
	}, {
		"name": "Write", "description": "Writes a file to the local filesystem.",
		"input_schema": json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"},"content":{"type":"string"}},"required":["file_path","content"]}`),
	}}
	for _, m := range s.mcp {
		for _, t := range m.tools {
			defs = append(defs, map[string]any{"name": "mcp__" + m.name + "__" + t.Name, "description": t.Description, "input_schema": t.InputSchema})
		}
	}
	return defs
}

// runTool runs a tool_use: its output and whether it failed.
func (s *claudeSession) runTool(u claudeBlock) (string, bool) {
	switch u.Name {
	case "Bash":
		var in struct {
			Command string `json:"command"`
		}
		if json.Unmarshal(u.Input, &in) != nil || in.Command == "" {
			return "<tool_use_error>InputValidationError: Bash failed due to the following issue:\nThe required parameter `command` is missing</tool_use_error>", true
		}
		output, code := runShell(s.cwd, in.Command)
		if code != 0 {
			return fmt.Sprintf("Error: Exit code %d\n%s", code, output), true
		}
		return strings.TrimRight(output, "\n"), false
	case "Write":
		var in struct {
			FilePath string `json:"file_path"`
			Content  string `json:"content"`
		}
		if json.Unmarshal(u.Input, &in) != nil || in.FilePath == "" {
			return "<tool_use_error>InputValidationError: Write failed due to the following issue:\nThe required parameter `file_path` is missing</tool_use_error>", true
		}
		path, err := writeFile(s.cwd, in.FilePath, in.Content)
		if err != nil {
			return err.Error(), true
		}
		return "File created successfully at: " + path, false
	}
	if m, tool := s.mcp.find(u.Name, "mcp__", "__"); m != nil {
		text, failed, err := m.call(tool, u.Input)
		if err != nil {
			return err.Error(), true
		}
		return text, failed
	}
	return fmt.Sprintf("<tool_use_error>Error: No such tool available: %s</tool_use_error>", u.Name), true
}

// assistant writes one content block as an assistant event.
func (s *claudeSession) assistant(id, model string, b claudeBlock) {
	s.out.event(map[string]any{
		"type": "assistant",
		"message": map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": []claudeBlock{b}, "stop_reason": nil, "stop_sequence": nil,
			"usage": s.usage,
		},
		"parent_tool_use_id": nil, "session_id": s.id, "uuid": newUUID(),
	})
}

// result writes the result in the output format and is the exit code.
func (s *claudeSession) result(f claudeFlags, subtype string, isError bool, text string) int {
	cost := float64(s.usage.InputTokens)*3e-6 + float64(s.usage.OutputTokens)*15e-6 +
		float64(s.usage.CacheReadInputTokens)*0.3e-6 + float64(s.usage.CacheCreationInputTokens)*3.75e-6
	ev := map[string]any{
		"type": "result", "subtype": subtype, "is_error": isError, "duration_ms": 0, "duration_api_ms": 0,
		"num_turns": s.turns, "session_id": s.id, "total_cost_usd": cost,
		"usage": s.usage, "modelUsage": map[string]any{}, "permission_denials": []any{}, "uuid": newUUID(),
	}
	if subtype == "success" {
		ev["result"] = text
	} else {
		ev["errors"] = []string{fmt.Sprintf("Reached maximum number of turns (%d)", f.maxTurns)}
	}
	switch f.outputFormat {
	case "stream-json", "json":
		s.out.event(ev)
	default:
		fmt.Println(text)
	}
	if isError {
		return 1
	}
	return 0
}
