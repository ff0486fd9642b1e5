package main

// Gemini CLI in headless mode, from https://geminicli.com/docs/cli/headless/,
// the configuration reference, and google-gemini/gemini-cli's
// nonInteractiveCli.ts, output/types.ts, utils/errors.ts and
// contentGenerator.ts (0.5x). Reproduced: -p/--prompt, -m/--model,
// -o/--output-format (text, json, stream-json), -y/--yolo,
// --approval-mode, yargs' strict "Unknown argument" (exit 1);
// $GEMINI_CLI_HOME/.gemini/settings.json (default ~/.gemini):
// model.maxSessionTurns (exit 53 past it) and mcpServers (command / args /
// env); GEMINI_API_KEY and GOOGLE_GEMINI_BASE_URL (https unless loopback),
// no auth at all exiting 41; streaming Gemini API calls to
// {base}/v1beta/models/{model}:streamGenerateContent?alt=sse with the key in
// x-goog-api-key; run_shell_command and write_file, offered only with
// --yolo as in headless mode, and MCP tools as mcp_SERVER_TOOL; the
// stream-json events (init, user and delta assistant messages, tool_use,
// tool_result, result with stats, and an API error's result with status
// error, exit code the HTTP status as Node's process.exit takes it).
// Not reproduced: OAuth and Vertex AI, the other built-in tools, loop
// detection, retries, chat compression, streamable HTTP MCP servers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

type geminiFlags struct {
	prompt, model, outputFormat, approvalMode string
	hasPrompt, yolo                           bool
}

func parseGeminiFlags(args []string) (geminiFlags, error) {
	f := geminiFlags{model: "gemini-2.5-pro", outputFormat: "text"}
	var unknown []string
	for i := 0; i < len(args); i++ {
		name, value, has := splitFlag(args[i])
		need := func() (string, error) {
			if has {
				return value, nil
			}
			if i+1 >= len(args) {
				return "", cliMsg("Not enough arguments following: %s", strings.TrimLeft(name, "-"))
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "-p", "--prompt":
			f.prompt, err = need()
			f.hasPrompt = true
		case "-m", "--model":
			f.model, err = need()
		case "-o", "--output-format":
			f.outputFormat, err = need()
			if err == nil && f.outputFormat != "text" && f.outputFormat != "json" && f.outputFormat != "stream-json" {
				err = cliMsg("Invalid values:\n  Argument: output-format, Given: %q, Choices: \"text\", \"json\", \"stream-json\"", f.outputFormat)
			}
		case "-y", "--yolo":
			f.yolo = true
		case "--approval-mode":
			f.approvalMode, err = need()
			switch f.approvalMode {
			case "default", "auto_edit", "yolo", "plan":
			default:
				err = cliMsg("Invalid values:\n  Argument: approval-mode, Given: %q, Choices: \"default\", \"auto_edit\", \"yolo\", \"plan\"", f.approvalMode)
			}
		case "-d", "--debug":
		default:
			if strings.HasPrefix(name, "-") {
				unknown = append(unknown, strings.TrimLeft(name, "-"))
				continue
			}
			return f, errors.New("standin: gemini's interactive mode (a positional prompt) is not reproduced: use -p")
		}
		if err != nil {
			return f, err
		}
	}
	switch {
	case len(unknown) == 1:
		return f, cliMsg("Unknown argument: %s", unknown[0])
	case len(unknown) > 1:
		return f, cliMsg("Unknown arguments: %s", strings.Join(unknown, ", "))
	case f.yolo && f.approvalMode != "":
		return f, cliMessage("Cannot use both --yolo (-y) and --approval-mode together. Use --approval-mode=yolo instead.")
	}
	if f.approvalMode == "yolo" {
		f.yolo = true
	}
	return f, nil
}

type geminiPart struct {
	Text             string          `json:"text,omitempty"`
	Thought          bool            `json:"thought,omitempty"`
	FunctionCall     *geminiCall     `json:"functionCall,omitempty"`
	FunctionResponse *geminiResponse `json:"functionResponse,omitempty"`
}

type geminiCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type geminiResponse struct {
	ID       string         `json:"id,omitempty"`
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

type geminiContent struct {
	Role  string       `json:"role"`
	Parts []geminiPart `json:"parts"`
}

// geminiSession is one headless run.
type geminiSession struct {
	out                   *out
	cwd, model, session   string
	format                string
	yolo                  bool
	mcp                   mcpSet
	start                 time.Time
	prompt, output, cache int64
	calls                 int
}

func gemini(args []string) int {
	f, err := parseGeminiFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Usage: gemini [options] [command]")
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if !f.hasPrompt {
		fmt.Fprintln(os.Stderr, "standin: gemini's interactive mode is not reproduced: use -p")
		return 1
	}
	home := os.Getenv("GEMINI_CLI_HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	settingsPath := filepath.Join(home, ".gemini", "settings.json")
	var settings struct {
		Model struct {
			MaxSessionTurns *int `json:"maxSessionTurns"`
		} `json:"model"`
		MCPServers map[string]struct {
			Command string            `json:"command"`
			Args    []string          `json:"args"`
			Env     map[string]string `json:"env"`
			Cwd     string            `json:"cwd"`
			HTTPURL string            `json:"httpUrl"`
		} `json:"mcpServers"`
	}
	if data, err := os.ReadFile(settingsPath); err == nil {
		if err := json.Unmarshal(data, &settings); err != nil {
			fmt.Fprintf(os.Stderr, "Error in %s: %v\nPlease fix the configuration file and try again.\n", settingsPath, err)
			return 1
		}
	}
	base, key := os.Getenv("GOOGLE_GEMINI_BASE_URL"), os.Getenv("GEMINI_API_KEY")
	if base == "" && key == "" {
		fmt.Fprintf(os.Stderr, "Please set an Auth method in your %s or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA\n", settingsPath)
		return 41
	}
	if base == "" {
		fmt.Fprintln(os.Stderr, "standin: GOOGLE_GEMINI_BASE_URL is unset: the stand-in never calls Google's API")
		return 1
	}
	if u, err := url.Parse(base); err != nil || u.Host == "" || (u.Scheme != "https" && !isLoopback(u.Hostname())) {
		fmt.Fprintf(os.Stderr, "Invalid custom base URL: %s\n", base)
		return 1
	}
	maxTurns := -1
	if settings.Model.MaxSessionTurns != nil {
		maxTurns = *settings.Model.MaxSessionTurns
	}
	cwd, _ := os.Getwd()
	s := &geminiSession{out: newOut(), cwd: cwd, model: f.model, session: newUUID(), format: f.outputFormat, yolo: f.yolo, start: time.Now()}
	defer s.out.saveSession(filepath.Join(home, ".gemini", "tmp", newID(8), "chats", "session-"+s.session+".json"))
	for name, sv := range settings.MCPServers {
		if sv.Command == "" {
			fmt.Fprintf(os.Stderr, "standin: MCP server %s: only stdio servers are reproduced\n", name)
			continue
		}
		dir := cwd
		if sv.Cwd != "" {
			dir = sv.Cwd
		}
		m, err := startMCP(name, sv.Command, sv.Args, sv.Env, dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "standin:", err)
			continue
		}
		s.mcp = append(s.mcp, m)
	}
	defer s.mcp.close()

	s.emit(map[string]any{"type": "init", "timestamp": stamp(), "session_id": s.session, "model": f.model})
	s.emit(map[string]any{"type": "message", "timestamp": stamp(), "role": "user", "content": f.prompt})
	endpoint := strings.TrimSuffix(base, "/") + "/v1beta/models/" + url.PathEscape(f.model) + ":streamGenerateContent?alt=sse"
	header := http.Header{"X-Goog-Api-Key": {key}}
	contents := []geminiContent{{Role: "user", Parts: []geminiPart{{Text: f.prompt}}}}
	var text strings.Builder
	for turn := 1; ; turn++ {
		if maxTurns >= 0 && turn > maxTurns {
			return s.fail("FatalTurnLimitedError", "Reached max session turns for this session. Increase the number of turns by specifying maxSessionTurns in settings.json.", 53)
		}
		reply, err := s.generate(endpoint, header, contents)
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				return s.fail("ApiError", fmt.Sprintf("[API Error: %s]", he.body), he.status)
			}
			return s.fail("Error", err.Error(), 1)
		}
		contents = append(contents, geminiContent{Role: "model", Parts: reply})
		var responses []geminiPart
		for _, p := range reply {
			switch {
			case p.FunctionCall != nil:
				responses = append(responses, s.runTool(p.FunctionCall))
			case p.Text != "" && !p.Thought:
				text.WriteString(p.Text)
			}
		}
		if len(responses) == 0 {
			break
		}
		text.Reset()
		contents = append(contents, geminiContent{Role: "user", Parts: responses})
	}
	switch s.format {
	case "stream-json":
		s.emit(map[string]any{"type": "result", "timestamp": stamp(), "status": "success", "stats": s.stats()})
	case "json":
		s.out.event(map[string]any{"session_id": s.session, "response": text.String(), "stats": s.stats()})
	default:
		fmt.Println(text.String())
	}
	return 0
}

func isLoopback(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

func stamp() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }

// emit writes a stream-json event, in that format only.
func (s *geminiSession) emit(ev map[string]any) {
	if s.format == "stream-json" {
		s.out.event(ev)
	}
}

// fail ends the run on an error, as handleError does.
func (s *geminiSession) fail(kind, msg string, code int) int {
	switch s.format {
	case "stream-json":
		s.out.event(map[string]any{"type": "result", "timestamp": stamp(), "status": "error", "error": map[string]string{"type": kind, "message": msg}, "stats": s.stats()})
	case "json":
		s.out.event(map[string]any{"session_id": s.session, "error": map[string]any{"type": kind, "message": msg, "code": code}})
	default:
		fmt.Fprintln(os.Stderr, msg)
	}
	return code
}

func (s *geminiSession) stats() map[string]any {
	model := map[string]any{"total_tokens": s.prompt + s.output, "input_tokens": s.prompt, "output_tokens": s.output, "cached": s.cache, "input": s.prompt - s.cache}
	return map[string]any{
		"total_tokens": s.prompt + s.output, "input_tokens": s.prompt, "output_tokens": s.output,
		"cached": s.cache, "input": s.prompt - s.cache, "duration_ms": time.Since(s.start).Milliseconds(),
		"tool_calls": s.calls, "models": map[string]any{s.model: model},
	}
}

// generate makes one streaming generateContent request, writing the
// text as it comes: the parts of the model's answer.
func (s *geminiSession) generate(endpoint string, header http.Header, contents []geminiContent) ([]geminiPart, error) {
	resp, err := post(context.Background(), endpoint, header, map[string]any{
		"contents":          contents,
		"systemInstruction": geminiContent{Role: "user", Parts: []geminiPart{{Text: "You are Gemini CLI, a coding agent. Working directory: " + s.cwd}}},
		"tools":             []map[string]any{{"functionDeclarations": s.toolDefs()}},
	})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var parts []geminiPart
	// Each chunk's usageMetadata holds the counts so far: the last one
	// stands for the request, as Gemini CLI's LoggingContentGenerator
	// takes it.
	var last struct{ prompt, output, cache int64 }
	defer func() { s.prompt, s.output, s.cache = s.prompt+last.prompt, s.output+last.output, s.cache+last.cache }()
	err = readSSE(resp.Body, func(_ string, data []byte) error {
		var chunk struct {
			Candidates []struct {
				Content geminiContent `json:"content"`
			} `json:"candidates"`
			UsageMetadata *struct {
				PromptTokenCount        int64 `json:"promptTokenCount"`
				CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
				CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
			} `json:"usageMetadata"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			return fmt.Errorf("stream chunk: %w", err)
		}
		if chunk.Error != nil {
			return errors.New(chunk.Error.Message)
		}
		if u := chunk.UsageMetadata; u != nil {
			last.prompt, last.output, last.cache = u.PromptTokenCount, u.CandidatesTokenCount, u.CachedContentTokenCount
		}
		for _, c := range chunk.Candidates {
			for _, p := range c.Content.Parts {
				if p.Text != "" && !p.Thought {
					s.emit(map[string]any{"type": "message", "timestamp": stamp(), "role": "assistant", "content": p.Text, "delta": true})
				}
				if p.FunctionCall != nil {
					if p.FunctionCall.ID == "" {
						p.FunctionCall.ID = p.FunctionCall.Name + "-" + strconv.FormatInt(time.Now().UnixMilli(), 10) + "-" + newID(6)
					}
					s.emit(map[string]any{"type": "tool_use", "timestamp": stamp(), "tool_name": p.FunctionCall.Name, "tool_id": p.FunctionCall.ID, "parameters": p.FunctionCall.Args})
				}
				parts = append(parts, p)
			}
		}
		return nil
	})
	return parts, err
}

// toolDefs are the function declarations offered to the model: headless
// mode offers the tools that need approval only with yolo.
func (s *geminiSession) toolDefs() []map[string]any {
	var defs []map[string]any
	if s.yolo {
		defs = append(defs, map[string]any{
			"name": "run_shell_command", "description": "Executes a given shell command as `bash -c <command>`.",
			"parametersJsonSchema": json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"description":{"type":"string"},"directory":{"type":"string"}},"required":["command"]}`),
		}, map[string]any{
			"name": "write_file", "description": "Writes content to a specified file in the local filesystem.",
			"parametersJsonSchema": json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"},"content":{"type":"string"}},"required":["file_path","content"]}`),
		})
	}
	for _, m := range s.mcp {
		for _, t := range m.tools {
			defs = append(defs, map[string]any{"name": "mcp_" + m.name + "_" + t.Name, "description": t.Description, "parametersJsonSchema": t.InputSchema})
		}
	}
	return defs
}

// runTool runs a function call, writing its tool_result: the response
// part for the model.
func (s *geminiSession) runTool(c *geminiCall) geminiPart {
	s.calls++
	var output string
	var display *string
	failed := false
	switch c.Name {
	case "run_shell_command":
		var in struct {
			Command   string `json:"command"`
			Directory string `json:"directory"`
		}
		if json.Unmarshal(c.Args, &in) != nil || in.Command == "" {
			output, failed = "The 'command' parameter must be non-empty.", true
			break
		}
		dir := s.cwd
		if in.Directory != "" {
			dir = filepath.Join(s.cwd, in.Directory)
		}
		out, code := runShell(dir, in.Command)
		output = fmt.Sprintf("Command: %s\nDirectory: %s\nOutput: %s\nError: (none)\nExit Code: %d", in.Command, dir, out, code)
		display = &out
	case "write_file":
		var in struct {
			FilePath string `json:"file_path"`
			Content  string `json:"content"`
		}
		if json.Unmarshal(c.Args, &in) != nil || in.FilePath == "" {
			output, failed = "Missing or empty \"file_path\"", true
			break
		}
		path, err := writeFile(s.cwd, in.FilePath, in.Content)
		if err != nil {
			output, failed = "Error writing to file: "+err.Error(), true
			break
		}
		output = "Successfully created and wrote to new file: " + path + "."
		// Its display is a diff object, not a string: no output field.
	default:
		if m, tool := s.mcp.find(c.Name, "mcp_", "_"); m != nil {
			text, isErr, err := m.call(tool, c.Args)
			if err != nil {
				text, isErr = err.Error(), true
			}
			output, failed, display = text, isErr, &text
		} else {
			output, failed = fmt.Sprintf("Tool \"%s\" not found in registry.", c.Name), true
		}
	}
	ev := map[string]any{"type": "tool_result", "timestamp": stamp(), "tool_id": c.ID, "status": "success"}
	if failed {
		ev["status"] = "error"
		ev["error"] = map[string]string{"type": "TOOL_EXECUTION_ERROR", "message": output}
	} else if display != nil {
		ev["output"] = *display
	}
	s.emit(ev)
	resp := map[string]any{"output": output}
	if failed {
		resp = map[string]any{"error": output}
	}
	return geminiPart{FunctionResponse: &geminiResponse{ID: c.ID, Name: c.Name, Response: resp}}
}
