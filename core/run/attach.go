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
	req := Request{Profile: p, Repo: rec.Repo, Base: rec.BaseBranch, Workflow: rec.Workflow, Prompt: rec.Title, Push: rec.Push, Sandbox: rec.SandboxName(), Model: rec.Model}
	r := newRunner(ctx, host, req, view)
	return r.end(r.attach(ctx, rec))
}

func (r *runner) attach(ctx context.Context, rec runstore.Record) (Result, error) {
	res := Result{Workflow: rec.Workflow}
	if !(rec.State.AgentMayRun() || rec.State == runstore.Ended) || rec.RunDir == "" || rec.ProxyToken == "" {
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
	var keyErr error // the profile's LLM keys are not set here
	if err := r.phase(PhaseProxy, func() (err error) {
		p := r.req.Profile
		if p, keyErr = withoutMissingKeys(p, r.host.LookupEnv); keyErr != nil {
			r.host.Logger.Debug("the profile's LLM keys are not set: the proxy serves no model unless the agent has ended", "err", keyErr)
		}
		prx, err = r.startProxy(p, src, rec.RunID, rec.ProxyToken)
		return err
	}); err != nil {
		return res, err
	}
	// The run goes on from where its record says it is.
	base := workspace.Base{Branch: rec.BaseBranch, Commit: rec.BaseCommit, Start: rec.StartCommit}
	a := &agentRun{src: src, base: base, worktree: rec.Worktree, runID: rec.RunID, token: rec.ProxyToken,
		det: &driver.Detached{Dir: rec.RunDir}}
	r.agent, r.state = a, rec.State
	ctx, cancel, err := r.connect(ctx, prx.addr)
	if err != nil {
		return res, err
	}
	defer cancel(nil)
	if err := r.st.As(ctx, src.workflow, r.agentEnv()); err != nil {
		return res, err
	}
	d := r.st.Driver
	r.worktreeAtEnd(a)
	// The work is committed with the run's whole prompt, as the run that
	// started it would have; the record holds only its title.
	if prompt, err := d.AgenticPrompt(ctx, a.det.Dir); err == nil {
		r.req.Prompt = prompt
	} else {
		r.host.Logger.Warn("could not read the run's prompt; its title goes into the commit", "err", err)
	}

	return r.followAndDeliver(ctx, a, func() error {
		if keyErr != nil {
			if err := r.ended(ctx, d, a, keyErr); err != nil {
				return err
			}
		}
		r.attachAgent(ctx, a)
		return nil
	})
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

// withoutMissingKeys is p, or, when its LLM keys cannot be read from the
// host's environment (lookupEnv), p without them, and why. An agent that
// has ended makes no model call, and bringing its work back needs no key;
// one still running is refused (ended) before the proxy can see a call.
func withoutMissingKeys(p *config.Profile, lookupEnv func(string) (string, bool)) (*config.Profile, error) {
	_, err := p.LLMKey(lookupEnv)
	if err == nil {
		_, err = p.AnthropicKey(lookupEnv)
	}
	if err == nil {
		_, err = p.GeminiKey(lookupEnv)
	}
	if err == nil {
		return p, nil
	}
	q := *p
	q.LLM.APIKeyEnv, q.LLM.APIKey = "", ""
	if a := p.LLM.Anthropic; a != nil {
		q.LLM.Anthropic = &config.Upstream{BaseURL: a.BaseURL}
	}
	if g := p.LLM.Gemini; g != nil {
		q.LLM.Gemini = &config.Upstream{BaseURL: g.BaseURL}
	}
	return &q, err
}

// ended refuses, with keyErr, to follow a's agent when it still runs: its
// next model call needs the key this host lacks. It is asked before the
// agent's tunnel is carried, so no call of its reaches the keyless proxy.
func (r *runner) ended(ctx context.Context, d *driver.Driver, a *agentRun, keyErr error) error {
	st, err := d.AgenticState(ctx, a.det.Dir)
	if err != nil {
		return fmt.Errorf("%w; and whether the agent has ended is unknown: %v", keyErr, err)
	}
	if st.State == driver.AgentRunning {
		return refuse(fmt.Errorf("the agent of %s is still running, and its model calls need the profile's key: %w; then %s again",
			a.src.workflow, keyErr, attachCommand(r.req.Profile.Name, a.src.workflow)))
	}
	return nil
}
