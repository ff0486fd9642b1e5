package worker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/worker/agent"
	"github.com/amelia-sandbox/amelia/internal/worker/cliagent"
	"github.com/amelia-sandbox/amelia/internal/worker/llmrelay"
)

// OwnAgent is the worker's own agent, the default of --agent.
const OwnAgent = "amelia"

// cliAgentJob is what an agentic run of a CLI agent adds to agenticJob.
type cliAgentJob struct {
	name string // the adapter's name; "" or OwnAgent is the worker's own
	bin  string // the agent's executable; "" looks it up on PATH
	api  string // the route it takes to the model; "" is its own
	// stateDir holds the agent's HOME, configuration and state, outside
	// the checkout; "" makes a temporary one, removed at the end.
	stateDir string
	// mcp names the profile's MCP servers the agent reaches through the
	// bridge (amelia-worker mcp NAME).
	mcp []string
}

// agentStopGrace is how long a stopped agent has between SIGTERM and
// SIGKILL.
const agentStopGrace = 10 * time.Second

// maxAnswer bounds what an Answerer's stdout may hold.
const maxAnswer = 16 << 20

// cliAgentic runs the CLI agent of j through the LLM relay and writes
// its messages, then its result and the run's usage, to out.
func (w *worker) cliAgentic(ctx context.Context, out *protocol.Encoder, j agenticJob) error {
	start := time.Now()
	a, err := cliagent.Lookup(j.agent.name)
	if err != nil {
		return setupError{err}
	}
	bin := j.agent.bin
	if bin == "" {
		if bin, err = exec.LookPath(a.Binary()); err != nil {
			return setupError{fmt.Errorf("the agent %s is not in the sandbox (no %s on PATH): bake it into the sandbox's image, or have amelia upload it (the profile's agent.binary)", a.Name(), a.Binary())}
		}
	}
	api := cliagent.API(j.agent.api)
	if api == "" {
		api = a.API()
	}
	proxy, token := w.p.Getenv(EnvProxyURL), w.p.Getenv(EnvProxyToken)
	if proxy == "" || token == "" {
		return setupError{fmt.Errorf("%s and %s must be set: a CLI agent reaches the model only through the amelia proxy", EnvProxyURL, EnvProxyToken)}
	}
	stateDir := j.agent.stateDir
	if stateDir == "" {
		if stateDir, err = os.MkdirTemp("", "amelia-agent-"); err != nil {
			return setupError{fmt.Errorf("make the agent's state directory: %w", err)}
		}
		defer os.RemoveAll(stateDir)
	} else if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return setupError{fmt.Errorf("make the agent's state directory: %w", err)}
	}
	enc := &syncEncoder{enc: out}
	_, answers := a.(cliagent.Answerer)
	relay, err := llmrelay.Start(llmrelay.Options{Proxy: proxy, Model: j.model, Show: answers, Emit: enc.Encode, Logger: w.log})
	if err != nil {
		return setupError{err}
	}
	defer relay.Close()
	mcp, err := mcpBridges(j.agent.mcp, proxy, token)
	if err != nil {
		return setupError{err}
	}
	cmd, err := a.Command(cliagent.Run{
		Binary: bin, Prompt: j.prompt, Cwd: j.cwd, Model: j.model, MaxTurns: j.maxTurns, StateDir: stateDir, API: api,
		LLM: cliagent.Endpoints{OpenAIBase: relay.URL() + "/v1", AnthropicBase: relay.URL() + "/anthropic", Key: token},
		MCP: mcp,
	})
	if err != nil {
		return setupError{err}
	}
	for _, f := range cmd.Files {
		if err := writeAgentFile(stateDir, f); err != nil {
			return setupError{err}
		}
	}
	w.log.Info("agentic run", "agent", a.Name(), "binary", bin, "api", api, "model", j.model, "cwd", j.cwd)
	outcome, runErr := w.runCLIAgent(ctx, a, cmd, j.cwd, enc)
	// In-flight requests end with the agent; their usage is counted
	// once the relay has shut down.
	relay.Close()
	if err := relay.Err(); err != nil && runErr == nil {
		runErr = err
	}
	res := &protocol.AgenticMessage{Type: protocol.Result, Content: &outcome.Result, Model: &j.model, IsError: outcome.IsError}
	if outcome.SessionID != "" {
		res.SessionID = &outcome.SessionID
	}
	if runErr != nil {
		msg := runErr.Error()
		res.Content, res.IsError = &msg, true
	}
	usage := outcome.Usage
	if usage == nil {
		usage = relayUsage(relay.Usage())
	}
	usage.Model, usage.DurationMs = &j.model, new(time.Since(start).Milliseconds())
	if err := enc.Encode(res); err != nil {
		return errors.Join(runErr, err)
	}
	if err := enc.Encode(&protocol.AgenticMessage{Type: protocol.Usage, Usage: usage}); err != nil {
		return errors.Join(runErr, err)
	}
	if runErr == nil && outcome.IsError {
		runErr = fmt.Errorf("%s reported its run failed", a.Name())
	}
	return runErr
}

// mcpBridges are the MCP servers names, each reached through this
// worker's bridge subcommand with the proxy's URL and the run's token.
func mcpBridges(names []string, proxy, token string) ([]cliagent.MCPServer, error) {
	if len(names) == 0 {
		return nil, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this worker, the MCP servers' bridge: %w", err)
	}
	var out []cliagent.MCPServer
	for _, n := range names {
		if !validMCPName(n) {
			return nil, fmt.Errorf("--mcp %q: an MCP server's name is letters, digits, '-' and '_'", n)
		}
		out = append(out, cliagent.MCPServer{
			Name: n, Command: []string{self, "mcp", n},
			Env: map[string]string{EnvProxyURL: proxy, EnvProxyToken: token},
		})
	}
	return out, nil
}

// validMCPName says whether n can name an MCP server: in a URL path, an
// argv word and the agents' configuration keys.
func validMCPName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// runCLIAgent runs cmd in cwd until it ends and returns how it ended. A
// cancelled ctx stops it (SIGTERM to its process group, then SIGKILL),
// and the run is interrupted.
func (w *worker) runCLIAgent(ctx context.Context, a cliagent.Adapter, cmd cliagent.Command, cwd string, enc *syncEncoder) (cliagent.Outcome, error) {
	c := exec.Command(cmd.Argv[0], cmd.Argv[1:]...)
	c.Dir = cwd
	c.Env = withEnv(agentEnviron(os.Environ()), cmd.Env)
	if cmd.Stdin != "" {
		c.Stdin = strings.NewReader(cmd.Stdin)
	}
	var stderr stderrTail
	c.Stderr = io.MultiWriter(&stderr, w.p.Stderr)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := c.StdoutPipe()
	if err != nil {
		return cliagent.Outcome{}, err
	}
	if err := c.Start(); err != nil {
		return cliagent.Outcome{}, fmt.Errorf("start %s: %w", a.Name(), err)
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
			t := time.NewTimer(agentStopGrace)
			defer t.Stop()
			select {
			case <-t.C:
				syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			case <-stopped:
			}
		case <-stopped:
		}
	}()
	var outcome cliagent.Outcome
	var answer []byte
	var readErr error
	switch ad := a.(type) {
	case cliagent.EventStreamer:
		outcome, readErr = ad.Events(stdout, enc.Encode)
	case cliagent.Answerer:
		answer, readErr = io.ReadAll(io.LimitReader(stdout, maxAnswer))
	}
	io.Copy(io.Discard, stdout)
	waitErr := c.Wait()
	close(stopped)
	switch {
	case ctx.Err() != nil:
		return cliagent.Outcome{}, agent.ErrInterrupted
	case waitErr != nil:
		return cliagent.Outcome{}, fmt.Errorf("%s failed: %v%s", a.Name(), waitErr, failureNote(&stderr))
	case readErr != nil:
		return cliagent.Outcome{}, fmt.Errorf("read what %s wrote: %w", a.Name(), readErr)
	}
	if ad, ok := a.(cliagent.Answerer); ok {
		return ad.Answer(bytes.TrimSpace(answer))
	}
	return outcome, nil
}

// stderrTail keeps the last bytes an agent wrote to stderr, for the
// message of its failure. (core/execreport's Stderr would link the
// provider contract into the worker.)
type stderrTail struct {
	mu  sync.Mutex
	buf []byte
}

const stderrTailMax = 4 << 10

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - stderrTailMax; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// failureNote is what an agent's stderr says of its failure: its last
// "Error:" line, which CLIs built with cobra follow with their usage, or
// else its last non-blank line.
func failureNote(stderr *stderrTail) string {
	stderr.mu.Lock()
	defer stderr.mu.Unlock()
	var errLine, last string
	for l := range strings.SplitSeq(string(stderr.buf), "\n") {
		switch l = strings.TrimSpace(l); {
		case strings.HasPrefix(l, "Error:"):
			errLine = l
		case l != "":
			last = l
		}
	}
	if note := cmp.Or(errLine, last); note != "" {
		return ": " + strings.ToValidUTF8(note, "?")
	}
	return ""
}

// agentEnviron is the worker's environment without what leads to the
// proxy: the agent reaches it through the relay.
func agentEnviron(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "AMELIA_PROXY_") {
			out = append(out, kv)
		}
	}
	return out
}

// writeAgentFile writes one of an agent's files, which must be in its
// state directory.
func writeAgentFile(stateDir string, f cliagent.File) error {
	rel, err := filepath.Rel(stateDir, f.Path)
	if err != nil || !filepath.IsAbs(f.Path) || rel == "." || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("the agent's file %s is not in its state directory %s", f.Path, stateDir)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o700); err != nil {
		return fmt.Errorf("write the agent's %s: %w", rel, err)
	}
	mode := os.FileMode(f.Mode)
	if mode == 0 {
		mode = 0o600
	}
	if err := os.WriteFile(f.Path, f.Data, mode); err != nil {
		return fmt.Errorf("write the agent's %s: %w", rel, err)
	}
	return nil
}

// relayUsage is the usage line's figures from what the relay counted.
func relayUsage(u llmrelay.Usage) *protocol.DriverUsage {
	return &protocol.DriverUsage{
		InputTokens: new(u.Input), OutputTokens: new(u.Output),
		CacheReadTokens: new(u.CacheRead), CacheCreationTokens: new(u.CacheWrite),
		NumTurns: new(u.Turns),
	}
}

// syncEncoder writes protocol lines from several goroutines: the relay's
// and the one reading the agent's events.
type syncEncoder struct {
	mu  sync.Mutex
	enc *protocol.Encoder
}

func (e *syncEncoder) Encode(m *protocol.AgenticMessage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(m)
}
