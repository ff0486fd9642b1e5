package cliagent

// Codex CLI (npm @openai/codex, the Rust codex-rs), written from its
// documentation and source, as of 2026 (the versions after the Chat
// Completions wire was removed in February 2026, openai/codex#10157):
//
//   - `codex exec` (--json, --skip-git-repo-check,
//     --dangerously-bypass-approvals-and-sandbox, -C/--cd, -m/--model, the
//     prompt `-` read from stdin):
//     https://developers.openai.com/codex/noninteractive and
//     https://github.com/openai/codex/blob/main/codex-rs/exec/src/cli.rs
//   - the --json events (thread.started, turn.started, turn.completed with
//     usage, turn.failed, item.started / item.updated / item.completed with
//     agent_message, reasoning, command_execution, file_change,
//     mcp_tool_call, web_search, todo_list and error items, and error):
//     https://github.com/openai/codex/blob/main/codex-rs/exec/src/exec_events.rs
//   - configuration, $CODEX_HOME/config.toml: model, model_provider,
//     [model_providers.NAME] base_url / env_key / wire_api, [mcp_servers.NAME]
//     command / args / env or url / http_headers, check_for_update_on_startup:
//     https://github.com/openai/codex/blob/main/docs/config.md
//   - wire_api = "chat" is refused at configuration load since then; only
//     "responses" (POST {base_url}/responses) is accepted:
//     https://github.com/openai/codex/discussions/7782 and
//     https://github.com/openai/codex/blob/main/codex-rs/model-provider-info/src/lib.rs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// codex is OpenAI's Codex CLI, run as `codex exec --json`, the prompt on
// stdin. It speaks the OpenAI Responses API (POST /v1/responses): the
// proxy's OpenAI route passes it to the upstream, which must serve it.
type codex struct{}

var _ EventStreamer = codex{}

func (codex) Name() string   { return "codex" }
func (codex) Binary() string { return "codex" }
func (codex) API() API       { return OpenAI }

// codexKeyEnv names the variable the model provider's key is read from
// (its env_key).
const codexKeyEnv = "AMELIA_CODEX_KEY"

// codexProvider is the model provider config.toml defines.
const codexProvider = "amelia"

func (codex) Command(r Run) (Command, error) {
	if r.API != OpenAI && r.API != "" {
		return Command{}, fmt.Errorf("codex speaks the openai API (its Responses API), not %q: use a profile with an openai route", r.API)
	}
	home := filepath.Join(r.StateDir, "codex")
	var b strings.Builder
	b.WriteString("# Written by amelia for one run.\n")
	fmt.Fprintf(&b, "model = %s\n", tomlString(r.Model))
	fmt.Fprintf(&b, "model_provider = %s\n", tomlString(codexProvider))
	b.WriteString("check_for_update_on_startup = false\n")
	fmt.Fprintf(&b, "\n[model_providers.%s]\n", codexProvider)
	b.WriteString("name = \"Amelia\"\n")
	fmt.Fprintf(&b, "base_url = %s\n", tomlString(r.LLM.OpenAIBase))
	fmt.Fprintf(&b, "env_key = %s\n", tomlString(codexKeyEnv))
	b.WriteString("wire_api = \"responses\"\n")
	for _, s := range r.MCP {
		fmt.Fprintf(&b, "\n[mcp_servers.%s]\n", tomlString(s.Name))
		switch {
		case len(s.Command) > 0:
			fmt.Fprintf(&b, "command = %s\n", tomlString(s.Command[0]))
			fmt.Fprintf(&b, "args = %s\n", tomlStrings(s.Command[1:]))
			if len(s.Env) > 0 {
				fmt.Fprintf(&b, "env = %s\n", tomlTable(s.Env))
			}
		case s.URL != "":
			fmt.Fprintf(&b, "url = %s\n", tomlString(s.URL))
			if len(s.Headers) > 0 {
				fmt.Fprintf(&b, "http_headers = %s\n", tomlTable(s.Headers))
			}
		default:
			return Command{}, errors.New("MCP server " + s.Name + " has neither a bridge command nor a URL")
		}
	}
	return Command{
		Argv: []string{r.Binary, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-C", r.Cwd, "-m", r.Model, "-"},
		Env: map[string]string{
			"HOME":       filepath.Join(r.StateDir, "home"),
			"CODEX_HOME": home,
			codexKeyEnv:  r.LLM.Key,
		},
		Files: []File{{Path: filepath.Join(home, "config.toml"), Data: []byte(b.String())}},
		Stdin: r.Prompt,
	}, nil
}

// tomlString is s as a TOML basic string: JSON's escapes are all TOML's.
func tomlString(s string) string { return string(mustJSON(s)) }

// tomlStrings is ss as a TOML array of strings.
func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// codexEvent is one line of `codex exec --json`.
type codexEvent struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Message  string `json:"message"`
	Error    *struct {
		Message string `json:"message"`
	} `json:"error"`
	Usage *struct {
		InputTokens       *int64 `json:"input_tokens"`
		CachedInputTokens *int64 `json:"cached_input_tokens"`
		OutputTokens      *int64 `json:"output_tokens"`
	} `json:"usage"`
	Item *codexItem `json:"item"`
}

// codexItem is a thread item; which fields are set depends on its type.
type codexItem struct {
	ID               string `json:"id"`
	Type             string `json:"type"`
	Text             string `json:"text"`
	Command          string `json:"command"`
	AggregatedOutput string `json:"aggregated_output"`
	ExitCode         *int   `json:"exit_code"`
	Status           string `json:"status"`
	Changes          []struct {
		Path string `json:"path"`
		Kind string `json:"kind"`
	} `json:"changes"`
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structured_content"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Query string `json:"query"`
	Items []struct {
		Text      string `json:"text"`
		Completed bool   `json:"completed"`
	} `json:"items"`
}

// Events translates the --json events: agent messages and reasoning are
// thinking; commands (as "shell"), file changes (as "apply_patch"), MCP
// tool calls (as "mcp__SERVER__TOOL") and web searches are tool calls and
// results; turn.completed or turn.failed is the Outcome, the last agent
// message its result.
func (codex) Events(stdout io.Reader, emit func(*protocol.AgenticMessage) error) (Outcome, error) {
	n := narrator{emit: emit}
	started := map[string]bool{}
	var (
		out      *Outcome
		thread   string
		final    string
		fatalErr string
	)
	err := eachEvent(stdout, "codex", func(line []byte) error {
		var ev codexEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("codex's %s event: %w", ev.Type, err)
		}
		switch ev.Type {
		case "thread.started":
			thread = ev.ThreadID
		case "item.started":
			if ev.Item != nil && codexCalls(ev.Item.Type) {
				started[ev.Item.ID] = true
				return codexCall(&n, ev.Item)
			}
		case "item.completed":
			if ev.Item == nil {
				return nil
			}
			if ev.Item.Type == "agent_message" {
				final = ev.Item.Text
			}
			return codexCompleted(&n, ev.Item, started)
		case "error":
			fatalErr = ev.Message
		case "turn.completed":
			o := Outcome{Result: final, SessionID: thread}
			if ev.Usage != nil {
				o.Usage = &protocol.DriverUsage{InputTokens: ev.Usage.InputTokens, OutputTokens: ev.Usage.OutputTokens, CacheReadTokens: ev.Usage.CachedInputTokens}
			}
			out = &o
			return n.finish(final)
		case "turn.failed":
			msg := fatalErr
			if ev.Error != nil && ev.Error.Message != "" {
				msg = ev.Error.Message
			}
			if msg == "" {
				msg = "codex's turn failed"
			}
			out = &Outcome{Result: msg, IsError: true, SessionID: thread}
			return n.finish("")
		}
		return nil
	})
	if err != nil {
		return Outcome{}, err
	}
	if out == nil {
		if fatalErr != "" {
			return Outcome{Result: fatalErr, IsError: true, SessionID: thread}, n.finish("")
		}
		return Outcome{}, errors.New("codex's output ended without turn.completed or turn.failed")
	}
	return *out, nil
}

// codexCalls reports whether items of type t are tool calls.
func codexCalls(t string) bool {
	switch t {
	case "command_execution", "file_change", "mcp_tool_call", "web_search":
		return true
	}
	return false
}

// codexCall writes the tool call item is.
func codexCall(n *narrator, it *codexItem) error {
	switch it.Type {
	case "command_execution":
		return n.call(it.ID, "shell", mustJSON(map[string]string{"command": it.Command}))
	case "file_change":
		return n.call(it.ID, "apply_patch", mustJSON(map[string]any{"changes": it.Changes}))
	case "mcp_tool_call":
		return n.call(it.ID, "mcp__"+it.Server+"__"+it.Tool, it.Arguments)
	case "web_search":
		return n.call(it.ID, "web_search", mustJSON(map[string]string{"query": it.Query}))
	}
	return nil
}

// codexCompleted writes a completed item: thinking, or a tool's result
// (after its call, when the call was not started).
func codexCompleted(n *narrator, it *codexItem, started map[string]bool) error {
	switch it.Type {
	case "agent_message", "reasoning":
		return n.say(it.Text)
	case "todo_list":
		var b strings.Builder
		for _, t := range it.Items {
			mark := " "
			if t.Completed {
				mark = "x"
			}
			fmt.Fprintf(&b, "- [%s] %s\n", mark, t.Text)
		}
		return n.say(strings.TrimSuffix(b.String(), "\n"))
	}
	if !codexCalls(it.Type) {
		return nil // error items: warnings codex carries on after
	}
	if !started[it.ID] {
		if err := codexCall(n, it); err != nil {
			return err
		}
	}
	delete(started, it.ID)
	failed := it.Status == "failed" || it.Status == "declined"
	switch it.Type {
	case "command_execution":
		return n.result(it.ID, it.AggregatedOutput, failed || (it.ExitCode != nil && *it.ExitCode != 0))
	case "file_change":
		var lines []string
		for _, c := range it.Changes {
			lines = append(lines, c.Kind+" "+c.Path)
		}
		return n.result(it.ID, strings.Join(lines, "\n"), failed)
	case "mcp_tool_call":
		var out string
		switch {
		case it.Error != nil:
			out, failed = it.Error.Message, true
		case it.Result != nil:
			var texts []string
			for _, c := range it.Result.Content {
				if c.Type == "text" {
					texts = append(texts, c.Text)
				} else {
					texts = append(texts, "["+c.Type+"]")
				}
			}
			out = strings.Join(texts, "\n")
			if out == "" && len(it.Result.StructuredContent) > 0 {
				out = string(it.Result.StructuredContent)
			}
		}
		return n.result(it.ID, out, failed)
	default: // web_search
		return n.result(it.ID, it.Query, failed)
	}
}

// tomlTable is m as an inline TOML table, its keys sorted.
func tomlTable(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var kv []string
	for _, k := range keys {
		kv = append(kv, tomlString(k)+" = "+tomlString(m[k]))
	}
	return "{ " + strings.Join(kv, ", ") + " }"
}
