package run

import (
	"context"
	"fmt"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/core/workspace"
)

// Attach follows the run rec records as running, from its first message,
// and ends it as Run does: the work comes back as a branch, or is kept
// when the run failed. It is how a run goes on after the process that
// started it died or lost its sandbox: a proxy serves the run's token
// again and carries the tunnel the agent's supervisor held meanwhile, so
// an agent still waiting out the outage carries on. p is rec's profile,
// its provider the one the run used.
func Attach(ctx context.Context, host Host, rec runstore.Record, p *config.Profile, view runview.View) (Result, error) {
	req := Request{Profile: p, Repo: rec.Repo, Base: rec.BaseBranch, Workflow: rec.Workflow, Prompt: rec.Title, Push: rec.Push, Sandbox: rec.SandboxName()}
	r := newRunner(ctx, host, req, view)
	return r.end(r.attach(ctx, rec))
}

func (r *runner) attach(ctx context.Context, rec runstore.Record) (Result, error) {
	res := Result{Workflow: rec.Workflow}
	if rec.State != runstore.Running || rec.RunDir == "" || rec.ProxyToken == "" {
		return res, fmt.Errorf("%w: the run of %s is not running (it is %s): bring its work back with %s", ErrRefused, rec.Workflow, rec.State, RecoverCommand(rec))
	}
	var src source
	if err := r.phase(PhaseCheck, func() (err error) {
		src, err = r.recordedSource(ctx, rec)
		return err
	}); err != nil {
		return res, err
	}
	var prx *proxyRun
	if err := r.phase(PhaseProxy, func() (err error) {
		prx, err = r.startProxy(src, rec.RunID, rec.ProxyToken)
		return err
	}); err != nil {
		return res, err
	}
	sb, workdir, worker, err := r.openSandbox(ctx)
	if err != nil {
		return res, err
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
	base := workspace.Base{Branch: rec.BaseBranch, Commit: rec.BaseCommit, Start: rec.StartCommit}
	a := &agentRun{src: src, base: base, worktree: rec.Worktree, runID: rec.RunID, token: rec.ProxyToken, worker: worker,
		det: &driver.Detached{Dir: rec.RunDir}}
	r.agent = a
	if err := r.runAsItsUser(ctx, ws, d, a); err != nil {
		return res, err
	}
	r.agentStarted, r.agentRunning = true, true
	r.worktreeAtEnd(ws, src, base, rec.Worktree)
	// The work is committed with the run's whole prompt, as the run that
	// started it would have; the record holds only its title.
	if prompt, err := d.AgenticPrompt(ctx, a.det.Dir); err == nil {
		r.req.Prompt = prompt
	} else {
		r.host.Logger.Warn("could not read the run's prompt; its title goes into the commit", "err", err)
	}

	if err := r.phaseIn(ctx, PhaseAgent, func() error {
		defer r.endAgentTunnel(a)
		r.attachAgent(ctx, a)
		return r.followAgent(ctx, d, a)
	}); err != nil {
		res.Usage = d.Usage()
		return res, err
	}
	return r.results(ctx, ws, a, d.Usage())
}

// recordedSource is the repository rec's run works on.
func (r *runner) recordedSource(ctx context.Context, rec runstore.Record) (source, error) {
	src := source{workflow: rec.Workflow, base: rec.BaseBranch}
	if isURL(rec.Repo) {
		src.url = rec.Repo
		return src, nil
	}
	local, err := workspace.OpenHostRepo(ctx, rec.Repo, r.host.Logger)
	if err != nil {
		return src, fmt.Errorf("the run of %s started from %s: %w", rec.Workflow, rec.Repo, err)
	}
	src.local = local
	return src, nil
}
