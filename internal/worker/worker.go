// Package worker is amelia-worker, the one program that runs inside every
// sandbox: the agent (agentic, generate, and serve, which runs many of them
// in one process), the sandbox end of the tunnel, git's credential helper
// and the workspace's helpers (flock, claim). Its stdout carries only
// protocol lines (or, for tunnel, the tunnel session, for git-credential,
// git's answer, and for claim, what it moved aside); logs go to stderr.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
	"github.com/amelia-sandbox/amelia/internal/worker/agent"
	"github.com/amelia-sandbox/amelia/internal/worker/cliagent"
	"github.com/amelia-sandbox/amelia/internal/worker/gitcred"
	"github.com/amelia-sandbox/amelia/internal/worker/mcptools"
	"github.com/amelia-sandbox/amelia/internal/worker/tools"
)

// Environment variables the worker reads.
const (
	EnvProxyURL   = sandboxend.EnvProxyURL   // the proxy's root URL, through the tunnel
	EnvProxyToken = sandboxend.EnvProxyToken // the run's token
	EnvLogFormat  = "AMELIA_LOG_FORMAT"      // "json" for JSON logs on stderr
	EnvLogLevel   = "AMELIA_LOG_LEVEL"       // debug, info (default), warn, error
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 130
)

// Process is what the worker gets from the process that runs it.
type Process struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// Run runs the worker with the command-line arguments args (without the
// program name) and returns its exit code.
func Run(ctx context.Context, args []string, p Process) int {
	w := &worker{p: p, log: newLogger(p.Stderr, p.Getenv)}
	root := w.commands()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var code exitCode
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	default:
		fmt.Fprintf(p.Stderr, "amelia-worker: %v\n", err)
		return exitUsage
	}
}

// exitCode ends the program with a code, its message already shown.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit %d", int(c)) }

type worker struct {
	p   Process
	log *slog.Logger
}

func (w *worker) commands() *cobra.Command {
	root := &cobra.Command{
		Use:           "amelia-worker",
		Short:         "The amelia agent inside a sandbox",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("no command given: see amelia-worker --help")
		},
	}
	root.SetIn(w.p.Stdin)
	root.SetOut(w.p.Stderr) // help and usage never go to stdout, which is the protocol's
	root.SetErr(w.p.Stderr)
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(w.agenticCmd(), w.generateCmd(), w.serveCmd(), w.tunnelCmd(), w.gitCredentialCmd(), w.flockCmd(), w.egressCheckCmd(), w.execCmd(), w.muxCmd(), w.stepCmd(), w.sweepCmd(),
		w.claimCmd(), w.checkoutCmd(), w.detachCmd(), w.superviseCmd(), w.followCmd(), w.stopCmd(), w.statusCmd(), w.mcpCmd(), w.versionCmd(), w.portForwardCmd(), w.ptyCmd(), w.watchdogCmd(), w.activityCmd(), w.filesCmd())
	w.countActivity(root)
	return root
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

func (w *worker) agenticCmd() *cobra.Command {
	var promptFile, cwd, model, instructions, instructionsFile string
	var maxTurns int
	var cli cliAgentJob
	cmd := &cobra.Command{
		Use:   "agentic --prompt-file F --cwd D --model M [--agent NAME]",
		Short: "Work on a task with tools until the model answers: the worker's own agent, or a CLI agent",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := protocol.NewEncoder(w.p.Stdout)
			return exitFor(w.runAgent(out, model, func() error {
				prompt, err := readFile("prompt", promptFile)
				if err != nil {
					return err
				}
				if instructionsFile != "" {
					if instructions, err = readFile("instructions", instructionsFile); err != nil {
						return err
					}
				}
				return w.agentic(cmd.Context(), out, agenticJob{
					prompt: prompt, cwd: cwd, model: model, instructions: instructions, maxTurns: maxTurns, agent: cli,
				})
			}))
		},
	}
	f := cmd.Flags()
	f.StringVar(&promptFile, "prompt-file", "", "file holding the task (required)")
	f.StringVar(&cwd, "cwd", "", "directory the tools act in (required)")
	f.StringVar(&model, "model", "", "model name, as the upstream knows it (required)")
	f.StringVar(&instructions, "instructions", "", "extra system instructions")
	f.StringVar(&instructionsFile, "instructions-file", "", "file holding extra system instructions")
	f.IntVar(&maxTurns, "max-turns", agent.DefaultMaxTurns, "most LLM calls before giving up")
	f.StringVar(&cli.name, "agent", OwnAgent, "the agent: "+OwnAgent+" (the worker's own) or a CLI agent: "+strings.Join(cliagent.Names(), ", "))
	f.StringVar(&cli.bin, "agent-bin", "", "the CLI agent's executable (default: its name, on PATH)")
	f.StringVar(&cli.api, "agent-api", "", "the LLM API the CLI agent speaks to the proxy: openai or anthropic (default: the agent's own)")
	f.StringArrayVar(&cli.mcp, "mcp", nil, "an MCP server of the profile's whose tools the agent gets, through the proxy (repeatable)")
	f.StringVar(&cli.stateDir, "state-dir", "", "directory for the CLI agent's home, configuration and state, outside the checkout (default: a temporary one)")
	for _, name := range []string{"prompt-file", "cwd", "model"} {
		cmd.MarkFlagRequired(name)
	}
	cmd.MarkFlagsMutuallyExclusive("instructions", "instructions-file")
	return cmd
}

// agenticJob is one agentic run, from the command line or a serve request.
type agenticJob struct {
	prompt, cwd, model, instructions string
	maxTurns                         int // 0: agent.DefaultMaxTurns
	agent                            cliAgentJob
}

// agentic runs j, writing its lines to out.
func (w *worker) agentic(ctx context.Context, out *protocol.Encoder, j agenticJob) error {
	if j.agent.name != "" && j.agent.name != OwnAgent {
		if j.instructions != "" {
			return setupError{fmt.Errorf("the agent %s takes no extra instructions: put them in the prompt", j.agent.name)}
		}
		return w.cliAgentic(ctx, out, j)
	}
	llm, err := w.llm()
	if err != nil {
		return err
	}
	set, err := tools.New(j.cwd, tools.Options{Logger: w.log})
	if err != nil {
		return setupError{err}
	}
	defer set.Close()
	var box agent.Toolbox = set
	if len(j.agent.mcp) > 0 {
		mt, err := mcptools.Open(ctx, set, j.agent.mcp, mcptools.Options{
			ProxyURL: w.p.Getenv(EnvProxyURL), Token: w.p.Getenv(EnvProxyToken), Logger: w.log})
		if err != nil {
			return setupError{err}
		}
		defer mt.Close()
		box = mt
	}
	w.log.Info("agentic run", "model", j.model, "cwd", j.cwd, "max_turns", j.maxTurns)
	a := &agent.Agentic{
		LLM: llm, Tools: box, Model: j.model, MaxTurns: j.maxTurns, Out: out, Logger: w.log,
		System: agent.SystemPrompt(j.cwd, j.instructions),
	}
	return a.Run(ctx, j.prompt)
}

func (w *worker) generateCmd() *cobra.Command {
	var promptFile, model, schema, systemFile string
	cmd := &cobra.Command{
		Use:   "generate --prompt-file F --model M [--schema FILE.json|module:ClassName]",
		Short: "One answer from the model, optionally JSON that matches a schema",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := protocol.NewEncoder(w.p.Stdout)
			return exitFor(w.runAgent(out, model, func() error {
				prompt, err := readFile("prompt", promptFile)
				if err != nil {
					return err
				}
				var system string
				if systemFile != "" {
					if system, err = readFile("system prompt", systemFile); err != nil {
						return err
					}
				}
				return w.generate(cmd.Context(), out, generateJob{prompt: prompt, model: model, system: system, schema: schema})
			}))
		},
	}
	f := cmd.Flags()
	f.StringVar(&promptFile, "prompt-file", "", "file holding the prompt (required)")
	f.StringVar(&model, "model", "", "model name, as the upstream knows it (required)")
	f.StringVar(&schema, "schema", "", "the schema the answer must match: a JSON Schema file, or module:ClassName of a pydantic model the sandbox's python3 imports")
	f.StringVar(&systemFile, "system-prompt-file", "", "file holding the system prompt")
	cmd.MarkFlagRequired("prompt-file")
	cmd.MarkFlagRequired("model")
	return cmd
}

// generateJob is one generate call, from the command line or a serve
// request.
type generateJob struct {
	prompt, model, system string
	schema                string // see loadSchema; "" for free text
}

// generate runs j, writing its lines to out.
func (w *worker) generate(ctx context.Context, out *protocol.Encoder, j generateJob) error {
	g := &agent.Generate{Model: j.model, System: j.system, Out: out, Logger: w.log}
	if j.schema != "" {
		var err error
		if g.Schema, err = w.loadSchema(ctx, j.schema); err != nil {
			return err
		}
	}
	var err error
	if g.LLM, err = w.llm(); err != nil {
		return err
	}
	return g.Run(ctx, j.prompt)
}

// runAgent runs an agentic or generate run and returns its error. A failure
// before the run wrote anything still ends with a result line with
// is_error and a usage line, so the host always gets both.
func (w *worker) runAgent(out *protocol.Encoder, model string, run func() error) error {
	err := run()
	if err == nil {
		return nil
	}
	if se, ok := errors.AsType[setupError](err); ok {
		err = agent.WriteFailure(out, model, se.error)
	}
	w.log.Error("run failed", "err", err)
	return err
}

// exitFor is the exit of a one-shot run that ended with err: 130 when it
// was interrupted, 1 for another failure.
func exitFor(err error) error {
	switch {
	case err == nil:
		return nil
	case agent.Interrupted(err):
		return exitCode(exitInterrupted)
	default:
		return exitCode(exitFailed)
	}
}

// setupError is a failure before the run started, which has not been
// written to stdout yet.
type setupError struct{ error }

func readFile(what, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", setupError{fmt.Errorf("read %s: %w", what, err)}
	}
	return string(b), nil
}

// Variables of the Python Amelia's worker, which this one reads too.
const (
	EnvLLMProxyURL = "LLM_PROXY_URL"  // the LLM API's base URL (already ending in /v1 or /proxy/v1)
	EnvAPIKey      = "OPENAI_API_KEY" // the bearer token with LLM_PROXY_URL (default proxyManaged)
	EnvProfile     = "AMELIA_PROFILE" // sent as X-Amelia-Profile
)

// proxyManaged is the Python worker's bearer token for a proxy that
// attaches the real key.
const proxyManaged = "proxy-managed"

// llm is the client for the LLM API: $AMELIA_PROXY_URL/v1 with the run
// token as its bearer token, unless LLM_PROXY_URL or OPENAI_BASE_URL name
// another base URL, as the Python worker's environment does: then the
// bearer token is OPENAI_API_KEY, else the run token, else proxy-managed.
// Either way the requests carry X-Amelia-Proxy-Token and X-Amelia-Profile
// when AMELIA_PROXY_TOKEN and AMELIA_PROFILE are set.
func (w *worker) llm() (*agent.LLM, error) {
	token := w.p.Getenv(EnvProxyToken)
	bearer := token
	base := firstSet(w.p.Getenv, EnvLLMProxyURL, "OPENAI_BASE_URL")
	if base != "" {
		bearer = firstSet(w.p.Getenv, EnvAPIKey, EnvProxyToken)
		if bearer == "" {
			bearer = proxyManaged
		}
	} else {
		root := w.p.Getenv(EnvProxyURL)
		if root == "" {
			return nil, setupError{fmt.Errorf("%s is not set: the worker reaches the LLM through the amelia proxy (or set LLM_PROXY_URL to an OpenAI-compatible base URL)", EnvProxyURL)}
		}
		base = strings.TrimSuffix(root, "/") + "/v1"
	}
	return agent.NewLLM(base, bearer, identityHeader(w.p.Getenv), w.log), nil
}

// identityHeader is the Python worker's X-Amelia-Proxy-Token and
// X-Amelia-Profile, each when its variable is set.
func identityHeader(getenv func(string) string) http.Header {
	h := http.Header{}
	if t := getenv(EnvProxyToken); t != "" {
		h.Set(protocol.HeaderProxyToken, t)
	}
	if p := getenv(EnvProfile); p != "" {
		h.Set(protocol.HeaderProfile, p)
	}
	return h
}

func firstSet(getenv func(string) string, names ...string) string {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func (w *worker) tunnelCmd() *cobra.Command {
	var listen, run string
	cmd := &cobra.Command{
		Use:   "tunnel (--listen 127.0.0.1:PORT | --run D)",
		Short: "The sandbox end of the host tunnel, over stdin and stdout",
		Long: `With --listen, accept connections on a loopback address and carry each
to the host as a stream of a yamux session over stdin and stdout, until
stdin ends. With --run, carry the tunnel the supervisor of the detached
run in D holds (amelia-worker detach --tunnel) instead: the run keeps its
address when this process ends, and the next one carries it on. Exit 3:
the run in D has ended.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if run != "" {
				return w.attachTunnel(run)
			}
			if err := checkLoopback(listen); err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("tunnel: %w", err)
			}
			conn := stdio{Reader: w.p.Stdin, Writer: w.p.Stdout}
			if err := sandboxend.Serve(cmd.Context(), ln, conn, buildinfo.Version(), w.log); err != nil {
				w.log.Error("tunnel failed", "err", err)
				return exitCode(exitFailed)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "", "loopback address to accept connections on, e.g. 127.0.0.1:8430 (port 0: any)")
	cmd.Flags().StringVar(&run, "run", "", "the directory of a detached run whose tunnel to carry")
	cmd.MarkFlagsOneRequired("listen", "run")
	cmd.MarkFlagsMutuallyExclusive("listen", "run")
	return cmd
}

// checkLoopback refuses listen addresses other than loopback ones: the
// tunnel leads to the host proxy and must not be offered to the network.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT, e.g. 127.0.0.1:8430", addr)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q: the tunnel listens on loopback only; use 127.0.0.1 or [::1]", addr)
	}
	return nil
}

// stdio is the worker's stdin and stdout as one connection.
type stdio struct {
	io.Reader
	io.Writer
}

func (s stdio) Close() error {
	var errs []error
	for _, v := range []any{s.Reader, s.Writer} {
		if c, ok := v.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

func (w *worker) gitCredentialCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "git-credential get|store|erase",
		Short: "git's credential helper, answered by the host proxy",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			h := &gitcred.Helper{
				ProxyURL: w.p.Getenv(EnvProxyURL), LLMProxyURL: w.p.Getenv(EnvLLMProxyURL),
				Token: w.p.Getenv(EnvProxyToken), Profile: w.p.Getenv(EnvProfile),
			}
			if err := h.Run(cmd.Context(), args[0], w.p.Stdin, w.p.Stdout); err != nil {
				fmt.Fprintf(w.p.Stderr, "amelia-worker git-credential: %v\n", err)
				return exitCode(exitFailed)
			}
			return nil
		},
	}
}

func (w *worker) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and the protocol version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(w.p.Stdout, "amelia-worker %s protocol %d\n", buildinfo.Version(), protocol.Version)
			return err
		},
	}
}

// newLogger logs to stderr: text records, or JSON when AMELIA_LOG_FORMAT is
// "json", at the level AMELIA_LOG_LEVEL names (info by default).
func newLogger(w io.Writer, getenv func(string) string) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(getenv(EnvLogLevel))); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	if getenv(EnvLogFormat) == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
