package cliagent

// Gemini CLI (npm @google/gemini-cli), written from its documentation and
// source (google-gemini/gemini-cli, 0.5x, August 2026):
//
//   - headless mode, -p/--prompt, -m/--model, --output-format stream-json,
//     --yolo, and its exit codes (1 error, 41 authentication, 42 input,
//     53 turn limit):
//     https://geminicli.com/docs/cli/headless/ and
//     https://github.com/google-gemini/gemini-cli/blob/main/docs/cli/headless.md
//   - the stream-json events (init, message with delta, tool_use,
//     tool_result, error, result with status and stats):
//     https://github.com/google-gemini/gemini-cli/blob/main/packages/core/src/output/types.ts
//   - settings.json (general.enableAutoUpdate, privacy.usageStatisticsEnabled,
//     telemetry.enabled, model.maxSessionTurns, security.folderTrust.enabled,
//     mcpServers with command/args/env or httpUrl/headers) and the
//     environment (GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL, GEMINI_CLI_HOME):
//     https://geminicli.com/docs/reference/configuration/ and
//     https://github.com/google-gemini/gemini-cli/blob/main/docs/reference/configuration.md
//   - it speaks only the Gemini API (@google/genai: POST
//     {base}/v1beta/models/{model}:streamGenerateContent?alt=sse, the key
//     in x-goog-api-key):
//     https://ai.google.dev/api/generate-content

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// Gemini is Google's Gemini API (generateContent). The proxy serves it at
// /gemini, beside /v1 and /anthropic, for a profile with an llm.gemini
// block, and does not translate it to the other APIs.
const Gemini API = "gemini"

// gemini is Google's Gemini CLI, run as `gemini -p PROMPT --output-format
// stream-json --yolo`. It speaks only the Gemini API.
type gemini struct{}

var _ EventStreamer = gemini{}

func (gemini) Name() string   { return "gemini" }
func (gemini) Binary() string { return "gemini" }
func (gemini) API() API       { return Gemini }

// geminiBase is the proxy's Gemini route: beside the OpenAI route, at
// /gemini (the SDK adds /v1beta/models/...).
func geminiBase(e Endpoints) string {
	return strings.TrimSuffix(strings.TrimSuffix(e.OpenAIBase, "/"), "/v1") + "/gemini"
}

func (gemini) Command(r Run) (Command, error) {
	if r.API != Gemini && r.API != "" {
		return Command{}, fmt.Errorf("gemini speaks only the gemini API, not %q", r.API)
	}
	if len(r.Prompt) > maxArgPrompt {
		return Command{}, fmt.Errorf("gemini takes its prompt as one argument, at most %d KiB; this one is %d KiB: shorten it", maxArgPrompt>>10, len(r.Prompt)>>10)
	}
	cliHome := filepath.Join(r.StateDir, "gemini")
	mcp := map[string]any{}
	for _, s := range r.MCP {
		switch {
		case len(s.Command) > 0:
			mcp[s.Name] = map[string]any{"command": s.Command[0], "args": s.Command[1:], "env": orEmpty(s.Env), "trust": true}
		case s.URL != "":
			mcp[s.Name] = map[string]any{"httpUrl": s.URL, "headers": s.Headers, "trust": true}
		default:
			return Command{}, errors.New("MCP server " + s.Name + " has neither a bridge command nor a URL")
		}
	}
	settings := map[string]any{
		"general":    map[string]any{"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
		"privacy":    map[string]any{"usageStatisticsEnabled": false},
		"telemetry":  map[string]any{"enabled": false},
		"security":   map[string]any{"folderTrust": map[string]any{"enabled": false}},
		"mcpServers": mcp,
	}
	if r.MaxTurns > 0 {
		settings["model"] = map[string]any{"maxSessionTurns": r.MaxTurns}
	}
	data, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return Command{}, fmt.Errorf("write gemini's settings: %w", err)
	}
	argv := []string{r.Binary, "--output-format", "stream-json", "--yolo"}
	if r.Model != "" {
		argv = append(argv, "-m", r.Model)
	}
	argv = append(argv, "-p", r.Prompt)
	return Command{
		Argv: argv,
		Env: map[string]string{
			"HOME":                   filepath.Join(r.StateDir, "home"),
			"GEMINI_CLI_HOME":        cliHome,
			"GOOGLE_GEMINI_BASE_URL": geminiBase(r.LLM),
			"GEMINI_API_KEY":         r.LLM.Key,
		},
		Files: []File{{Path: filepath.Join(cliHome, ".gemini", "settings.json"), Data: data}},
	}, nil
}

// geminiEvent is one line of Gemini CLI's stream-json.
type geminiEvent struct {
	Type       string          `json:"type"`
	SessionID  string          `json:"session_id"`
	Model      string          `json:"model"`
	Role       string          `json:"role"`
	Content    string          `json:"content"`
	ToolName   string          `json:"tool_name"`
	ToolID     string          `json:"tool_id"`
	Parameters json.RawMessage `json:"parameters"`
	Status     string          `json:"status"`
	Output     *string         `json:"output"`
	Severity   string          `json:"severity"`
	Message    string          `json:"message"`
	Error      *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	Stats *struct {
		InputTokens  *int64 `json:"input_tokens"`
		OutputTokens *int64 `json:"output_tokens"`
		Cached       *int64 `json:"cached"`
		DurationMs   *int64 `json:"duration_ms"`
	} `json:"stats"`
}

// Events translates stream-json: the assistant's message chunks of a turn
// are one thinking, tool_use and tool_result events are tool calls and
// results, and the result event the Outcome, with the last turn's text
// as its result.
func (gemini) Events(stdout io.Reader, emit func(*protocol.AgenticMessage) error) (Outcome, error) {
	n := narrator{emit: emit}
	var (
		out       *Outcome
		session   string
		model     string
		text      strings.Builder
		lastError string
	)
	say := func() error {
		t := text.String()
		text.Reset()
		return n.say(t)
	}
	err := eachEvent(stdout, "gemini", func(line []byte) error {
		var ev geminiEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("gemini's %s event: %w", ev.Type, err)
		}
		switch ev.Type {
		case "init":
			session, model = ev.SessionID, ev.Model
		case "message":
			if ev.Role == "assistant" {
				text.WriteString(ev.Content)
			}
		case "tool_use":
			if err := say(); err != nil {
				return err
			}
			return n.call(ev.ToolID, ev.ToolName, ev.Parameters)
		case "tool_result":
			if err := say(); err != nil {
				return err
			}
			output := ""
			switch {
			case ev.Output != nil:
				output = *ev.Output
			case ev.Error != nil:
				output = ev.Error.Message
			}
			return n.result(ev.ToolID, output, ev.Status == "error")
		case "error":
			if ev.Severity == "error" {
				lastError = ev.Message
			}
		case "result":
			final := text.String()
			if err := say(); err != nil {
				return err
			}
			o := Outcome{Result: final, SessionID: session}
			if ev.Status == "error" {
				o.IsError = true
				switch {
				case ev.Error != nil && ev.Error.Message != "":
					o.Result = ev.Error.Message
				case lastError != "":
					o.Result = lastError
				default:
					o.Result = "gemini's run failed"
				}
			}
			if ev.Stats != nil {
				o.Usage = &protocol.DriverUsage{InputTokens: ev.Stats.InputTokens, OutputTokens: ev.Stats.OutputTokens, CacheReadTokens: ev.Stats.Cached, DurationMs: ev.Stats.DurationMs}
				if model != "" {
					o.Usage.Model = &model
				}
			}
			out = &o
			return n.finish(o.Result)
		}
		return nil
	})
	if err != nil {
		return Outcome{}, err
	}
	if out == nil {
		return Outcome{}, errors.New("gemini's output ended without its result event")
	}
	return *out, nil
}
