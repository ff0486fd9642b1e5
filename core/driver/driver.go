// Package driver runs amelia-worker inside a sandbox and turns what it writes
// into Go values: the library under `amelia run`, usable by any program that
// holds an [sandboxexec.Execer] (core/sandbox's Sandbox, or a provider with a ref).
//
// Everything goes through Exec, so it works on every provider: the worker is
// streamed in over Exec stdin ([Installer.EnsureWorker]), prompts are written
// to files in the sandbox over Exec stdin (never on a command line, where
// `ps` would show them and ARG_MAX would bound them), and the worker's
// stdout is read line by line with core/protocol's Decoder as it runs.
//
// A [Session] (Driver.Persistent) instead keeps one `amelia-worker serve`
// per sandbox for many ExecuteAgentic and Generate calls, the prompts
// inside its requests: one exec for the session's life rather than three
// per call, which matters most where opening a channel is expensive. The
// agent of `amelia run` does not use it: it runs detached (StartAgentic),
// so that it outlives its host.
//
// # Error contract
//
// The contract of the Python ContainerDriver, in Go terms:
//
//   - An empty or whitespace prompt, a bad workflow id or a missing model or
//     cwd: an error matching [sdk.ErrInvalid], before anything runs.
//   - A stdout line that is not JSON or not an AgenticMessage: an error at
//     once, wrapping the *protocol.LineError (line number and the line's
//     first 200 bytes); the worker is stopped, nothing more is read.
//   - The worker exits without a result line: an error matching
//     [ErrNoResult] ("worker did not emit a result message") with its exit
//     status and the tail of its stderr.
//   - The exec itself fails (sandbox gone, plugin crashed): an error naming
//     the provider, wrapping the provider's error (so sdk.ErrNotFound,
//     sdk.ErrUnavailable... still match).
//   - A non-zero exit after a successful result: an error matching
//     [ErrWorkerFailed]. A non-zero exit after a result with is_error is the
//     worker's documented way to fail (exit 1, or 130 when interrupted): the
//     failure is that result message, and ExecuteAgentic adds no error of
//     its own. Generate turns such a result into an error matching
//     ErrWorkerFailed.
//   - Generate with a schema, and an answer that does not match it: an
//     error. The worker validates the model's answer and asks once more;
//     when that fails too it reports the failure, which is an error
//     matching ErrWorkerFailed that says why. The host validates again what
//     the worker returns as valid, because the sandbox is not trusted: an
//     answer that does not match is an error matching [ErrSchemaMismatch].
//   - The context is cancelled: the worker's exec is cancelled (the provider
//     stops its process tree, SIGTERM then SIGKILL after the grace), and the
//     last thing ExecuteAgentic yields is an error matching ctx.Err().
//
// Prompt files are removed in every case: success, error, cancellation, and
// a consumer that stops iterating early.
package driver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/amelia-sandbox/amelia/core/agents"
	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Errors the driver's errors match with errors.Is; see the package
// documentation for when each one happens. A request that is wrong (the
// caller's fault; nothing ran in the sandbox) matches sdk.ErrInvalid.
var (
	// ErrNoResult: the worker exited without writing a result line.
	ErrNoResult = errors.New("worker did not emit a result message")
	// ErrWorkerFailed: the worker reported a failure (a result with
	// is_error, for Generate) or exited non-zero after a successful result.
	ErrWorkerFailed = errors.New("worker failed")
	// ErrSchemaMismatch: Generate's answer does not match the schema.
	ErrSchemaMismatch = errors.New("answer does not match the schema")
)

// Bounds of the driver's execs.
const (
	// cancelGrace is how long the worker's process tree has between SIGTERM
	// and SIGKILL once its exec is cancelled: the worker needs a moment to
	// write its interrupted result and usage.
	cancelGrace = 5 * time.Second
	// StopGrace is how long a stopped detached agent and what it started
	// have between SIGTERM and SIGKILL (DetachOptions.Grace's default).
	StopGrace = cancelGrace
	// cleanupTimeout bounds the removal of prompt files, which runs even
	// when the caller's context is done.
	cleanupTimeout = 30 * time.Second
	// fileTimeout bounds the exec that writes one file into the sandbox.
	fileTimeout = 2 * time.Minute
)

// Driver runs amelia-worker in one sandbox.
//
// A Driver runs one ExecuteAgentic at a time: [Driver.Usage] reports on the
// last one. Concurrent agentic runs (on one sandbox or several) use one
// Driver each; Driver values are cheap. Generate keeps no state in the
// Driver and may be called concurrently.
type Driver struct {
	// Exec reaches the sandbox.
	Exec sandboxexec.Execer
	// Worker is amelia-worker's absolute path inside the sandbox, as
	// [Installer.EnsureWorker] returns it.
	Worker string
	// Provider is the provider's name, for error messages.
	Provider string
	// Env is the worker's extra environment: AMELIA_PROXY_URL,
	// AMELIA_PROXY_TOKEN, and HTTP_PROXY/HTTPS_PROXY/NO_PROXY when the
	// network policy asks for them.
	Env map[string]string
	// MaxLineBytes bounds one line of the worker's stdout; zero means
	// protocol.DefaultMaxLineBytes.
	MaxLineBytes int
	Logger       *slog.Logger

	mu    sync.Mutex
	usage *protocol.DriverUsage
}

// AgenticRequest is one agentic run.
type AgenticRequest struct {
	// Workflow names the run; it becomes part of file names in the sandbox,
	// so it must be a valid workflow id (see [workspace.ValidateWorkflowID]).
	Workflow string
	// Prompt is the task; it must not be blank.
	Prompt string
	// Cwd is the directory inside the sandbox the worker's tools act in
	// (the workflow's worktree).
	Cwd string
	// Model is the model name, as the upstream knows it.
	Model string
	// Instructions are extra system instructions; may be empty. They go in
	// a file, like the prompt.
	Instructions string
	// MaxTurns bounds the LLM calls; zero means the worker's default.
	MaxTurns int
	// Agent is the agent that works on it: "" is the worker's own, else
	// a CLI agent the worker runs (core/agents).
	Agent AgentSpec
}

// AgentSpec names a CLI agent and how it runs.
type AgentSpec struct {
	// Name is the agent's (core/agents); "" is the worker's own.
	Name string
	// API is the LLM API it speaks to the proxy; "" is its own.
	API string
	// Binary is its executable in the sandbox; "" is its name on the
	// sandbox's PATH.
	Binary string
	// MCP names the profile's MCP servers it reaches through the proxy
	// (the worker's own agent too).
	MCP []string
}

// args are the worker's flags for a: its MCP servers, and for a CLI
// agent its name, API, executable and state directory (stateDir, "" for
// a temporary one).
func (a AgentSpec) args(stateDir string) []string {
	var args []string
	for _, m := range a.MCP {
		args = append(args, "--mcp", m)
	}
	if a.Name == "" {
		return args
	}
	args = append(args, "--agent", a.Name)
	if a.API != "" {
		args = append(args, "--agent-api", a.API)
	}
	if a.Binary != "" {
		args = append(args, "--agent-bin", a.Binary)
	}
	if stateDir != "" {
		args = append(args, "--state-dir", stateDir)
	}
	return args
}

// GenerateRequest is one single-answer call.
type GenerateRequest struct {
	Workflow string
	Prompt   string
	Model    string
	// System is the system prompt; may be empty.
	System string
}

// ExecuteAgentic runs `amelia-worker agentic` for req and yields its
// messages as the worker writes them: thinking, tool_call, tool_result and
// the result. The usage line is not yielded; [Driver.Usage] returns it once
// the iteration is over. An error is always the last thing yielded; see the
// package documentation for which. Stopping the iteration early stops the
// worker and removes the prompt file before the loop's next statement runs.
//
// A run the worker itself reports as failed (the model's API refused, the
// turns ran out, it was interrupted) ends with a Result message whose
// IsError is set and no error: check it to tell success from failure.
//
// The prompt and the instructions go to files in a directory of this call
// alone ([FilePrefix]agentic-<workflow>-<random>/), passed with
// --prompt-file and --instructions-file rather than on the command line.
func (d *Driver) ExecuteAgentic(ctx context.Context, req AgenticRequest) iter.Seq2[protocol.AgenticMessage, error] {
	return d.agentic(req, func(each func(*protocol.AgenticMessage) bool) (out workerOutput, err error) {
		dir := callDir("agentic", req.Workflow)
		files := []sandboxFile{{what: "prompt", path: dir + "/prompt.txt", data: req.Prompt}}
		argv := []string{d.Worker, "agentic", "--prompt-file", files[0].path, "--cwd", req.Cwd, "--model", req.Model}
		if req.Instructions != "" {
			f := sandboxFile{what: "instructions", path: dir + "/instructions.txt", data: req.Instructions}
			files = append(files, f)
			argv = append(argv, "--instructions-file", f.path)
		}
		if req.MaxTurns > 0 {
			argv = append(argv, "--max-turns", strconv.Itoa(req.MaxTurns))
		}
		argv = append(argv, req.Agent.args("")...)
		err = d.withFiles(ctx, dir, files, func() (err error) {
			out, err = d.runWorker(ctx, argv, false, each)
			return err
		})
		return out, err
	})
}

// agentic is the iterator of an agentic call, one-shot or in a Session:
// it checks req, runs it with run (which calls each for every message but
// usage), keeps its usage for Usage, and yields run's error last unless
// the consumer stopped first.
func (d *Driver) agentic(req AgenticRequest, run func(each func(*protocol.AgenticMessage) bool) (workerOutput, error)) iter.Seq2[protocol.AgenticMessage, error] {
	return func(yield func(protocol.AgenticMessage, error) bool) {
		d.setUsage(nil)
		if err := d.checkAgentic(req); err != nil {
			yield(protocol.AgenticMessage{}, err)
			return
		}
		stopped := false
		out, err := run(func(m *protocol.AgenticMessage) bool {
			if !yield(*m, nil) {
				stopped = true
				return false
			}
			return true
		})
		d.setUsage(out.usage)
		if err != nil && !stopped {
			yield(protocol.AgenticMessage{}, err)
		}
	}
}

// Usage returns the usage the worker reported for the last ExecuteAgentic
// on d, or nil if it reported none (or the run is not over).
func (d *Driver) Usage() *protocol.DriverUsage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.usage
}

func (d *Driver) setUsage(u *protocol.DriverUsage) {
	d.mu.Lock()
	d.usage = u
	d.mu.Unlock()
}

// Generate runs `amelia-worker generate` for one answer. Its files are
// in a directory of the call's own ([FilePrefix]generate-<workflow>-<random>/), so calls for
// one workflow may run concurrently. With a schema (a
// JSON Schema document) the answer is a JSON document that matches it,
// returned compact; without one it is free text, returned as a JSON string.
// The usage is the worker's, or zero if it reported none.
func (d *Driver) Generate(ctx context.Context, req GenerateRequest, schema json.RawMessage) (json.RawMessage, protocol.DriverUsage, error) {
	resolved, err := d.prepareGenerate(req, schema)
	if err != nil {
		return nil, protocol.DriverUsage{}, err
	}
	// Generate calls of one workflow may run concurrently (reviewers, say).
	dir := callDir("generate", req.Workflow)
	files := []sandboxFile{{what: "prompt", path: dir + "/prompt.txt", data: req.Prompt}}
	argv := []string{d.Worker, "generate", "--prompt-file", files[0].path, "--model", req.Model}
	if resolved != nil {
		f := sandboxFile{what: "schema", path: dir + "/schema.json", data: string(schema)}
		files = append(files, f)
		argv = append(argv, "--schema", f.path)
	}
	if req.System != "" {
		f := sandboxFile{what: "system prompt", path: dir + "/system.txt", data: req.System}
		files = append(files, f)
		argv = append(argv, "--system-prompt-file", f.path)
	}

	var out workerOutput
	err = d.withFiles(ctx, dir, files, func() error {
		var err error
		out, err = d.runWorker(ctx, argv, false, func(*protocol.AgenticMessage) bool { return true })
		return err
	})
	return d.generateAnswer(out, err, resolved)
}

// generateAnswer is Generate's answer from what the worker wrote and the
// error of running it.
func (d *Driver) generateAnswer(out workerOutput, err error, resolved *jsonschema.Resolved) (json.RawMessage, protocol.DriverUsage, error) {
	var usage protocol.DriverUsage
	if out.usage != nil {
		usage = *out.usage
	}
	if err != nil {
		return nil, usage, err
	}
	content := ""
	if out.result.Content != nil {
		content = *out.result.Content
	}
	if out.result.IsError {
		return nil, usage, fmt.Errorf("amelia-worker generate on %s: %w: %s", d.provider(), ErrWorkerFailed, content)
	}
	if resolved == nil {
		text, err := json.Marshal(content)
		return text, usage, err
	}
	answer, err := checkAnswer(resolved, content)
	if err != nil {
		return nil, usage, fmt.Errorf("amelia-worker generate on %s: %w", d.provider(), err)
	}
	return answer, usage, nil
}

// prepareGenerate checks req and compiles schema, when there is one.
func (d *Driver) prepareGenerate(req GenerateRequest, schema json.RawMessage) (*jsonschema.Resolved, error) {
	if err := d.checkGenerate(req); err != nil {
		return nil, err
	}
	if len(schema) == 0 {
		return nil, nil
	}
	return compileSchema(schema)
}

// compileSchema reads a JSON Schema document; one that is not is the
// caller's error, found before anything runs.
func compileSchema(schema json.RawMessage) (*jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("%w: the schema is not a JSON Schema document: %v", sdk.ErrInvalid, err)
	}
	// No loader: a schema cannot make the host fetch or read anything.
	resolved, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("%w: the schema is not a valid JSON Schema: %v", sdk.ErrInvalid, oneLine(err.Error()))
	}
	return resolved, nil
}

// checkAnswer validates the worker's answer against the schema and returns
// it compact.
func checkAnswer(resolved *jsonschema.Resolved, answer string) (json.RawMessage, error) {
	var doc any
	if err := json.Unmarshal([]byte(answer), &doc); err != nil {
		return nil, fmt.Errorf("%w: the answer is not a JSON document: %v: %s", ErrSchemaMismatch, err, clip(answer))
	}
	if err := resolved.Validate(doc); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrSchemaMismatch, oneLine(err.Error()), clip(answer))
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(answer)); err != nil {
		return nil, fmt.Errorf("%w: the answer is not a JSON document: %v", ErrSchemaMismatch, err)
	}
	return compact.Bytes(), nil
}

// checkAgentic refuses a request that cannot run.
func (d *Driver) checkAgentic(req AgenticRequest) error {
	if err := d.checkCommon(req.Workflow, req.Prompt, req.Model); err != nil {
		return err
	}
	if req.Cwd == "" {
		return fmt.Errorf("%w: no cwd: the worker needs the directory its tools act in", sdk.ErrInvalid)
	}
	if req.MaxTurns < 0 {
		return fmt.Errorf("%w: max turns %d is negative", sdk.ErrInvalid, req.MaxTurns)
	}
	if a := req.Agent; a.Name != "" {
		ag, err := agents.Lookup(a.Name)
		if err != nil {
			return fmt.Errorf("%w: %w", sdk.ErrInvalid, err)
		}
		if a.API != "" {
			if err := ag.CheckAPI(a.API); err != nil {
				return fmt.Errorf("%w: %w", sdk.ErrInvalid, err)
			}
		}
	}
	return nil
}

func (d *Driver) checkGenerate(req GenerateRequest) error {
	return d.checkCommon(req.Workflow, req.Prompt, req.Model)
}

func (d *Driver) checkCommon(workflow, prompt, model string) error {
	if strings.TrimSpace(prompt) == "" {
		return fmt.Errorf("%w: the prompt is empty", sdk.ErrInvalid)
	}
	if err := workspace.ValidateWorkflowID(workflow); err != nil {
		return fmt.Errorf("%w: %w", sdk.ErrInvalid, err)
	}
	if model == "" {
		return fmt.Errorf("%w: no model", sdk.ErrInvalid)
	}
	if d.Worker == "" {
		return fmt.Errorf("%w: Driver.Worker is empty: install the worker with EnsureWorker first", sdk.ErrInvalid)
	}
	return nil
}

func (d *Driver) provider() string     { return providerName(d.Provider) }
func (d *Driver) logger() *slog.Logger { return orDiscard(d.Logger) }

// providerName names the provider in messages: "provider docker", or "the
// sandbox" when it is not known.
func providerName(name string) string {
	if name == "" {
		return "the sandbox"
	}
	return "provider " + name
}

func orDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// oneLine flattens a multi-line message (jsonschema's are) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// clip shortens text from the sandbox for an error message.
func clip(s string) string {
	const max = protocol.PrefixBytes
	if len(s) > max {
		s = s[:max] + "..."
	}
	return execreport.Printable(s)
}
