package cliagent

// Claude Code (npm @anthropic-ai/claude-code), written from its documentation:
//
//   - headless mode, -p, --output-format stream-json (which needs --verbose
//     with -p), stdin as the prompt:
//     https://code.claude.com/docs/en/headless
//   - flags (--model, --max-turns, --mcp-config, --strict-mcp-config,
//     --dangerously-skip-permissions):
//     https://code.claude.com/docs/en/cli-reference
//   - environment (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY sent as x-api-key,
//     ANTHROPIC_AUTH_TOKEN as Bearer, CLAUDE_CONFIG_DIR, DISABLE_AUTOUPDATER,
//     DISABLE_TELEMETRY, DISABLE_ERROR_REPORTING,
//     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC):
//     https://code.claude.com/docs/en/env-vars and
//     https://code.claude.com/docs/en/settings
//   - the stream-json messages (system/init, assistant, user, result with
//     subtype success or error_*, is_error, result, session_id, usage,
//     total_cost_usd, num_turns): the Agent SDK's message types,
//     https://platform.claude.com/docs/en/agent-sdk/typescript
//   - MCP configuration files ({"mcpServers": {...}}, stdio and http):
//     https://code.claude.com/docs/en/mcp
//   - IS_SANDBOX=1, without which bypassing permissions is refused as root
//     (undocumented; the maintainers' workaround):
//     https://github.com/anthropics/claude-code/issues/3490

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// claudeCode is Anthropic's Claude Code, run as
// `claude -p --output-format stream-json --verbose`, the prompt on stdin.
// It speaks only the Anthropic messages API.
type claudeCode struct{}

var _ EventStreamer = claudeCode{}

func (claudeCode) Name() string   { return "claude-code" }
func (claudeCode) Binary() string { return "claude" }
func (claudeCode) API() API       { return Anthropic }

func (c claudeCode) Command(r Run) (Command, error) {
	if r.API != Anthropic && r.API != "" {
		return Command{}, fmt.Errorf("claude-code speaks only the anthropic API, not %q: use a profile with an anthropic route", r.API)
	}
	home := filepath.Join(r.StateDir, "home")
	configDir := filepath.Join(r.StateDir, "claude")
	argv := []string{r.Binary, "-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"}
	if r.Model != "" {
		argv = append(argv, "--model", r.Model)
	}
	if r.MaxTurns > 0 {
		argv = append(argv, "--max-turns", strconv.Itoa(r.MaxTurns))
	}
	var files []File
	if len(r.MCP) > 0 {
		servers := map[string]any{}
		for _, s := range r.MCP {
			switch {
			case len(s.Command) > 0:
				servers[s.Name] = map[string]any{"type": "stdio", "command": s.Command[0], "args": s.Command[1:], "env": orEmpty(s.Env)}
			case s.URL != "":
				servers[s.Name] = map[string]any{"type": "http", "url": s.URL, "headers": s.Headers}
			default:
				return Command{}, errors.New("MCP server " + s.Name + " has neither a bridge command nor a URL")
			}
		}
		data, err := json.MarshalIndent(map[string]any{"mcpServers": servers}, "", "  ")
		if err != nil {
			return Command{}, fmt.Errorf("write claude-code's MCP configuration: %w", err)
		}
		path := filepath.Join(configDir, "mcp.json")
		files = append(files, File{Path: path, Data: data})
		argv = append(argv, "--mcp-config", path, "--strict-mcp-config")
	}
	return Command{
		Argv: argv,
		Env: map[string]string{
			"HOME":                                     home,
			"CLAUDE_CONFIG_DIR":                        configDir,
			"ANTHROPIC_BASE_URL":                       r.LLM.AnthropicBase,
			"ANTHROPIC_API_KEY":                        r.LLM.Key,
			"DISABLE_AUTOUPDATER":                      "1",
			"DISABLE_TELEMETRY":                        "1",
			"DISABLE_ERROR_REPORTING":                  "1",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"IS_SANDBOX":                               "1",
		},
		Files: files,
		Stdin: r.Prompt,
	}, nil
}

// claudeEvent is one line of Claude Code's stream-json.
type claudeEvent struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype"`
	SessionID string `json:"session_id"`
	Model     string `json:"model"`
	Message   *struct {
		Content json.RawMessage `json:"content"`
	} `json:"message"`

	IsError      bool     `json:"is_error"`
	Result       *string  `json:"result"`
	Errors       []string `json:"errors"`
	NumTurns     *int64   `json:"num_turns"`
	DurationMs   *int64   `json:"duration_ms"`
	TotalCostUSD *float64 `json:"total_cost_usd"`
	Usage        *struct {
		InputTokens              *int64 `json:"input_tokens"`
		OutputTokens             *int64 `json:"output_tokens"`
		CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	} `json:"usage"`
}

// claudeBlock is a content block of an assistant or user message.
type claudeBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// Events translates stream-json: text and thinking blocks are thinking,
// tool_use blocks tool calls, tool_result blocks tool results, and the
// result event the Outcome.
func (claudeCode) Events(stdout io.Reader, emit func(*protocol.AgenticMessage) error) (Outcome, error) {
	n := narrator{emit: emit}
	var out *Outcome
	model := ""
	err := eachEvent(stdout, "claude-code", func(line []byte) error {
		var ev claudeEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("claude-code's %s event: %w", ev.Type, err)
		}
		switch ev.Type {
		case "system":
			if ev.Subtype == "init" && ev.Model != "" {
				model = ev.Model
			}
		case "assistant", "user":
			return claudeBlocks(&n, ev)
		case "result":
			o := claudeOutcome(&ev, model)
			out = &o
			return n.finish(o.Result)
		}
		return nil
	})
	if err != nil {
		return Outcome{}, err
	}
	if out == nil {
		return Outcome{}, errors.New("claude-code's output ended without its result event")
	}
	return *out, nil
}

// claudeBlocks writes the blocks of an assistant or user message.
func claudeBlocks(n *narrator, ev claudeEvent) error {
	if ev.Message == nil || len(ev.Message.Content) == 0 || ev.Message.Content[0] != '[' {
		return nil // a user message of plain text: the prompt
	}
	var blocks []claudeBlock
	if err := json.Unmarshal(ev.Message.Content, &blocks); err != nil {
		return fmt.Errorf("claude-code's %s message: %w", ev.Type, err)
	}
	for _, b := range blocks {
		var err error
		switch b.Type {
		case "text":
			err = n.say(b.Text)
		case "thinking":
			err = n.say(b.Thinking)
		case "tool_use", "server_tool_use", "mcp_tool_use":
			err = n.call(b.ID, b.Name, b.Input)
		case "tool_result":
			err = n.result(b.ToolUseID, claudeToolOutput(b.Content), b.IsError)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// claudeToolOutput is a tool_result's content: a string, or the text of
// its blocks.
func claudeToolOutput(content json.RawMessage) string {
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(content, &parts) != nil {
		return string(content)
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		} else {
			texts = append(texts, "["+p.Type+"]")
		}
	}
	return strings.Join(texts, "\n")
}

// claudeOutcome reads the result event. A subtype other than success
// (error_max_turns, error_during_execution...) is a failure whatever
// is_error says.
func claudeOutcome(ev *claudeEvent, model string) Outcome {
	o := Outcome{IsError: ev.IsError || ev.Subtype != "success", SessionID: ev.SessionID}
	switch {
	case ev.Result != nil:
		o.Result = *ev.Result
	case len(ev.Errors) > 0:
		o.Result = strings.Join(ev.Errors, "; ")
	default:
		o.Result = "claude-code stopped: " + ev.Subtype
	}
	u := &protocol.DriverUsage{CostUSD: ev.TotalCostUSD, DurationMs: ev.DurationMs, NumTurns: ev.NumTurns}
	if ev.Usage != nil {
		u.InputTokens, u.OutputTokens = ev.Usage.InputTokens, ev.Usage.OutputTokens
		u.CacheReadTokens, u.CacheCreationTokens = ev.Usage.CacheReadInputTokens, ev.Usage.CacheCreationInputTokens
	}
	if model != "" {
		u.Model = &model
	}
	o.Usage = u
	return o
}
