// Package run is the whole of `amelia run`: it starts the proxy on host
// loopback and mints the run's token, starts the profile's provider plugin
// and its sandbox, puts the right amelia-worker inside, opens the tunnel to
// the proxy, prepares the workspace, starts the agent detached in the
// sandbox and follows its messages to a view, and brings the result back
// as a git branch. Every step is a phase of the view, with its duration;
// whatever happens, the steps' cleanups run in reverse order (worktree and
// run directory, hold, tunnel, proxy, plugin), also when the context is
// cancelled (Ctrl-C).
//
// The layers a run works through (plugin, sandbox, worker, workspace,
// the workflow's uid and driver) are one core/stack.Stack. A run is a
// state machine whose state (runstore.State: checked, sandbox-up,
// agent-started, running, ended or stopped, then delivered, kept or
// discarded) is written to its record at each step, and its cleanups do
// what that state says: whatever becomes of this process, the record says
// what the sandbox may hold.
//
// The agent outlives the connection to its sandbox: when the plugin dies
// or the tunnel closes, the run repairs them and follows on (live.go,
// agent.go); when this process dies, Attach takes the run over from its
// record.
package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/devcontainer"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/stack"
)

// Phases, in the order a run goes through them.
const (
	PhaseCheck     = "check"
	PhaseProxy     = "proxy"
	PhasePlugin    = "plugin"
	PhaseSandbox   = "sandbox"
	PhaseWorker    = "worker"
	PhaseEgress    = "egress" // only for network allowlist and none
	PhaseTunnel    = "tunnel"
	PhaseWorkspace = "workspace"
	PhaseAgent     = "agent"
	PhaseResults   = "results"
	PhaseCleanup   = "cleanup"
)

// Request is one run.
type Request struct {
	// Profile is the profile to run with, --sandbox already applied.
	Profile *config.Profile
	// Repo is a local path (of a git checkout) or a URL.
	Repo string
	// Base is the branch the workflow starts from; "" is the repository's
	// default branch.
	Base string
	// Workflow is the workflow id; "" makes one from the prompt.
	Workflow string
	// Model is the model; "" is the profile's.
	Model string
	// MaxTurns bounds the agent's model calls; 0 is the profile's
	// max_turns.
	MaxTurns int
	Prompt   string
	// Push pushes the result branch of a URL repository to its origin.
	Push bool
	// KeepWorktree leaves the worktree in the sandbox after the run.
	KeepWorktree bool
	// IncludeDirty carries uncommitted changes of a local checkout in as a
	// commit instead of refusing them.
	IncludeDirty bool
	// Sandbox names the sandbox to run in, when it is not the profile's
	// own (sandbox.Name): a recorded run's (runstore.Record.SandboxName).
	Sandbox string
}

// Host is what a run needs of the machine it runs on.
type Host struct {
	// Sandboxes starts a profile's provider: sandbox.Plugins for amelia.
	Sandboxes sandbox.Opener
	// Workers puts the right amelia-worker into sandboxes; one per process,
	// so it hashes each host binary once.
	Workers *driver.Installer
	// AuditDir holds the proxy's audit logs when the profile sets none.
	AuditDir string
	// LookupEnv reads the host's environment (keys, tokens).
	LookupEnv func(string) (string, bool)
	// Environ is the environment of host-side git credential lookups.
	Environ []string
	// Runs records where the work of a run that did not deliver is kept;
	// nil records nothing.
	Runs *runstore.Store
	// Logs keeps a copy of the agent's messages as the run showed them,
	// for `amelia logs` once nothing of the run is left in its sandbox;
	// nil keeps none.
	Logs   *runstore.Logs
	Logger *slog.Logger
}

// Result is what a run produced.
type Result struct {
	Workflow string
	// Branch is the result branch: in the host repository for a local
	// checkout, on the origin when pushed.
	Branch   string
	DiffStat string
	Usage    *protocol.DriverUsage
	Pushed   bool
	// Kept is where the work is when the run failed or was interrupted
	// after its agent started: committed on its branch in the sandbox,
	// with the worktree left in place. Nil when there was none.
	Kept *runstore.Record
	// AgentStopped is set when the run stopped its agent before the agent
	// ended (Ctrl-C, a worker that broke the protocol).
	AgentStopped bool
	// AgentRunning is set when the run ended with its agent possibly still
	// running in the sandbox (it could not be stopped, or the sandbox was
	// lost): the run stays recorded as running, for amelia attach.
	AgentRunning bool
}

// Run runs req, reporting its phases and the agent's messages to view, and
// ends with view's summary. The error is one line that says which phase
// failed and why. A run whose ctx is cancelled (Ctrl-C) was interrupted:
// its error, and that of the phase it was in, match context.Canceled, and
// only then do they.
func Run(ctx context.Context, host Host, req Request, view runview.View) (Result, error) {
	r := newRunner(ctx, host, req, view)
	return r.end(r.run(ctx))
}

func newRunner(ctx context.Context, host Host, req Request, view runview.View) *runner {
	if host.Logger == nil {
		host.Logger = slog.New(slog.DiscardHandler)
	}
	return &runner{caller: ctx, host: host, req: req, view: view, start: time.Now()}
}

// end runs the cleanups of a run that ended with res and err, and shows
// its summary: what the cleanups did and what the run leaves behind.
func (r *runner) end(res Result, err error) (Result, error) {
	view := r.view
	err = r.interruption(err)
	r.failure = err
	// How the agent ended, before the cleanups settle the run's state.
	res.AgentStopped, res.AgentRunning = r.state == runstore.Stopped, r.state == runstore.Running
	r.cleanup()
	if r.msgLog != nil {
		if lerr := r.msgLog.Keep(); lerr != nil {
			r.host.Logger.Warn("could not keep the run's log on this host", "err", lerr)
		}
	}
	res.Kept = r.kept
	var kept *runview.Kept
	if r.kept != nil {
		kept = &runview.Kept{Sandbox: r.kept.Profile, Branch: r.kept.Branch, Dir: r.kept.Worktree, Recover: RecoverCommand(*r.kept)}
	}
	left := r.left
	if r.st != nil && r.st.Running != nil {
		// A run never removes its sandbox: the next run reuses it.
		provider := r.st.Sandbox().Info.Name
		left = append(left, fmt.Sprintf("sandbox %s on provider %s (running; amelia stop --profile %s removes it)",
			r.sandboxName(), provider, r.req.Profile.Name))
	}
	view.Summary(runview.Summary{
		Workflow: res.Workflow,
		Branch:   res.Branch,
		DiffStat: res.DiffStat,
		Usage:    res.Usage,
		Wall:     time.Since(r.start),
		Pushed:   res.Pushed,
		Err:      err,
		Kept:     kept,
		Cleaned:  r.cleaned,
		Left:     left,
	})
	return res, err
}

// interruption is err, made to match context.Canceled when the run was
// interrupted (its caller's context is done) and err does not say so
// already: a step cut short by the interruption may fail with an error of
// its own (a killed command).
func (r *runner) interruption(err error) error {
	if err == nil || r.caller.Err() == nil || errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w (%v)", context.Canceled, err)
}

// runner is one run in progress.
type runner struct {
	// caller is the context the run was started with: once it is done,
	// the run was interrupted.
	caller context.Context
	host   Host
	req    Request
	view   runview.View
	start  time.Time

	cleanups []cleanup // in the order they were registered
	// cleaned is what the cleanups removed or stopped, and left what the
	// run leaves behind (but its kept work and its sandbox), for the
	// summary.
	cleaned, left []string
	// egress is what the provider says of its enforcement of the network
	// policy, for the egress check.
	egress egressPolicy

	// state is where the run is in its life (see runstore.State), written
	// to its record at each step (advance); the cleanups do what it says.
	// Before the check, it is "".
	state   runstore.State
	kept    *runstore.Record
	failure error // why the run ended, for the cleanups

	st      *stack.Stack                // the provider plugin and all above it, once started
	lv      *live                       // the tunnels to the proxy, once the sandbox is up
	agent   *agentRun                   // the agent, once the run is checked
	release func(context.Context) error // ends this process's hold on the sandbox

	msgLog *runstore.LogWriter // the agent's messages on this host, once one came
	noLog  bool                // the log could not be made: none is kept
	// devcontainer is the repository's devcontainer.json whose
	// environment the run's sandbox has, if any (applyDevcontainer).
	devcontainer *devcontainer.Config
}

// RecoverCommand is the command that brings a kept run's work back.
func RecoverCommand(r runstore.Record) string {
	return "amelia results --profile " + r.Profile + " " + r.Workflow
}

type cleanup struct {
	what string // what it does, for the log: "close the tunnel"
	gone string // what is gone once it did, for the summary: "tunnel"
	fn   func(context.Context) error
}

// cleanupTimeout bounds all cleanups together, which run even when the
// run's context is cancelled.
const cleanupTimeout = 2 * time.Minute

// onEnd registers fn to run when the run ends, before the cleanups
// registered earlier. what says what it does, for the log should it fail;
// gone names, in words a user knows, what is gone once it did, for the
// summary's "cleaned" ("" when it is nothing the user would miss, or fn
// says itself with r.gone and r.leave).
func (r *runner) onEnd(what, gone string, fn func(context.Context) error) {
	r.cleanups = append(r.cleanups, cleanup{what, gone, fn})
}

// gone notes for the summary that a cleanup removed or stopped what.
func (r *runner) gone(what string) { r.cleaned = append(r.cleaned, what) }

// leave notes for the summary that the run leaves what behind; what says
// what becomes of it.
func (r *runner) leave(what string) { r.left = append(r.left, what) }

// cleanup runs the cleanups in reverse order, as one phase; each failure is
// logged, and none stops the others.
func (r *runner) cleanup() {
	if len(r.cleanups) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	r.phase(PhaseCleanup, func() error {
		var errs []error
		for i := len(r.cleanups) - 1; i >= 0; i-- {
			c := r.cleanups[i]
			err := c.fn(ctx)
			if err != nil {
				r.host.Logger.Warn("cleanup failed", "what", c.what, "err", err)
				errs = append(errs, fmt.Errorf("%s: %w", c.what, err))
			}
			switch {
			case c.gone == "":
			case err != nil:
				r.leave(c.gone + " (its cleanup failed)")
			default:
				r.gone(c.gone)
			}
		}
		return errors.Join(errs...)
	})
	r.cleanups = nil
}

// phase runs fn as the named phase of the view. A failure is wrapped with
// the phase's name unless it is the context's own; once the run is
// interrupted, it matches context.Canceled (but in the cleanup, which is
// not).
func (r *runner) phase(name string, fn func() error) error {
	return r.phaseIn(context.Background(), name, fn)
}

// phaseIn is phase for a step that runs in ctx, the run's context once the
// tunnel is kept (keepTunnel): its error gives way to the reason ctx was
// cancelled with (see causeOf).
func (r *runner) phaseIn(ctx context.Context, name string, fn func() error) error {
	r.view.PhaseStart(name)
	start := time.Now()
	err := r.causeOf(ctx, fn())
	if name != PhaseCleanup {
		err = r.interruption(err)
	}
	r.view.PhaseEnd(name, time.Since(start), err)
	if err != nil && !strings.HasPrefix(err.Error(), name+": ") {
		err = fmt.Errorf("%s: %w", name, err)
	}
	return err
}
