// Package agents lists the agents a run can have, as the host knows
// them: the worker's own, and the CLI agents the worker runs through an
// adapter (internal/worker/cliagent) — their names, the API each speaks
// by default, and how each gets into the sandbox.
package agents

import (
	"fmt"
	"strings"
)

// Own is the worker's own agent, the default.
const Own = "amelia"

// Agent is one agent.
type Agent struct {
	// Name is its name in profiles and on the command line.
	Name string
	// Binary is its executable's name, on the sandbox's PATH when the
	// host uploads none; "" for the worker's own.
	Binary string
	// Uploadable says the agent is one static Linux executable the host
	// can put into the sandbox as it does the worker (agent.binary, or
	// Binary on the host's PATH); otherwise the sandbox's image must
	// have it.
	Uploadable bool
	// API is the LLM API it speaks unless the profile says otherwise:
	// "openai", "anthropic" or "gemini".
	API string
	// APIs are the APIs it can be pointed at.
	APIs []string
}

var all = []Agent{
	{Name: Own, API: "openai", APIs: []string{"openai"}},
	{Name: "opencode", Binary: "opencode", Uploadable: true, API: "openai", APIs: []string{"openai", "anthropic"}},
	{Name: "claude-code", Binary: "claude", API: "anthropic", APIs: []string{"anthropic"}},
	{Name: "codex", Binary: "codex", API: "openai", APIs: []string{"openai"}},
	{Name: "gemini", Binary: "gemini", API: "gemini", APIs: []string{"gemini"}},
}

// All lists the agents, the worker's own first.
func All() []Agent { return append([]Agent(nil), all...) }

// Lookup returns the agent named name.
func Lookup(name string) (Agent, error) {
	for _, a := range all {
		if a.Name == name {
			return a, nil
		}
	}
	return Agent{}, fmt.Errorf("no agent %q: use one of %s", name, strings.Join(Names(), ", "))
}

// Names are the agents' names, the worker's own first.
func Names() []string {
	n := make([]string, len(all))
	for i, a := range all {
		n[i] = a.Name
	}
	return n
}

// CheckAPI says whether a can be pointed at api.
func (a Agent) CheckAPI(api string) error {
	for _, x := range a.APIs {
		if x == api {
			return nil
		}
	}
	return fmt.Errorf("the agent %s speaks %s, not %q", a.Name, strings.Join(a.APIs, " or "), api)
}
