package run

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/amelia-sandbox/amelia/core/agents"
	"github.com/amelia-sandbox/amelia/core/backoff"
	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// agentRun is the agent of a run: what it works on, and where it runs
// detached in the sandbox.
type agentRun struct {
	src      source
	base     workspace.Base
	worktree string
	runID    string
	token    string
	// det is the agent, its run directory in the sandbox once it is being
	// started.
	det *driver.Detached
	// tunnel carries the tunnel the agent's supervisor holds.
	tunnel *keptTunnel
}

// runDir is the agent's run directory in the sandbox, or "" before it is
// being started.
func (a *agentRun) runDir() string {
	if a.det == nil {
		return ""
	}
	return a.det.Dir
}

// drainTimeout bounds the reading of what a stopped agent wrote last.
const drainTimeout = 30 * time.Second

// startAgent starts the agent detached in the sandbox, in a run directory
// of its own; an agent with a uid of its own gets its HOME and TMPDIR
// there too. Its supervisor holds the agent's tunnel to the proxy, which
// this process carries from then on (attachAgent). When this run holds the
// sandbox, the supervisor takes the sandbox's lock over from this process,
// so that the sandbox stays held for as long as the agent runs, whatever
// becomes of this process. From then on the run is recorded as running,
// for attach.
func (r *runner) startAgent(ctx context.Context, a *agentRun) error {
	ws, d := r.st.Workspace, r.st.Driver
	spec, err := r.agentSpec(ctx)
	if err != nil {
		return err
	}
	opts := driver.DetachOptions{PrivateHome: r.st.UID != "", Tunnel: true, EgressProxy: r.req.Profile.Sandbox.Network != sdk.NetworkOpen}
	if r.release != nil {
		// Between this release and the supervisor's lock, another run
		// could take the sandbox: the start then fails with ErrRunBusy,
		// before the agent did anything.
		if err := r.releaseHold(ctx); err != nil {
			return err
		}
		opts.Lock = ws.LockFile()
	}
	// From here on, the agent may have touched the checkout: whatever
	// happens, its work is kept.
	a.det = &driver.Detached{Dir: ws.RunDir(a.runID)}
	if err := r.advance(runstore.AgentStarted); err != nil {
		return err
	}
	det, err := d.StartAgentic(ctx, driver.AgenticRequest{
		Workflow: a.src.workflow, Prompt: r.req.Prompt, Cwd: a.worktree, Model: r.model(),
		MaxTurns: cmp.Or(r.req.MaxTurns, r.req.Profile.MaxTurns), Agent: spec,
	}, a.det.Dir, opts)
	if errors.Is(err, driver.ErrRunBusy) {
		return fmt.Errorf("%w: another run took the sandbox while this one prepared; nothing ran, try again", err)
	}
	if err != nil {
		return err
	}
	a.det = det
	if err := r.advance(runstore.Running); err != nil {
		return err
	}
	r.attachAgent(ctx, a)
	return nil
}

// agentSpec is the run's agent for the worker, with the profile's MCP
// servers, which the proxy bridges for it. An agent the host can
// upload (agents.Agent.Uploadable) goes into the sandbox from the
// profile's agent.binary, else from the host's PATH if it is there as a
// static Linux executable; otherwise the worker finds it on the
// sandbox's PATH, or says it is missing.
func (r *runner) agentSpec(ctx context.Context) (driver.AgentSpec, error) {
	a := r.req.Profile.Agent
	spec := driver.AgentSpec{Name: a.Name, API: a.API}
	for _, m := range r.req.Profile.MCP {
		spec.MCP = append(spec.MCP, m.Name)
	}
	if a.Name == "" {
		return spec, nil
	}
	ag, err := agents.Lookup(a.Name)
	if err != nil || !ag.Uploadable {
		return spec, err
	}
	bin, given := a.Binary, a.Binary != ""
	if !given {
		if bin, err = exec.LookPath(ag.Binary); err != nil {
			return spec, nil
		}
	}
	path, err := r.st.InstallTool(ctx, ag.Binary, bin)
	switch {
	case err == nil:
		spec.Binary = path
	case given:
		return spec, fmt.Errorf("agent.binary: %w", err)
	default:
		r.host.Logger.Warn("the agent on this machine's PATH cannot go into the sandbox; looking for it there", "agent", a.Name, "err", err)
	}
	return spec, nil
}

// checkAgentUpstream refuses an agent that speaks Google's Gemini API
// (the gemini agent) on a profile without an llm.gemini block: the proxy
// translates between OpenAI's and Anthropic's APIs only, so the agent
// would reach no model.
func checkAgentUpstream(p *config.Profile) error {
	name := cmp.Or(p.Agent.Name, agents.Own)
	a, err := agents.Lookup(name)
	if err != nil {
		return err
	}
	if cmp.Or(p.Agent.API, a.API) == geminiAPI && p.LLM.Gemini == nil {
		return fmt.Errorf("the agent %s speaks only Google's Gemini API, which the proxy does not translate, and profile %s has no llm.gemini block: add one to the profile (llm: {gemini: {api_key_env: GEMINI_API_KEY}})", name, p.Name)
	}
	return nil
}

// geminiAPI is the Gemini API's name in core/agents.
const geminiAPI = "gemini"

// endAgentTunnel stops carrying the agent's tunnel, once the run no
// longer follows the agent: its supervisor keeps it, for attach, should
// the agent go on.
func (r *runner) endAgentTunnel(a *agentRun) {
	if a.tunnel != nil {
		r.lv.close(a.tunnel)
	}
}

// followAgent shows the agent's messages until it ends. When the sandbox
// is lost (the connection broke, the plugin died), the agent goes on
// there, and following resumes after the last line seen once the sandbox
// is back; after reconnectWindow without it, the run ends with the agent
// still running, recorded for attach. A cancelled ctx stops the agent and
// everything it started.
func (r *runner) followAgent(ctx context.Context, a *agentRun) error {
	d := r.st.Driver
	var failed error
	var lost time.Time // when the sandbox was lost, or zero
	b := backoff.Reconnect()
	for {
		var ferr error
		for m, err := range d.FollowAgentic(ctx, a.det) {
			if err != nil {
				ferr = err
				break
			}
			lost = time.Time{}
			b.Reset()
			r.message(&m)
			if m.Type == protocol.Result && m.IsError {
				// The worker's own account of a failed run: nothing to
				// deliver. Read on to the end for its usage.
				failed = fmt.Errorf("the agent failed: %s", firstLine(m.Content))
			}
		}
		switch {
		case ferr == nil:
			return errors.Join(failed, r.advance(runstore.Ended))
		case ctx.Err() != nil:
			return r.stopAgent(ctx, a, ctx.Err())
		case errors.Is(ferr, driver.ErrRunLost):
			return errors.Join(ferr, r.advance(runstore.Ended))
		case !errors.Is(ferr, driver.ErrDisconnected):
			// The worker wrote something that is not the protocol: it is
			// stopped, as a one-shot worker would be.
			return r.stopAgent(ctx, a, ferr)
		}
		if lost.IsZero() {
			lost = time.Now()
			r.host.Logger.Warn("lost the sandbox; the agent goes on there; reconnecting", "err", ferr)
		}
		if time.Since(lost) > reconnectWindow {
			return fmt.Errorf("%w; gave up after %s: the agent may still be running there; follow it with %s",
				ferr, reconnectWindow, attachCommand(r.req.Profile.Name, a.src.workflow))
		}
		if !b.Wait(ctx) {
			return r.stopAgent(ctx, a, ctx.Err())
		}
		if err := r.lv.repair(ctx); err != nil {
			r.host.Logger.Warn("could not get the sandbox back yet", "err", err)
		}
	}
}

// stopAgent stops the agent and everything it started, then shows what
// it wrote last (its interrupted result, its usage); why is the run's
// error. An agent that cannot be stopped stays recorded as running.
func (r *runner) stopAgent(ctx context.Context, a *agentRun, why error) error {
	d := r.st.Driver
	r.notice(fmt.Sprintf("amelia: stopping the agent: waiting for it and the commands it started to end (SIGTERM, then SIGKILL after %s); then whatever it changed is committed and kept in sandbox %s",
		driver.StopGrace, r.sandboxName()))
	if err := d.StopAgentic(ctx, a.det.Dir); err != nil && !errors.Is(err, driver.ErrRunLost) {
		return fmt.Errorf("%w; and the agent could not be stopped, it may still be running: %v", why, err)
	}
	if err := r.advance(runstore.Stopped); err != nil {
		r.host.Logger.Warn("could not record that the agent was stopped", "err", err)
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drainTimeout)
	defer cancel()
	for m, err := range d.FollowAgentic(dctx, a.det) {
		if err != nil {
			break
		}
		r.message(&m)
	}
	return why
}

// message shows one of the agent's messages, and copies it to the run's
// log on this host (Host.Logs).
func (r *runner) message(m *protocol.AgenticMessage) {
	r.view.Message(m)
	if r.host.Logs == nil || r.agent == nil || r.noLog {
		return
	}
	if r.msgLog == nil {
		w, err := r.host.Logs.Create(r.req.Profile.Name, r.agent.src.workflow)
		if err != nil {
			r.noLog = true
			r.host.Logger.Warn("the run's log is not kept on this host", "err", err)
			return
		}
		r.msgLog = w
	}
	if line, err := protocol.AppendJSON(nil, m); err == nil {
		r.msgLog.WriteLine(line)
	}
}

// attachCommand follows a running workflow.
func attachCommand(profile, workflow string) string {
	return "amelia attach --profile " + profile + " " + workflow
}

// notice tells a person watching the run live what it waits for, above
// the live line (runview.Live); a program reading its events needs none.
func (r *runner) notice(text string) {
	if l, ok := r.view.(runview.Live); ok {
		l.Notice(text)
	}
}
