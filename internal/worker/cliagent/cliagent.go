// Package cliagent runs third-party CLI coding agents (opencode, Claude
// Code, Codex, Gemini CLI) non-interactively inside the sandbox, in place
// of the worker's own agent loop, and turns what they do into the worker's
// protocol lines.
//
// An agent is an [Adapter]: the argv, environment and files of one
// non-interactive run (the prompt, the checkout as its working directory,
// every action approved, the model), pointed at the run's LLM endpoints,
// which lead to the Amelia proxy with the run's token as the API key.
// Nothing else of the host's reaches the agent: no key, no credentials.
//
// What the agent does is shown either way:
//   - an agent that writes an event stream (Claude Code's stream-json,
//     Codex's --json) is an [EventStreamer]: its events are translated;
//   - an agent that prints only its final answer (opencode) is an
//     [Answerer]: its thinking, tool calls, tool results and usage are
//     derived from the LLM traffic it makes (see internal/worker/llmrelay),
//     and the answer it prints is the result.
//
// Adding an agent is adding one file: a type that implements Adapter and
// one of the two, listed in [All]. docs/agents.md walks through it.
package cliagent

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// Adapter is how one CLI agent runs non-interactively.
type Adapter interface {
	// Name is the agent's name in profiles and on the command line
	// (`--agent opencode`).
	Name() string
	// Binary is the agent's executable name, looked up on the sandbox's
	// PATH when the host uploads none.
	Binary() string
	// API is the LLM API the agent speaks by default: it is pointed at
	// the proxy's route for it.
	API() API
	// Command is the agent's argv, environment and files for run r.
	Command(r Run) (Command, error)
}

// EventStreamer is an Adapter whose agent writes its events on stdout.
type EventStreamer interface {
	Adapter
	// Events reads the agent's stdout to its end, writes each event as
	// protocol messages with emit (never a result or a usage line: the
	// worker writes those), and returns how the run ended as the agent
	// told it.
	Events(stdout io.Reader, emit func(*protocol.AgenticMessage) error) (Outcome, error)
}

// Answerer is an Adapter whose agent prints only its final answer; what
// it did is derived from its LLM traffic.
type Answerer interface {
	Adapter
	// Answer is the final answer in the agent's whole stdout.
	Answer(stdout []byte) (Outcome, error)
}

// Outcome is how an agent's run ended, as the agent told it.
type Outcome struct {
	// Result is the agent's final answer, or what went wrong.
	Result string
	// IsError is set when the agent reported its run failed.
	IsError bool
	// SessionID is the agent's own id of the run, if it gave one.
	SessionID string
	// Usage is the usage the agent reported, if any; nil lets the
	// worker count the LLM traffic instead.
	Usage *protocol.DriverUsage
}

// API names the LLM API an agent speaks.
type API string

// The APIs, and the proxy routes they are served on.
const (
	OpenAI    API = "openai"    // chat completions, on the proxy's /v1
	Anthropic API = "anthropic" // messages, on the proxy's /anthropic
)

// Run is one run of an agent.
type Run struct {
	// Binary is the agent's executable in the sandbox.
	Binary string
	// Prompt is the task.
	Prompt string
	// Cwd is the checkout the agent works in.
	Cwd string
	// Model is the model, as the profile's upstream knows it.
	Model string
	// MaxTurns bounds the agent's model calls, where the agent can be told.
	MaxTurns int
	// StateDir is a directory of this run's, outside the checkout, made
	// 0700: the agent's HOME, its configuration and its state go there,
	// so none of it lands on the result branch.
	StateDir string
	// LLM is where the agent reaches the model, and API the route it
	// takes there: the agent's own API unless the profile says.
	LLM Endpoints
	API API
	// MCP are the host's MCP servers the profile names, as the agent
	// reaches them from the sandbox.
	MCP []MCPServer
}

// Endpoints lead to the proxy's LLM routes. The key is the run's token:
// the proxy accepts it as Authorization: Bearer and as x-api-key.
type Endpoints struct {
	// OpenAIBase is the OpenAI-compatible base URL, ending in /v1.
	OpenAIBase string
	// AnthropicBase is the Anthropic base URL (the SDKs add /v1/messages).
	AnthropicBase string
	// Key is the API key the agent sends.
	Key string
}

// MCPServer is one of the host's MCP servers, as the agent reaches it.
type MCPServer struct {
	Name string
	// Command is the argv of the stdio bridge to the server
	// (amelia-worker mcp NAME), for agents that start MCP servers as
	// processes, and Env the variables it needs (the proxy's URL and the
	// run's token), which the agent's own environment does not hold.
	Command []string
	Env     map[string]string
	// URL and Headers reach the server as streamable HTTP through the
	// run's tunnel, for agents that speak it.
	URL     string
	Headers map[string]string
}

// Command is an agent's process for one run.
type Command struct {
	// Argv is the command line; Argv[0] is Run.Binary.
	Argv []string
	// Env is added to the worker's environment, whose proxy variables
	// (AMELIA_PROXY_*) the agent does not get.
	Env map[string]string
	// Files are written before the agent starts.
	Files []File
	// Stdin is the agent's standard input; "" gives it none.
	Stdin string
}

// File is a file an agent needs, such as its configuration.
type File struct {
	// Path is absolute, under Run.StateDir.
	Path string
	Data []byte
	// Mode is its permission bits; 0 is 0600.
	Mode uint32
}

// All lists every adapter, the worker's own agent aside.
func All() []Adapter {
	return []Adapter{opencode{}, claudeCode{}, codex{}, gemini{}}
}

// Lookup returns the adapter named name.
func Lookup(name string) (Adapter, error) {
	for _, a := range All() {
		if a.Name() == name {
			return a, nil
		}
	}
	return nil, fmt.Errorf("no agent %q: use one of %s", name, strings.Join(Names(), ", "))
}

// Names are the adapters' names, sorted.
func Names() []string {
	var n []string
	for _, a := range All() {
		n = append(n, a.Name())
	}
	slices.Sort(n)
	return n
}

// orEmpty is m, or an empty map for nil: an MCP server's env in JSON.
func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
