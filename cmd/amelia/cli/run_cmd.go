package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/agents"
	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/run"
	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

func (a *app) runCommand() *cobra.Command {
	var (
		req        run.Request
		provider   string
		agent      string
		agentAPI   string
		promptFile string
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "run [flags] (--prompt-file F | PROMPT...)",
		Short: "Run the coding agent on a repository in the profile's sandbox; the result comes back as a branch",
		Long: `Run the coding agent on a repository inside the profile's sandbox and bring
the result back as the branch amelia/<workflow>.

For a local checkout (the default: the git repository of the current
directory), the base branch goes into the sandbox as a git bundle and the
result branch comes back into the same repository; nothing else in it is
touched. For a URL, the sandbox clones it with credentials from the host's
proxy, and --push pushes the result branch to it.

The API keys stay on this machine: the sandbox reaches the model through a
proxy on loopback, over a tunnel amelia opens, with a token that dies with
the run. On a terminal the run is shown live; with --json, or when stdout is
not a terminal, every event is one JSON line. Ctrl-C stops the agent, cleans
up and exits 130.`,
		Example: `  amelia run "add a --verbose flag to the CLI"
  amelia run --sandbox docker --base main --workflow fix-login --prompt-file task.md
  amelia run --agent opencode "fix the flaky test"
  amelia run --repo https://github.com/org/repo.git --push "fix the failing test"`,
		RunE: func(cmd *cobra.Command, args []string) error {
			prompt, err := readPrompt(cmd.InOrStdin(), promptFile, args)
			if err != nil {
				return usageError{err}
			}
			req.Prompt = prompt
			if cmd.Flags().Changed("max-turns") && (req.MaxTurns < 1 || req.MaxTurns > config.MaxTurnsLimit) {
				return usageError{fmt.Errorf("--max-turns %d: give a number of model calls from 1 to %d", req.MaxTurns, config.MaxTurnsLimit)}
			}
			p, err := a.loadProfile()
			if err != nil {
				return usageError{err} // refused before anything started
			}
			if provider != "" {
				p = p.WithProvider(provider)
			}
			if p, err = p.WithAgent(agent, agentAPI); err != nil {
				return usageError{err}
			}
			if req.Model, err = scriptedModel(req.Model); err != nil {
				return usageError{err}
			}
			p, stop, err := playScripted(p, req.Model)
			if err != nil {
				return err
			}
			defer stop()
			req.Profile = p
			if req.Repo == "" {
				if req.Repo, err = os.Getwd(); err != nil {
					return err
				}
			}
			return a.showRun(cmd, asJSON, func(view runview.View) (run.Result, error) {
				return run.Run(cmd.Context(), a.runHost(), req, a.scriptedNote(view, req.Model))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&provider, "sandbox", "", "sandbox provider for this run, instead of the profile's (local, docker, ssh, daytona, kubernetes, or a plugin)")
	cmd.RegisterFlagCompletionFunc("sandbox", a.completeProviders)
	f.StringVar(&agent, "agent", "", "the agent, instead of the profile's: "+strings.Join(agents.Names(), ", ")+" (docs/agents.md)")
	f.StringVar(&agentAPI, "agent-api", "", "the LLM API the agent speaks to the proxy, instead of its own: openai or anthropic (the proxy translates to the profile's upstream)")
	f.StringVar(&req.Repo, "repo", "", "repository: a local checkout's path or a URL (default: the git repository of the current directory)")
	f.StringVar(&req.Base, "base", "", "branch to start from (default: the checked-out branch, or the URL's default branch)")
	f.StringVar(&req.Workflow, "workflow", "", "workflow id; the result branch is amelia/<id> (default: made from the prompt, e.g. fix-login-3f9a)")
	f.StringVar(&req.Model, "model", "", "model, as the upstream names it (default: the profile's); "+ScriptedPrefix+"echo or "+ScriptedPrefix+"FILE plays a scripted model on this machine, without a key")
	f.IntVar(&req.MaxTurns, "max-turns", 0, fmt.Sprintf("most model calls the agent may make (default: the profile's max_turns, %d unless set)", config.DefaultMaxTurns))
	f.StringVar(&promptFile, "prompt-file", "", "file holding the task (- for stdin)")
	f.BoolVar(&asJSON, "json", false, "one JSON line per event, for programs")
	f.BoolVar(&req.Push, "push", false, "push the result branch to the origin of a URL repository")
	f.BoolVar(&req.KeepWorktree, "keep-worktree", false, "leave the workflow's worktree in the sandbox")
	f.BoolVar(&req.IncludeDirty, "include-dirty", false, "carry uncommitted changes of the local checkout in as a commit")
	return cmd
}

// runHost is what runs need of this machine.
func (a *app) runHost() run.Host {
	return run.Host{
		Sandboxes: sandbox.Plugins(a.pluginHost()),
		Workers:   a.workers(),
		AuditDir:  a.auditDir(),
		LookupEnv: a.lookup,
		Environ:   a.environ,
		Runs:      a.runs(),
		Logs:      a.runLogs(),
		Logger:    a.logger,
	}
}

// stackHost is what a command's stack (core/stack) needs of this machine.
func (a *app) stackHost() stack.Host {
	return stack.Host{Sandboxes: sandbox.Plugins(a.pluginHost()), Workers: a.workers(), Logger: a.logger}
}

// openStack starts the provider of the selected profile, for its own
// sandbox.
func (a *app) openStack(ctx context.Context) (*stack.Stack, error) {
	p, err := a.loadProfile()
	if err != nil {
		return nil, err
	}
	return stack.Open(ctx, a.stackHost(), p, "")
}

// workers puts the right amelia-worker into sandboxes.
func (a *app) workers() *driver.Installer {
	return &driver.Installer{
		Dirs:   workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self),
		Logger: a.logger,
	}
}

// showRun runs fn with a view on stdout and turns its outcome into the
// command's: exit 130 and one line when interrupted; on stderr, where kept
// work is and the error, unless the view is the live one on a terminal,
// whose summary box showed them. While the live view draws, the log goes
// above its live area instead of into its spinner line.
func (a *app) showRun(cmd *cobra.Command, asJSON bool, fn func(runview.View) (run.Result, error)) error {
	stderr := cmd.ErrOrStderr()
	// The view writes the worker's messages as they are, and needs the
	// terminal itself; the host's own errors in it are masked.
	view := runview.New(a.stdout, asJSON)
	live, isLive := view.(runview.Live)
	var out *logOutput
	if isLive {
		out = &logOutput{w: a.stderr, live: live}
		logger := a.logger
		a.logger = newLogger(a.mask.Writer(out), a.debug)
		defer func() { a.logger = logger }()
	}
	res, err := fn(a.mask.View(view))
	if out != nil {
		out.detach() // what is logged from now on goes to stderr
	}
	cerr := view.Close()
	if err == nil {
		return cerr
	}
	// The live view's box showed the run's error and its kept work, unless
	// the terminal went away.
	shown := isLive && cerr == nil
	if res.Kept != nil && !shown {
		k := res.Kept
		fmt.Fprintf(stderr, "amelia: the agent's work is kept on %s in sandbox %s; bring it back with: %s\n", k.Branch, k.SandboxName(), run.RecoverCommand(*k))
	}
	switch {
	case cmd.Context().Err() != nil:
		fmt.Fprintln(stderr, interruptedLine(res))
		return exitError{130}
	case errors.Is(err, run.ErrRefused) && shown:
		return exitError{2}
	case errors.Is(err, run.ErrRefused):
		return usageError{err}
	case shown:
		return exitError{1}
	}
	return err
}

// interruptedLine is the last line of an interrupted run: what became of
// its agent.
func interruptedLine(res run.Result) string {
	switch {
	case res.AgentRunning:
		return "amelia: interrupted; the agent could not be stopped and may still be running in its sandbox"
	case res.AgentStopped:
		return "amelia: interrupted; the agent was stopped"
	}
	return "amelia: interrupted"
}

// maxPrompt bounds the task's size.
const maxPrompt = 1 << 20

// readPrompt is the task: the file's content (stdin for "-"), or the
// arguments joined.
func readPrompt(stdin io.Reader, file string, args []string) (string, error) {
	var prompt string
	switch {
	case file != "" && len(args) > 0:
		return "", errors.New("give the task either as --prompt-file or as arguments, not both")
	case file != "":
		r := stdin
		if file != "-" {
			f, err := os.Open(file)
			if err != nil {
				return "", fmt.Errorf("read the prompt: %w", err)
			}
			defer f.Close()
			r = f
		}
		b, err := io.ReadAll(io.LimitReader(r, maxPrompt+1))
		if err != nil {
			return "", fmt.Errorf("read the prompt from %s: %w", file, err)
		}
		if len(b) > maxPrompt {
			return "", fmt.Errorf("the prompt in %s is over %d bytes", file, maxPrompt)
		}
		prompt = string(b)
	default:
		prompt = strings.Join(args, " ")
	}
	if strings.TrimSpace(prompt) == "" {
		return "", errors.New(`no task: amelia run "what to do", or amelia run --prompt-file FILE`)
	}
	return prompt, nil
}
