package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/stack"
	"github.com/amelia-sandbox/amelia/core/tunnel"
	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/proxy"
)

// run goes through the phases; the cleanups they register run after it.
func (r *runner) run(ctx context.Context) (Result, error) {
	req := r.req
	res := Result{}

	// Everything that can be refused is refused before a sandbox is touched.
	var src source
	if err := r.phase(PhaseCheck, func() (err error) {
		if src, err = r.check(ctx); err != nil {
			return err
		}
		if err := r.applyDevcontainer(ctx, src); err != nil {
			return err
		}
		// Whatever stops the run here, nothing was started but the
		// provider plugin: the run is refused.
		if err := r.checkProfile(ctx); err != nil {
			return refuse(err)
		}
		if err := r.checkKeys(); err != nil {
			return err
		}
		r.agent = &agentRun{src: src, runID: proxy.NewRunID(src.workflow, time.Now())}
		return r.recordChecked()
	}); err != nil {
		return res, err
	}
	res.Workflow = src.workflow

	var prx *proxyRun
	if err := r.phase(PhaseProxy, func() (err error) {
		prx, err = r.startProxy(req.Profile, src, r.agent.runID, "")
		return err
	}); err != nil {
		return res, err
	}
	r.agent.token = prx.run.Token()

	ctx, cancel, err := r.connect(ctx, prx.addr)
	if err != nil {
		return res, err
	}
	defer cancel(nil)
	a := r.agent
	if err := r.phaseIn(ctx, PhaseWorkspace, func() (err error) {
		if err := r.holdSandbox(ctx, src.workflow); err != nil {
			return err
		}
		if err := r.prepareWorkspace(ctx, a); err != nil {
			return err
		}
		if err := r.st.As(ctx, src.workflow, r.agentEnv()); err != nil {
			return err
		}
		return r.setUpCheckout(ctx, a)
	}); err != nil {
		return res, err
	}

	return r.followAndDeliver(ctx, a, func() error { return r.startAgent(ctx, a) })
}

// connect takes the run into its sandbox: the provider plugin, the
// sandbox and the worker; for a run only now coming up (not one Attach
// takes over), the egress check; then the tunnels to the proxy at
// proxyAddr and the workspace. It returns the context the run goes on under, which a
// tunnel that cannot be reopened cancels with the reason.
func (r *runner) connect(ctx context.Context, proxyAddr string) (context.Context, context.CancelCauseFunc, error) {
	if err := r.openSandbox(ctx); err != nil {
		return nil, nil, err
	}
	if r.state == runstore.SandboxUp {
		if err := r.checkEgress(ctx); err != nil {
			return nil, nil, err
		}
	}
	url := r.agent.src.url != ""
	hostTunnel, err := r.openLive(ctx, proxyAddr, url)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := r.keepTunnels(ctx)
	if err := r.workIn(hostTunnel); err != nil {
		cancel(nil)
		return nil, nil, err
	}
	return ctx, cancel, nil
}

// followAndDeliver is how Run and Attach end alike: in the agent phase,
// begin starts the agent (Run) or takes it over (Attach), and the run
// follows it until it ends; then its work is brought back.
func (r *runner) followAndDeliver(ctx context.Context, a *agentRun, begin func() error) (Result, error) {
	if err := r.phaseIn(ctx, PhaseAgent, func() error {
		defer r.endAgentTunnel(a)
		if err := begin(); err != nil {
			return err
		}
		return r.followAgent(ctx, a)
	}); err != nil {
		return Result{Workflow: a.src.workflow, Usage: r.st.Driver.Usage()}, err
	}
	return r.results(ctx, a)
}

// checkKeys refuses a profile whose agent speaks an API none of its
// upstreams serves (see checkAgentUpstream), or whose keys (its LLM
// upstreams', and the git token it names) the proxy could not read from
// the host's environment. It reads them as the proxy's config is made, so
// the two cannot differ; the config itself is dropped (the proxy makes its
// own, for its run id).
func (r *runner) checkKeys() error {
	if err := checkAgentUpstream(r.req.Profile); err != nil {
		return refuse(err)
	}
	if _, err := proxy.ProfileRun(r.req.Profile, r.host.LookupEnv, "", nil, r.host.AuditDir); err != nil {
		return refuse(err)
	}
	return nil
}

// checkProfile has the profile's provider, the one the run goes on with,
// check the profile before anything starts: a network policy it cannot
// enforce, or settings it would refuse, stop the run here with every
// problem at its key in the config file.
func (r *runner) checkProfile(ctx context.Context) error {
	sb, err := r.openProvider(ctx)
	if err != nil {
		return err
	}
	return sb.Check(ctx)
}

// openProvider starts the profile's provider plugin once, for the sandbox
// the run uses (req.Sandbox, else the profile's own): the check phase of
// a run starts it, and the plugin phase goes on with it.
func (r *runner) openProvider(ctx context.Context) (*sandbox.Sandbox, error) {
	if r.st != nil {
		return r.st.Sandbox(), nil
	}
	st, err := stack.Open(ctx, stack.Host{Sandboxes: r.host.Sandboxes, Workers: r.host.Workers, Logger: r.host.Logger}, r.req.Profile, r.req.Sandbox)
	if err != nil {
		return nil, err
	}
	r.st = st
	r.onEnd("stop the provider plugin", "plugin", st.Close)
	return st.Sandbox(), nil
}

// sandboxName is the name of the sandbox the run uses, as messages say it.
func (r *runner) sandboxName() string {
	switch {
	case r.st != nil:
		return r.st.SandboxRef().Name
	case r.req.Sandbox != "":
		return r.req.Sandbox
	}
	return sandbox.Name(r.req.Profile, sandbox.Owner())
}

// openSandbox starts the profile's provider plugin and its sandbox, puts
// the worker inside, and keeps the sandbox awake until the run's cleanups
// end (Stack.KeepAwake): neither a pause between the run's steps nor the
// one between its agent's end and the delivery of its work is taken for
// the end of the work by the sandbox's watchdog, however long the host
// takes.
func (r *runner) openSandbox(ctx context.Context) error {
	if err := r.phase(PhasePlugin, func() error {
		_, err := r.openProvider(ctx)
		return err
	}); err != nil {
		return err
	}
	if err := r.phase(PhaseSandbox, func() error {
		if err := r.st.Up(ctx); err != nil {
			return err
		}
		r.egress = egressPolicyOf(r.st.Running.Details)
		if r.state == runstore.Checked {
			return r.advance(runstore.SandboxUp)
		}
		return nil
	}); err != nil {
		return err
	}
	return r.phase(PhaseWorker, func() error {
		if err := r.st.InstallWorker(ctx); err != nil {
			return err
		}
		r.onEnd("let the sandbox's watchdog stop it once idle", "", r.st.KeepAwake(ctx))
		return nil
	})
}

// openLive makes the run's way into its sandbox, which reaches the proxy
// at target. With hostSteps, the steps amelia runs there itself talk to a
// remote through the proxy (the clone and the push of a URL): a tunnel to
// the proxy is opened for them now, wherever it suits the provider, and
// kept open for the run; openLive returns where it listens in the sandbox
// ("" without hostSteps). The agent's own tunnel is its supervisor's
// (attachAgent).
func (r *runner) openLive(ctx context.Context, target string, hostSteps bool) (string, error) {
	r.lv = &live{r: r, target: target}
	r.onEnd("close the tunnels", "", func(context.Context) error {
		opened, err := r.lv.closeTunnels()
		if opened {
			r.gone("tunnel")
		}
		return err
	})
	if !hostSteps {
		return "", nil
	}
	var listen string
	err := r.phase(PhaseTunnel, func() error {
		// Opened wherever it suits the provider, then reopened where the
		// steps' environment says it is. The first open returns before
		// anything can reopen it.
		_, err := r.lv.keep(ctx, "the tunnel to the proxy", func(ctx context.Context, ex sandboxexec.Execer) (tunnel.Tunnel, error) {
			if listen != "" {
				return tunnel.Open(ctx, ex, tunnel.HostOptions{Worker: r.st.Worker, Listen: listen, Target: target, Logger: r.host.Logger})
			}
			tun, err := r.openTunnel(ctx, ex, target)
			if err == nil {
				listen = tun.Addr()
			}
			return tun, err
		})
		return err
	})
	return listen, err
}

// attachAgent carries the tunnel the supervisor of a's agent holds to the
// proxy, and keeps carrying it, as the workflow's uid, until the agent
// has ended. A first attempt that fails is retried as a lost tunnel is;
// an agent that has ended already has no tunnel to carry.
func (r *runner) attachAgent(ctx context.Context, a *agentRun) {
	k, err := r.lv.keep(ctx, "the agent's tunnel to the proxy", func(ctx context.Context, ex sandboxexec.Execer) (tunnel.Tunnel, error) {
		return tunnel.Open(ctx, workspace.RunAs(ex, r.st.UID), tunnel.HostOptions{
			Worker: r.st.Worker, Run: a.runDir(), Target: r.lv.target, Logger: r.host.Logger,
		})
	})
	switch {
	case errors.Is(err, tunnel.ErrRunEnded):
		r.host.Logger.Info("the agent has ended, and its tunnel with it")
		return
	case err != nil:
		r.host.Logger.Warn("could not carry the agent's tunnel to the proxy yet; trying again", "err", err)
	}
	a.tunnel = k
}

// workIn opens the workspace, reaching the sandbox through the stack
// (whose plugin is replaced should it die). The steps amelia runs there
// get the tunnel to the proxy at hostTunnel, when there is one ("":
// none). Where the provider separates uids, every workflow gets one of
// its own (see workspace.RunUser).
func (r *runner) workIn(hostTunnel string) error {
	opts := workspace.Options{Ignore: workspace.AgentState()}
	if !r.req.Profile.CommitBuildOutputs {
		opts.Ignore = append(opts.Ignore, workspace.BuildOutputs()...)
	}
	if hostTunnel != "" {
		opts.GitEnv = sandboxend.ProxyEnv(hostTunnel, r.agent.token, false)
		// git reaches an http(s) repository through the proxy's git
		// route, which adds the credential outside the sandbox.
		opts.GitURL = func(url string) string {
			if path, ok := proxy.GitPath(url); ok {
				return "http://" + hostTunnel + path
			}
			return url
		}
	}
	return r.st.OpenWorkspace(opts)
}

// agentEnv is the environment of what the agent's driver starts: the
// run's token, for the proxy (the agent's supervisor holds its tunnel:
// driver.DetachOptions).
func (r *runner) agentEnv() map[string]string {
	return map[string]string{sandboxend.EnvProxyToken: r.agent.token}
}

// keepTunnels returns a context that the run goes on under: every tunnel
// it keeps is reopened whenever it closes, and the context is cancelled,
// with the reason, when one cannot be.
func (r *runner) keepTunnels(ctx context.Context) (context.Context, context.CancelCauseFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	r.lv.keepTunnels(ctx, cancel)
	return ctx, cancel
}

// results brings the agent's work back: onto the host or the origin.
func (r *runner) results(ctx context.Context, a *agentRun) (Result, error) {
	var res Result
	usage := r.st.Driver.Usage()
	if err := r.phaseIn(ctx, PhaseResults, func() (err error) {
		if res, err = r.deliver(ctx, a.src, a.base); err != nil {
			return err
		}
		return r.advance(runstore.Delivered)
	}); err != nil {
		res.Usage = usage
		res.Workflow = a.src.workflow
		return res, err
	}
	res.Usage = usage
	return res, nil
}

// openTunnel opens the way from inside the sandbox to the proxy at target:
// the provider's own forward (SSH's remote port forwarding) when it has
// one that may be used here, else the exec tunnel through ex, which works
// everywhere.
func (r *runner) openTunnel(ctx context.Context, ex sandboxexec.Execer, target string) (tunnel.Tunnel, error) {
	sb := r.st.Sandbox()
	if fwd, ok := sb.Provider.(sdk.Forwarder); ok {
		f, err := tunnel.Forward(ctx, fwd, sb.Ref, target)
		if err == nil {
			r.host.Logger.Debug("the proxy is reached through the provider's forward", "addr", f.Addr())
			return f, nil
		}
		if !errors.Is(err, sdk.ErrUnsupported) {
			return nil, err
		}
		r.host.Logger.Debug("the provider does not forward here: tunnelling over exec", "reason", err)
	}
	return tunnel.Open(ctx, ex, tunnel.HostOptions{Worker: r.st.Worker, Target: target, Logger: r.host.Logger})
}

// causeOf prefers the reason ctx was cancelled with (the tunnel's death)
// over the error it caused; an interruption (the caller's context is done,
// and ctx with it, with the caller's cause, a signal) is not such a reason.
func (r *runner) causeOf(ctx context.Context, err error) error {
	if err == nil || r.caller.Err() != nil {
		return err
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(err, cause) {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	return err
}

func (r *runner) model() string {
	if r.req.Model != "" {
		return r.req.Model
	}
	return r.req.Profile.Model
}

// proxyRun is the proxy serving this run on host loopback.
type proxyRun struct {
	addr string
	run  *proxy.Run
}

// startProxy starts a proxy on host loopback for run id alone, serving
// token, or a new one when token is "", with the upstreams and keys of
// profile p (the run's, or attach's without its LLM keys). The keys are
// read here, from the host's environment.
func (r *runner) startProxy(p *config.Profile, src source, id, token string) (*proxyRun, error) {
	var repos []string
	if src.url != "" {
		repos = []string{src.url}
	}
	cfg, err := proxy.ProfileRun(p, r.host.LookupEnv, id, repos, r.host.AuditDir)
	if err != nil {
		return nil, err
	}
	cfg.Token = token
	cfg.Model = r.model()
	if r.req.Push {
		cfg.PushRef = "refs/heads/" + workspace.Branch(src.workflow)
	}
	srv := proxy.New(proxy.Options{Logger: r.host.Logger, Environ: r.host.Environ})
	run, err := srv.Start(cfg)
	if err != nil {
		return nil, err
	}
	addr, err := srv.ListenAndServe("")
	if err != nil {
		run.Close()
		return nil, err
	}
	r.onEnd("stop the proxy", "proxy", func(context.Context) error { return srv.Close() })
	return &proxyRun{addr: addr, run: run}, nil
}

// holdSandbox makes this run the only one in the profile's sandbox until
// it ends, unless its runs are separated from each other (the provider
// gives each a uid of its own: sdk.Capabilities.RunUsers) or the profile
// lets them share it unseparated (sandbox.concurrent_runs).
func (r *runner) holdSandbox(ctx context.Context, workflow string) error {
	p := r.req.Profile
	if p.Sandbox.ConcurrentRuns || r.st.Sandbox().Info.RunUsers {
		return nil
	}
	release, err := r.st.Workspace.Hold(ctx, fmt.Sprintf("workflow %s, host %s, pid %d", workflow, sandbox.Owner(), os.Getpid()))
	if errors.Is(err, workspace.ErrBusy) {
		return fmt.Errorf("%w: runs sharing a sandbox are not separated from each other; wait for it to end, run on another profile, or set sandbox.concurrent_runs: true in profile %s to share it anyway", err, p.Name)
	}
	if err != nil {
		return err
	}
	r.release = release
	r.onEnd("release the sandbox", "", r.releaseHold)
	return nil
}

// releaseHold ends this process's hold on the sandbox, once.
func (r *runner) releaseHold(ctx context.Context) error {
	release := r.release
	r.release = nil
	if release == nil {
		return nil
	}
	return release(ctx)
}

// prepareWorkspace brings the repository into the sandbox and adds the
// workflow's worktree; what becomes of it when the run ends is the run's
// state's to say (worktreeAtEnd).
func (r *runner) prepareWorkspace(ctx context.Context, a *agentRun) error {
	ws, src := r.st.Workspace, a.src
	if src.local != nil {
		synced, err := ws.SyncLocal(ctx, workspace.LocalSource{
			Repo: src.local, Branch: src.base, IncludeDirty: r.req.IncludeDirty, Workflow: src.workflow,
		})
		if err != nil {
			return err
		}
		a.base = synced.Base
	} else {
		var err error
		if a.base, err = ws.SyncURL(ctx, src.url, src.base); err != nil {
			return err
		}
	}
	dir, err := ws.AddWorktree(ctx, src.workflow, a.base)
	if errors.Is(err, workspace.ErrBranchExists) {
		return fmt.Errorf("%w: a run of workflow %s left work in this sandbox; if it is yours, bring it back with amelia results --profile %s %s (or --discard it there), else pick another --workflow",
			err, src.workflow, r.req.Profile.Name, src.workflow)
	}
	if err != nil {
		return err
	}
	a.worktree = dir
	r.worktreeAtEnd(a)
	return nil
}

// worktreeAtEnd registers what becomes of a's worktree when the run ends,
// as the run's state says: left alone while the agent may run, kept once
// the agent started and its work was not delivered, removed otherwise
// (unless --keep-worktree). The summary says which.
func (r *runner) worktreeAtEnd(a *agentRun) {
	p, name := r.req.Profile.Name, r.sandboxName()
	r.onEnd("remove the worktree", "", func(ctx context.Context) error {
		switch r.state {
		case runstore.Running:
			r.leave(fmt.Sprintf("agent, maybe still running in sandbox %s, with its worktree (%s follows it)", name, attachCommand(p, a.src.workflow)))
			return nil
		case runstore.AgentStarted, runstore.Ended, runstore.Stopped:
			return r.keepWork(ctx, a)
		case runstore.Delivered:
			if r.req.KeepWorktree {
				r.host.Logger.Info("worktree kept", "dir", a.worktree)
				r.leave(fmt.Sprintf("worktree %s in sandbox %s (--keep-worktree)", a.worktree, name))
				return r.removeRunDir(ctx)
			}
		}
		return r.retireWorktree(ctx, a)
	})
}

// retireWorktree ends the worktree of a run whose work was delivered or
// that left none: the run's processes end, and the worktree is parked for
// a later workflow, or handed with the run's directory to a removal
// inside the sandbox that nothing waits for (workspace.Retire). Then the
// run is forgotten. A retirement that failed leaves the worktree, and the
// uid that owns it, as they are, and the run recorded as Discarded (or
// Delivered): removing them loses nothing.
func (r *runner) retireWorktree(ctx context.Context, a *agentRun) error {
	err := r.st.Workspace.Retire(ctx, a.src.workflow, a.runDir())
	if err == nil {
		err = r.forget()
	}
	if err != nil {
		r.leave(fmt.Sprintf("worktree %s in sandbox %s (its removal failed)", a.worktree, r.sandboxName()))
		if r.state != runstore.Delivered {
			err = errors.Join(err, r.advance(runstore.Discarded))
		}
		return err
	}
	r.gone("worktree")
	return nil
}

// keepWork is the end of a run that did not deliver after its agent
// started: whatever the agent left is committed to the workflow branch in
// the sandbox, and unless that branch holds nothing beyond the base, the
// worktree stays and the run is recorded as kept, for `amelia results`.
// When the sandbox cannot be asked (its transport is gone), the work is
// kept too: nothing is removed on a guess.
func (r *runner) keepWork(ctx context.Context, a *agentRun) error {
	ws := r.st.Workspace
	c, commitErr := ws.CommitAll(ctx, a.src.workflow, r.req.Prompt)
	if commitErr == nil {
		has, err := ws.HasWork(ctx, a.src.workflow, a.base.Start)
		if err == nil && !has {
			r.host.Logger.Info("the agent left no work; worktree removed", "workflow", a.src.workflow)
			return r.retireWorktree(ctx, a)
		}
		r.sayLeftOut(workspace.Branch(a.src.workflow), c.LeftOut)
		commitErr = err
	}
	if commitErr != nil {
		r.host.Logger.Warn("could not commit the agent's work; the worktree is kept as it is", "workflow", a.src.workflow, "err", commitErr)
	}
	return r.advance(runstore.Kept)
}

// recordChecked records the run, checked, as its workflow's only one: a
// workflow whose earlier run may have left work in the sandbox, or whose
// other run started meanwhile, is refused with what to do. Should the run
// end before its agent starts, the record goes with it.
func (r *runner) recordChecked() error {
	if err := r.advance(runstore.Checked); err != nil {
		if errors.Is(err, runstore.ErrExists) {
			// Said as the check says it, unless the other run was
			// forgotten meanwhile.
			err = cmp.Or(r.checkNotKept(r.agent.src.workflow), err)
		}
		return refuse(err)
	}
	r.onEnd("forget the run", "", func(context.Context) error {
		if r.state.Preparing() {
			return r.forget()
		}
		return nil
	})
	return nil
}

// advance moves the run to state and writes its record: created at
// Checked, replaced at each step after.
func (r *runner) advance(state runstore.State) error {
	r.state = state
	a := r.agent
	rec := runstore.Record{
		Workflow: a.src.workflow, Profile: r.req.Profile.Name, Provider: r.req.Profile.Sandbox.Provider,
		Sandbox: r.sandboxName(), Config: sandbox.ConfigLabel(r.req.Profile),
		Repo: a.src.repo(), BaseBranch: a.base.Branch, BaseCommit: a.base.Commit, StartCommit: a.base.Start, Push: r.req.Push,
		Branch: workspace.Branch(a.src.workflow), Worktree: a.worktree, State: state, Ended: time.Now().UTC(),
		RunID: a.runID, Model: r.model(), Title: commitTitle(r.req.Prompt), RunDir: a.runDir(),
	}
	if r.st != nil {
		rec.Worker = r.st.Worker
	}
	if state.AgentMayRun() || state == runstore.Ended {
		// Attach serves the agent's token again.
		rec.ProxyToken = a.token
	}
	if (state == runstore.Kept || state == runstore.Discarded) && r.failure != nil {
		rec.Reason = firstLine(new(r.failure.Error()))
	}
	if state == runstore.Kept {
		r.kept = &rec
	}
	switch {
	case r.host.Runs == nil:
		return nil
	case state == runstore.Checked:
		return r.host.Runs.Create(rec)
	}
	return r.host.Runs.Put(rec)
}

// forget removes the run's record: nothing of it is left in the sandbox.
func (r *runner) forget() error {
	if r.host.Runs == nil || r.agent == nil {
		return nil
	}
	return r.host.Runs.Delete(r.req.Profile.Name, r.agent.src.workflow)
}

// removeRunDir removes the agent's run directory, once nothing of the run
// is to be kept.
func (r *runner) removeRunDir(ctx context.Context) error {
	if r.agent == nil || r.agent.runDir() == "" {
		return nil
	}
	return r.st.Workspace.RemoveRunDir(ctx, r.agent.src.workflow, r.agent.runDir())
}

// sayLeftOut tells the user which build and cache outputs the checkout
// ignored (workspace.BuildOutputs), so none is missed without a word: a
// progress line, shown above a live view.
func (r *runner) sayLeftOut(branch string, paths []string) {
	if len(paths) == 0 {
		return
	}
	const most = 5
	list := strings.Join(paths[:min(len(paths), most)], ", ")
	if len(paths) > most {
		list += fmt.Sprintf(" and %d more", len(paths)-most)
	}
	r.host.Logger.Info(fmt.Sprintf("left out of %s, as build and cache outputs: %s (profile key commit_build_outputs: true keeps them)", branch, list),
		sdk.ProgressKey, true)
}

// commitTitle is the prompt's first line, as CommitAll uses it.
func commitTitle(prompt string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(prompt), "\n")
	return first
}

// deliver commits what the agent left uncommitted, then brings the branch
// back into the host checkout, or pushes it for a URL.
func (r *runner) deliver(ctx context.Context, src source, base workspace.Base) (Result, error) {
	ws := r.st.Workspace
	res := Result{Workflow: src.workflow, Branch: workspace.Branch(src.workflow)}
	c, err := ws.CommitAll(ctx, src.workflow, r.req.Prompt)
	if err != nil {
		return res, err
	}
	// What was left out is said once there is a branch to say it of.
	if src.local == nil {
		if err := ws.Push(ctx, src.workflow, src.url, base); err != nil {
			return res, err
		}
		res.Pushed = true
		stat, err := ws.DiffStat(ctx, src.workflow, base.Commit)
		if err != nil {
			return res, err
		}
		res.DiffStat = stat
		r.sayLeftOut(res.Branch, c.LeftOut)
		return res, nil
	}
	_, err = ws.FetchResult(ctx, src.local, src.workflow, base, workspace.ResultOptions{})
	if errors.Is(err, workspace.ErrNoChanges) {
		// The agent changed nothing (it answered a question, or found
		// nothing to do): a successful run without a branch.
		r.host.Logger.Info("the agent changed nothing; no branch created", "workflow", src.workflow)
		res.Branch = ""
		return res, nil
	}
	if err != nil {
		return res, err
	}
	stat, err := src.local.DiffStat(ctx, base.Commit, res.Branch)
	if err != nil {
		return res, err
	}
	res.DiffStat = stat
	r.sayLeftOut(res.Branch, c.LeftOut)
	return res, nil
}

// firstLine is the first line of s, for one-line errors.
func firstLine(s *string) string {
	if s == nil {
		return "no message"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(*s), "\n")
	return line
}
