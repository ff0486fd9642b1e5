package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/agentbin/agentbintest"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
)

// End-to-end tests of amelia run with a CLI agent: the real opencode,
// uploaded into the sandbox from the host, against the scripted model.

// opencodeCall is a call of one of opencode's tools.
func opencodeCall(name string, args map[string]any) llmtest.ToolCall {
	b, _ := json.Marshal(args)
	return llmtest.ToolCall{Name: name, Arguments: string(b)}
}

// amelia run --agent opencode on docker and over ssh, through the
// proxy's OpenAI route and through its Anthropic route (which the proxy
// translates for the profile's OpenAI-only upstream), with the host's MCP
// server bridged in: the branch comes back with the file opencode wrote,
// --json shows its tool calls and their results, derived from its LLM
// traffic, the MCP tool answered from the host and its call is in the
// audit log, every LLM request reached the upstream with the host's key,
// and the key is nowhere in the sandbox.
func TestRunCLIAgentOpencode(t *testing.T) {
	bins := agentbintest.Binaries(t)
	for _, provider := range []string{"docker", "ssh"} {
		for _, api := range []string{"openai", "anthropic"} {
			t.Run(provider+"/"+api, func(t *testing.T) {
				opts := llmtest.Options{Script: llmtest.AgentScript(
					llmtest.Turn{Text: "Writing the file.", ToolCalls: []llmtest.ToolCall{opencodeCall("write", map[string]any{"file_path": "hello.txt", "content": "hello from opencode\n"})}},
					llmtest.Turn{ToolCalls: []llmtest.ToolCall{opencodeCall("bash", map[string]any{"command": "env | sort | sed -n 's/^\\(AMELIA_[A-Z_]*\\|[A-Z_]*API_KEY\\)=.*/\\1/p'; echo PROBED"})}},
					llmtest.Turn{ToolCalls: []llmtest.ToolCall{opencodeCall("everything_greet", map[string]any{"name": "amelia"})}},
					llmtest.Turn{Text: "Done: hello.txt is written.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
				)}
				var h *host
				switch provider {
				case "docker":
					cli := dockertest.Engine(t)
					h = newHostWith(t, dockerSandbox("open"), "", opts)
					dockertest.RemoveContainers(t, cli, "amelia.config="+h.configPath())
					defer assertKeyNotInContainer(t, h, cli)
				case "ssh":
					srv := sshtest.Start(t, sshtest.Options{})
					root := t.TempDir()
					h = newHostWith(t, sshSandbox(t, srv, root), root, opts)
					t.Cleanup(func() {
						h.amelia(t, "sandbox", "down")
						assertNoSecret(t, upstreamKey, root)
					})
				}
				h.addProfileYAML(t, fmt.Sprintf("    agent: {name: opencode, binary: %q}\n    mcp: {everything: {command: [%q]}}\n", bins.Opencode, bins.MCPEverything))
				wf := "oc-" + provider + "-" + api
				r := h.amelia(t, "run", "--json", "--agent-api", api, "--workflow", wf, "Write hello.txt.")
				if r.code != 0 {
					t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
				}
				if got := h.git(t, "show", "amelia/"+wf+":hello.txt"); got != "hello from opencode" {
					t.Errorf("hello.txt on the branch: %q", got)
				}
				if files := h.git(t, "ls-tree", "-r", "--name-only", "amelia/"+wf); files != "README.md\nhello.txt" {
					t.Errorf("the branch holds %q, want README.md and hello.txt only (no agent state)", files)
				}
				var calls []string
				var result string
				for _, ev := range events(t, r.stdout) {
					switch ev.Type {
					case "tool_call":
						calls = append(calls, *ev.ToolName)
					case "result":
						result = *ev.Content
					}
				}
				if strings.Join(calls, ",") != "write,bash,everything_greet" || result != "Done: hello.txt is written." {
					t.Errorf("--json showed tool calls %q and result %q\n%s", calls, result, r.stdout)
				}
				probed := toolOutput(t, r.stdout, "PROBED")
				if !strings.Contains(probed, "PROBED") || strings.Contains(probed, "AMELIA_PROXY_TOKEN") {
					t.Errorf("the agent's tools see the proxy's variables, or the probe did not run:\n%s", probed)
				}
				if greeted := toolOutput(t, r.stdout, "Hi amelia"); greeted == "" {
					t.Errorf("the MCP tool's answer from the host is not shown:\n%s", r.stdout)
				}
				reqs := h.up.Requests()
				if len(reqs) < 4 {
					t.Errorf("the upstream got %d requests, want the agent's 4 and its title's", len(reqs))
				}
				for i, req := range reqs {
					if got := req.Header.Get("Authorization"); got != "Bearer "+upstreamKey {
						t.Errorf("LLM request %d: Authorization %q, want the host's key (added by the proxy)", i, got)
					}
					if req.Chat.Model != "test-model" {
						t.Errorf("LLM request %d asked for model %q, not the profile's", i, req.Chat.Model)
					}
				}
				if strings.Contains(r.stdout+r.stderr, upstreamKey) {
					t.Error("the upstream key appears in amelia's output")
				}
				// The Anthropic route's requests reached the OpenAI-only
				// upstream translated; the OpenAI route's as they were.
				audit, _ := filepath.Glob(filepath.Join(h.home, ".local", "state", "amelia", "audit", "*.jsonl"))
				var log []byte
				for _, f := range audit {
					b, _ := os.ReadFile(f)
					log = append(log, b...)
				}
				// (The audit log escapes '>' as JSON does.)
				translated := bytes.Count(log, []byte(`"translated":"anthropic-\u003eopenai"`))
				if (api == "anthropic") != (translated >= 4) || (api == "openai" && translated != 0) {
					t.Errorf("route %s: %d requests translated from Anthropic's API in the audit logs %v", api, translated, audit)
				}
				if !bytes.Contains(log, []byte(`"mcp_server":"everything","tool":"greet"`)) {
					t.Errorf("the MCP call is not in the audit log:\n%s", log)
				}
			})
		}
	}
}

// A CLI agent's run outlives its host as the worker's own agent's does:
// amelia killed while opencode waits at the gate, the agent goes on in
// the sandbox (its relay and tunnel are its supervisor's), sandbox ls and
// logs show it, and attach takes it over to its branch.
func TestCLIAgentRunOutlivesItsHost(t *testing.T) {
	opencode := agentbintest.Binaries(t).Opencode
	g := newGate(t)
	h := newHost(t, llmtest.Options{Script: llmtest.AgentScript(
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{opencodeCall("write", map[string]any{"file_path": "before.txt", "content": "before the fault\n"})}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{opencodeCall("bash", map[string]any{"command": g.command(), "timeout": 600000})}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{opencodeCall("write", map[string]any{"file_path": "after.txt", "content": "after the fault\n"})}},
		llmtest.Turn{Text: "done despite the fault"},
	)})
	h.addProfileYAML(t, fmt.Sprintf("    agent: {name: opencode, binary: %q}\n", opencode))
	// (opencode's bash gives a command a minute unless told, up to ten:
	// the gate may stay shut longer on a loaded machine.)
	h.attachAfterHostDied(t, g, "cli-orphan")
}

// The worker's own agent gets the profile's MCP servers too, as tools
// named mcp__SERVER__TOOL, answered by the host's server.
func TestRunOwnAgentCallsAnMCPTool(t *testing.T) {
	everything := agentbintest.Binaries(t).MCPEverything
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{Name: "mcp__everything__greet", Arguments: `{"name": "amelia"}`}}},
		llmtest.Turn{Text: "Greeted."},
	)
	h.addProfileYAML(t, fmt.Sprintf("    mcp: {everything: {command: [%q]}}\n", everything))
	r := h.amelia(t, "run", "--json", "--workflow", "own-mcp", "Greet amelia.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	if toolOutput(t, r.stdout, "Hi amelia") == "" {
		t.Errorf("the MCP tool's answer is not shown:\n%s", r.stdout)
	}
}
