package cliagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
)

// opencode is opencode (github.com/opencode-ai/opencode), a Go CLI agent:
// a static binary the host can upload.
//
// Non-interactive, it runs `opencode -p PROMPT -f json -q -c CWD`,
// approves every action of the session itself, and prints one JSON
// object, {"response": ...}, at the end: nothing of what it did on the
// way, which the worker derives from its LLM traffic.
//
// Its OpenAI route is its "local" provider: LOCAL_ENDPOINT (it ignores
// OPENAI_BASE_URL). At start-up it lists the models at
// LOCAL_ENDPOINT's host root (/api/v0/models, then /v1/models), without
// a key and only once, and takes the first one: the worker's relay
// answers both with the run's model. Its Anthropic route is
// ANTHROPIC_BASE_URL with ANTHROPIC_API_KEY. Its configuration (the
// model of each of its agents, the key, its MCP servers, and where its
// database goes, data.directory, which would otherwise be .opencode/ in
// the checkout) is $HOME/.opencode.json, HOME being in the run's state
// directory.
type opencode struct{}

func (opencode) Name() string   { return "opencode" }
func (opencode) Binary() string { return "opencode" }
func (opencode) API() API       { return OpenAI }

// opencodeMaxTokens is what opencode may ask the model for per answer:
// without it, the local provider asks for its context window's 4096.
const opencodeMaxTokens = 8192

// opencodeAnthropicModel is the model opencode's anthropic provider is
// configured with: one it knows. The relay asks the upstream for the
// run's model whatever the agent names.
const opencodeAnthropicModel = "claude-4-sonnet"

// maxArgPrompt bounds a prompt passed as one argument: Linux refuses a
// single argument over 128 KiB.
const maxArgPrompt = 120 << 10

func (o opencode) Command(r Run) (Command, error) {
	if len(r.Prompt) > maxArgPrompt {
		return Command{}, fmt.Errorf("opencode takes its prompt as one argument, at most %d KiB; this one is %d KiB: shorten it", maxArgPrompt>>10, len(r.Prompt)>>10)
	}
	home := filepath.Join(r.StateDir, "home")
	env := map[string]string{
		"HOME":            home,
		"XDG_CONFIG_HOME": filepath.Join(home, ".config"),
	}
	model := "local." + r.Model
	provider := "local"
	switch r.API {
	case OpenAI, "":
		env["LOCAL_ENDPOINT"] = r.LLM.OpenAIBase
	case Anthropic:
		env["ANTHROPIC_BASE_URL"] = r.LLM.AnthropicBase
		env["ANTHROPIC_API_KEY"] = r.LLM.Key
		model, provider = opencodeAnthropicModel, "anthropic"
	default:
		return Command{}, fmt.Errorf("opencode speaks the openai and anthropic APIs, not %q", r.API)
	}
	agent := map[string]any{"model": model, "maxTokens": opencodeMaxTokens}
	mcp := map[string]any{}
	for _, s := range r.MCP {
		if len(s.Command) == 0 {
			return Command{}, errors.New("opencode reaches MCP servers over stdio: MCP server " + s.Name + " has no bridge command")
		}
		env := []string{}
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			env = append(env, k+"="+s.Env[k])
		}
		mcp[s.Name] = map[string]any{"type": "stdio", "command": s.Command[0], "args": s.Command[1:], "env": env}
	}
	cfg := map[string]any{
		"data":       map[string]any{"directory": filepath.Join(r.StateDir, "data")},
		"providers":  map[string]any{provider: map[string]any{"apiKey": r.LLM.Key}},
		"agents":     map[string]any{"coder": agent, "task": agent, "summarizer": agent, "title": map[string]any{"model": model, "maxTokens": 80}},
		"mcpServers": mcp,
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return Command{}, fmt.Errorf("write opencode's configuration: %w", err)
	}
	return Command{
		Argv:  []string{r.Binary, "-p", r.Prompt, "-f", "json", "-q", "-c", r.Cwd},
		Env:   env,
		Files: []File{{Path: filepath.Join(home, ".opencode.json"), Data: data}},
	}, nil
}

// Answer reads opencode's {"response": ...}, which it prints last and
// indented. Other lines may come before it on stdout: its MCP client
// (mcp-go) prints "Error reading response: ..." there when a server's
// stdout closes as opencode ends.
func (opencode) Answer(stdout []byte) (Outcome, error) {
	for start := bytes.LastIndex(stdout, []byte("{")); start >= 0; start = bytes.LastIndex(stdout[:start], []byte("{")) {
		if start > 0 && stdout[start-1] != '\n' {
			continue
		}
		var out struct {
			Response *string `json:"response"`
		}
		if json.Unmarshal(stdout[start:], &out) == nil && out.Response != nil {
			return Outcome{Result: *out.Response}, nil
		}
	}
	return Outcome{}, fmt.Errorf("opencode's output has no {\"response\": ...} object: %q", clip(stdout))
}

// clip is the start of b, for messages.
func clip(b []byte) string {
	const most = 200
	if len(b) > most {
		return string(b[:most]) + "..."
	}
	return string(b)
}
