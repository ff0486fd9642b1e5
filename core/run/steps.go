package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/execsession"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
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
		return r.checkKeys()
	}); err != nil {
		return res, err
	}
	res.Workflow = src.workflow

	var prx *proxyRun
	if err := r.phase(PhaseProxy, func() (err error) {
		prx, err = r.startProxy(req.Profile, src, proxy.NewRunID(src.workflow, time.Now()), "")
		return err
	}); err != nil {
		return res, err
	}

	sb, workdir, worker, err := r.openSandbox(ctx)
	if err != nil {
		return res, err
	}

	// Fail closed: a policy without direct egress is checked from inside
	// before anything runs there.
	if mode := req.Profile.Sandbox.Network; mode != sdk.NetworkOpen {
		if err := r.phase(PhaseEgress, func() error {
			reached, err := reachedAfterSettling(ctx, sb, worker, r.egress.settle, req.Profile.Sandbox.EgressCheckTargets...)
			if err == nil && len(reached) > 0 {
				why := ""
				if r.egress.needs != "" {
					why = " (" + r.egress.needs + ")"
				}
				still := ""
				if r.egress.settle > 0 {
					still = fmt.Sprintf(" (still, after %v)", r.egress.settle)
				}
				err = fmt.Errorf("profile %s asks for network %q, but the sandbox reached %s directly%s: provider %s does not enforce it here%s; nothing was run",
					req.Profile.Name, mode, strings.Join(reached, ", "), still, sb.Info.Name, why)
			}
			return err
		}); err != nil {
			return res, err
		}
	}

	hostTunnel, err := r.openLive(ctx, sb, worker, prx.addr, src.url != "")
	if err != nil {
		return res, err
	}
	ctx, cancel := r.keepTunnels(ctx)
	defer cancel(nil)
	ws, d, err := r.workIn(workdir, worker, hostTunnel, prx)
	if err != nil {
		return res, err
	}
	var wt string
	var base workspace.Base
	if err := r.phaseIn(ctx, PhaseWorkspace, func() (err error) {
		if err := r.holdSandbox(ctx, ws, src.workflow); err != nil {
			return err
		}
		base, wt, err = r.prepareWorkspace(ctx, ws, src)
		r.agent = &agentRun{src: src, base: base, worktree: wt, runID: prx.run.ID(), token: prx.run.Token(), worker: worker}
		if err != nil {
			return err
		}
		if err := r.runAsItsUser(ctx, ws, d, r.agent); err != nil {
			return err
		}
		return r.setUpCheckout(ctx, r.agent)
	}); err != nil {
		return res, err
	}

	a := r.agent
	if err := r.phaseIn(ctx, PhaseAgent, func() error {
		defer r.endAgentTunnel(a)
		if err := r.startAgent(ctx, ws, d, a); err != nil {
			return err
		}
		return r.followAgent(ctx, d, a)
	}); err != nil {
		res.Usage = d.Usage()
		return res, err
	}
	return r.results(ctx, ws, a, d.Usage())
}

// checkKeys refuses a profile whose keys (its LLM upstreams', and the git
// token it names) the proxy could not read from the host's environment. It
// reads them as the proxy's config is made, so the two cannot differ; the
// config itself is dropped (the proxy makes its own, for its run id).
func (r *runner) checkKeys() error {
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

// openProvider starts the profile's provider plugin once: the check phase
// of a run starts it, and the plugin phase goes on with it.
func (r *runner) openProvider(ctx context.Context) (*sandbox.Sandbox, error) {
	if r.provider != nil {
		return r.provider, nil
	}
	sb, err := r.openNamed(ctx)
	if err != nil {
		return nil, err
	}
	r.provider = sb
	r.onEnd("stop the provider plugin", "plugin", func(context.Context) error {
		if r.lv != nil {
			// The one that replaced sb after a crash, if any: a repair
			// closed sb then.
			r.lv.sandbox().Close()
			return nil
		}
		sb.Close()
		return nil
	})
	return sb, nil
}

// openNamed starts the profile's provider, for the sandbox the run uses:
// the one req.Sandbox names, else the profile's own.
func (r *runner) openNamed(ctx context.Context) (*sandbox.Sandbox, error) {
	sb, err := r.host.Sandboxes.Open(ctx, r.req.Profile, r.host.Logger)
	if err != nil || r.req.Sandbox == "" {
		return sb, err
	}
	return sb.Other(sdk.SandboxRef{Name: r.req.Sandbox, Config: sb.Ref.Config}), nil
}

// sandboxName is the name of the sandbox the run uses, as messages say it.
func (r *runner) sandboxName() string {
	switch {
	case r.provider != nil:
		return r.provider.Ref.Name
	case r.req.Sandbox != "":
		return r.req.Sandbox
	}
	return sandbox.Name(r.req.Profile, sandbox.Owner())
}

// openSandbox starts the profile's provider plugin and its sandbox, and
// puts the worker inside; it returns the sandbox's workspace root and the
// worker's path there.
func (r *runner) openSandbox(ctx context.Context) (sb *sandbox.Sandbox, workdir, worker string, err error) {
	if err := r.phase(PhasePlugin, func() (err error) {
		sb, err = r.openProvider(ctx)
		return err
	}); err != nil {
		return nil, "", "", err
	}
	var running sdk.Sandbox
	if err := r.phase(PhaseSandbox, func() (err error) {
		running, err = sb.Up(ctx)
		workdir = running.Workdir
		r.sandboxUp = err == nil
		r.egress = egressPolicyOf(running.Details)
		return err
	}); err != nil {
		return nil, "", "", err
	}
	if err := r.phase(PhaseWorker, func() (err error) {
		worker, err = r.host.Workers.EnsureWorker(ctx, sb, running.Worker)
		return err
	}); err != nil {
		return nil, "", "", err
	}
	return sb, workdir, worker, nil
}

// openLive makes the run's way into its sandbox, which reaches the proxy
// at target. With hostSteps, the steps amelia runs there itself talk to a
// remote through the proxy (the clone and the push of a URL): a tunnel to
// the proxy is opened for them now, wherever it suits the provider, and
// kept open for the run; openLive returns where it listens in the sandbox
// ("" without hostSteps). The agent's own tunnel is its supervisor's
// (attachAgent).
func (r *runner) openLive(ctx context.Context, sb *sandbox.Sandbox, worker, target string, hostSteps bool) (string, error) {
	r.lv = &live{r: r, sb: sb, target: target}
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
				return tunnel.Open(ctx, ex, tunnel.HostOptions{Worker: worker, Listen: listen, Target: target, Logger: r.host.Logger})
			}
			tun, err := r.openTunnel(ctx, sb, ex, worker, target)
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
		return tunnel.Open(ctx, workspace.RunAs(ex, a.uid), tunnel.HostOptions{
			Worker: a.worker, Run: a.det.Dir, Target: r.lv.target, Logger: r.host.Logger,
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

// workIn is the workspace and the agent's driver, both reaching the
// sandbox through the live connection. The steps amelia runs there get
// the tunnel to the proxy at hostTunnel, when there is one ("": none); the
// agent gets its token and
// its supervisor holds the agent's own tunnel (driver.DetachOptions).
// Where the provider separates uids, every workflow gets one of its own
// (see workspace.RunUser).
func (r *runner) workIn(workdir, worker, hostTunnel string, prx *proxyRun) (*workspace.Workspace, *driver.Driver, error) {
	sb := r.lv.sandbox()
	opts := workspace.Options{Worker: worker, RunUsers: sb.Info.RunUsers, ParkedCheckouts: r.req.Profile.Sandbox.Parked(), Logger: r.host.Logger}
	if !r.req.Profile.CommitBuildOutputs {
		opts.Ignore = workspace.BuildOutputs()
	}
	if hostTunnel != "" {
		opts.GitEnv = sandboxend.ProxyEnv(hostTunnel, prx.run.Token(), false)
		// git reaches an http(s) repository through the proxy's git
		// route, which adds the credential outside the sandbox.
		opts.GitURL = func(url string) string {
			if path, ok := proxy.GitPath(url); ok {
				return "http://" + hostTunnel + path
			}
			return url
		}
	}
	r.ex = r.lv
	if sb.Info.RunUsers {
		// A run uid's steps go over one exec of the worker as that uid.
		sessions := execsession.New(r.lv, worker, r.host.Logger)
		r.ex = sessions
		r.onEnd("end the command sessions", "", sessions.Close)
	}
	ws, err := workspace.New(r.ex, workdir, opts)
	if err != nil {
		return nil, nil, err
	}
	env := map[string]string{sandboxend.EnvProxyToken: prx.run.Token()}
	return ws, &driver.Driver{Exec: r.ex, Worker: worker, Provider: sb.Info.Name, Env: env, Logger: r.host.Logger}, nil
}

// runAsItsUser makes d run the agent of a as its workflow's uid, when it
// has one: its run directory, the agent, following and stopping it.
func (r *runner) runAsItsUser(ctx context.Context, ws *workspace.Workspace, d *driver.Driver, a *agentRun) error {
	uid, err := ws.RunUser(ctx, a.src.workflow)
	if err != nil {
		return err
	}
	a.uid = uid
	d.Exec = workspace.RunAs(r.ex, uid)
	return nil
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
func (r *runner) results(ctx context.Context, ws *workspace.Workspace, a *agentRun, usage *protocol.DriverUsage) (Result, error) {
	var res Result
	if err := r.phaseIn(ctx, PhaseResults, func() (err error) {
		res, err = r.deliver(ctx, ws, a.src, a.base)
		return err
	}); err != nil {
		res.Usage = usage
		res.Workflow = a.src.workflow
		return res, err
	}
	r.delivered = true
	res.Usage = usage
	return res, nil
}

// openTunnel opens the way from inside the sandbox to the proxy at target:
// the provider's own forward (SSH's remote port forwarding) when it has
// one that may be used here, else the exec tunnel through ex, which works
// everywhere.
func (r *runner) openTunnel(ctx context.Context, sb *sandbox.Sandbox, ex sandboxexec.Execer, worker, target string) (tunnel.Tunnel, error) {
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
	return tunnel.Open(ctx, ex, tunnel.HostOptions{Worker: worker, Target: target, Logger: r.host.Logger})
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
func (r *runner) holdSandbox(ctx context.Context, ws *workspace.Workspace, workflow string) error {
	p := r.req.Profile
	if p.Sandbox.ConcurrentRuns || r.lv.sandbox().Info.RunUsers {
		return nil
	}
	release, err := ws.Hold(ctx, fmt.Sprintf("workflow %s, host %s, pid %d", workflow, sandbox.Owner(), os.Getpid()))
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
// workflow's worktree; the worktree is removed when the run ends unless
// --keep-worktree, or the run failed after its agent started (keepWork).
func (r *runner) prepareWorkspace(ctx context.Context, ws *workspace.Workspace, src source) (workspace.Base, string, error) {
	var base workspace.Base
	if src.local != nil {
		synced, err := ws.SyncLocal(ctx, workspace.LocalSource{
			Repo: src.local, Branch: src.base, IncludeDirty: r.req.IncludeDirty, Workflow: src.workflow,
		})
		if err != nil {
			return base, "", err
		}
		base = synced.Base
	} else {
		var err error
		if base, err = ws.SyncURL(ctx, src.url, src.base); err != nil {
			return base, "", err
		}
	}
	dir, err := ws.AddWorktree(ctx, src.workflow, base)
	if errors.Is(err, workspace.ErrBranchExists) {
		return base, "", fmt.Errorf("%w: a run of workflow %s left work in this sandbox; if it is yours, bring it back with amelia results --profile %s %s (or --discard it there), else pick another --workflow",
			err, src.workflow, r.req.Profile.Name, src.workflow)
	}
	if err != nil {
		return base, "", err
	}
	r.worktreeAtEnd(ws, src, base, dir)
	return base, dir, nil
}

// worktreeAtEnd registers what becomes of the worktree dir when the run
// ends: left alone while the agent may run, kept after a failure once the
// agent started, removed otherwise (unless --keep-worktree). The summary
// says which.
func (r *runner) worktreeAtEnd(ws *workspace.Workspace, src source, base workspace.Base, dir string) {
	p, name := r.req.Profile.Name, r.sandboxName()
	r.onEnd("remove the worktree", "", func(ctx context.Context) error {
		switch {
		case r.agentRunning:
			r.leave(fmt.Sprintf("agent, maybe still running in sandbox %s, with its worktree (%s follows it)", name, attachCommand(p, src.workflow)))
			return nil
		case r.agentStarted && !r.delivered:
			return r.keepWork(ctx, ws, src, base, dir)
		case r.req.KeepWorktree:
			r.host.Logger.Info("worktree kept", "dir", dir)
			r.leave(fmt.Sprintf("worktree %s in sandbox %s (--keep-worktree)", dir, name))
			return errors.Join(r.removeRunDir(ctx, ws), r.record(runstore.Delivered, nil))
		}
		return r.retireWorktree(ctx, ws, src, dir)
	})
}

// retireWorktree ends the worktree dir of a run whose work was delivered
// or that left none: the run's processes end, and the worktree is parked
// for a later workflow, or handed with the run's directory to a removal
// inside the sandbox that nothing waits for (workspace.Retire). Then the
// run is forgotten. A retirement that failed leaves the worktree, and the
// uid that owns it, as they are.
func (r *runner) retireWorktree(ctx context.Context, ws *workspace.Workspace, src source, dir string) error {
	runDir := ""
	if r.agent != nil && r.agent.det != nil {
		runDir = r.agent.det.Dir
	}
	err := ws.Retire(ctx, src.workflow, runDir)
	if err == nil {
		err = r.forget()
	}
	if err != nil {
		r.leave(fmt.Sprintf("worktree %s in sandbox %s (its removal failed)", dir, r.sandboxName()))
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
func (r *runner) keepWork(ctx context.Context, ws *workspace.Workspace, src source, base workspace.Base, dir string) error {
	c, commitErr := ws.CommitAll(ctx, src.workflow, r.req.Prompt)
	if commitErr == nil {
		has, err := ws.HasWork(ctx, src.workflow, base.Start)
		if err == nil && !has {
			r.host.Logger.Info("the agent left no work; worktree removed", "workflow", src.workflow)
			return r.retireWorktree(ctx, ws, src, dir)
		}
		r.sayLeftOut(workspace.Branch(src.workflow), c.LeftOut)
		commitErr = err
	}
	if commitErr != nil {
		r.host.Logger.Warn("could not commit the agent's work; the worktree is kept as it is", "workflow", src.workflow, "err", commitErr)
	}
	return r.record(runstore.Kept, r.failure)
}

// record notes on the host how the run's agent and work are: running,
// kept after a failure, or delivered with the worktree kept on request.
func (r *runner) record(state runstore.State, reason error) error {
	a := r.agent
	rec := runstore.Record{
		Workflow: a.src.workflow, Profile: r.req.Profile.Name, Provider: r.req.Profile.Sandbox.Provider,
		Sandbox: r.sandboxName(), Config: sandbox.ConfigLabel(r.req.Profile),
		Repo: a.src.repo(), BaseBranch: a.base.Branch, BaseCommit: a.base.Commit, StartCommit: a.base.Start, Push: r.req.Push,
		Branch: workspace.Branch(a.src.workflow), Worktree: a.worktree, State: state, Ended: time.Now().UTC(),
		RunID: a.runID, Model: r.model(), Title: commitTitle(r.req.Prompt), Worker: a.worker,
	}
	if a.det != nil {
		rec.RunDir = a.det.Dir
	}
	if state == runstore.Running {
		rec.ProxyToken = a.token
	}
	if reason != nil {
		rec.Reason = firstLine(new(reason.Error()))
	}
	if state == runstore.Kept {
		r.kept = &rec
	}
	if r.host.Runs == nil {
		return nil
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
func (r *runner) removeRunDir(ctx context.Context, ws *workspace.Workspace) error {
	if r.agent == nil || r.agent.det == nil {
		return nil
	}
	return ws.RemoveRunDir(ctx, r.agent.src.workflow, r.agent.det.Dir)
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
func (r *runner) deliver(ctx context.Context, ws *workspace.Workspace, src source, base workspace.Base) (Result, error) {
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
