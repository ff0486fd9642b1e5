// Package daytona is the "daytona" sandbox provider: sandboxes are Daytona
// cloud sandboxes, managed through Daytona's REST API (package api) and
// reached through its SSH gateway, where every command runs as an SSH
// session exec over the SSH provider's transport, with a short-lived
// access token as the login.
//
// A profile's sandbox is the Daytona sandbox labelled amelia.sandbox=<name>
// (and named <name>): EnsureRunning finds it by that label, starts it when
// stopped, or creates it, and waits until it is started. network none and
// allowlist create it with networkBlockAll, so the sandbox reaches nothing
// but Amelia's tunnel, which runs over the gateway (the gateway refuses
// port forwarding). The API key stays in this process: it is sent to the
// API only, never into the sandbox.
package daytona

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/envelope"
	"github.com/amelia-sandbox/amelia/plugins/shexec"
	"github.com/amelia-sandbox/amelia/plugins/ssh/transport"
)

// Name is the provider's name.
const Name = "daytona"

// LabelSandbox is the label that ties a Daytona sandbox to an Amelia
// sandbox name.
const LabelSandbox = "amelia.sandbox"

// healthTimeout bounds HealthCheck's command, inside sdk.HealthCheckTimeout.
const healthTimeout = 5 * time.Second

// Options configure the provider.
type Options struct {
	Version string
	// Getenv reads the API key's variable; default os.Getenv.
	Getenv func(string) string
	Logger *slog.Logger
	// PollInterval is the longest wait between two looks at a sandbox that
	// is changing state; default 1 s (the first looks come sooner).
	PollInterval time.Duration
	// WorkerDirs hold amelia-worker-linux-ARCH, which every command in a
	// sandbox runs through (workerbin.Dirs).
	WorkerDirs []string
}

// Provider is the Daytona provider.
type Provider struct {
	opts Options

	workers *workers

	mu       sync.Mutex
	accounts map[string]*account
}

// New returns the Daytona provider; it calls the API on first use.
func New(opts Options) *Provider {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = time.Second
	}
	return &Provider{opts: opts, workers: &workers{dirs: opts.WorkerDirs}, accounts: map[string]*account{}}
}

func (p *Provider) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name:        Name,
		Version:     p.opts.Version,
		Description: "Daytona cloud sandboxes, through Daytona's API and SSH gateway",
		Capabilities: sdk.Capabilities{
			// networkBlockAll leaves the sandbox nothing but the tunnel.
			EgressModes:    []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkAllowlist, sdk.NetworkNone},
			Isolated:       true,
			ResourceLimits: true,
		},
	}, nil
}

// account is one API endpoint and key, and the sandboxes used through it.
type account struct {
	api      *api.Client
	hostKeys *transport.HostKeys
	workers  *workers
	logger   *slog.Logger

	mu    sync.Mutex
	boxes map[string]*box // by sandbox name
}

// resolved is a request's settings and account.
type resolved struct {
	set     Settings
	timeout time.Duration
	acct    *account
}

// account returns the account the settings name, made on first use.
func (p *Provider) account(raw json.RawMessage) (resolved, error) {
	set, timeout, err := decodeSettings(raw)
	if err != nil {
		return resolved{}, err
	}
	key, err := set.apiKey(p.opts.Getenv)
	if err != nil {
		return resolved{}, err
	}
	known, err := set.knownHostsFile()
	if err != nil {
		return resolved{}, err
	}
	id := strings.Join([]string{set.APIURL, set.OrganizationID, set.APIKeyEnv, key, known, set.HostKeyPolicy}, "\x00")
	p.mu.Lock()
	defer p.mu.Unlock()
	if a, ok := p.accounts[id]; ok {
		return resolved{set, timeout, a}, nil
	}
	client, err := api.New(api.Options{BaseURL: set.APIURL, APIKey: key, Organization: set.OrganizationID, Logger: p.opts.Logger})
	if err != nil {
		return resolved{}, err
	}
	hostKeys, err := transport.KnownHosts(known, transport.HostKeyPolicy(set.HostKeyPolicy))
	if err != nil {
		return resolved{}, err
	}
	a := &account{api: client, hostKeys: hostKeys, workers: p.workers, logger: p.opts.Logger, boxes: map[string]*box{}}
	p.accounts[id] = a
	return resolved{set, timeout, a}, nil
}

func (p *Provider) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	r, err := p.account(spec.Config)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	block := spec.Network.Mode != sdk.NetworkOpen
	sb, created, err := p.findOrCreate(ctx, r, spec, block)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	if !created && sb.NetworkBlockAll != block {
		return sdk.Sandbox{}, sdk.Errorf(sdk.ErrConflict, "Daytona sandbox %s (%s) was created with networkBlockAll=%t, and network %s needs %t: remove it (amelia sandbox down) to recreate it",
			spec.Name, sb.ID, sb.NetworkBlockAll, spec.Network.Mode, block)
	}
	sb, err = p.waitStarted(ctx, r, spec.Name, sb)
	if err != nil {
		if created && sb.State.Failed() {
			// Nothing of the user's is in it: leave nothing behind.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if derr := p.remove(dctx, r.acct, spec.Name, sb, false); derr != nil {
				p.opts.Logger.Warn("delete the sandbox that failed to start", "sandbox", spec.Name, "id", sb.ID, "error", derr)
			}
		}
		return sdk.Sandbox{}, err
	}
	b := r.acct.adopt(spec.Name, sb, r.set.SSHTokenMinutes)
	set, err := b.ready(ctx)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	if created {
		p.opts.Logger.Info("created Daytona sandbox", "sandbox", spec.Name, "id", sb.ID)
	}
	ref := spec.SandboxRef
	ref.ID = sb.ID
	details := map[string]string{"id": sb.ID, "state": string(sb.State)}
	if sb.Target != "" {
		details["region"] = sb.Target
	}
	return sdk.Sandbox{Ref: ref, Created: created, Workdir: workspace(set.home), Details: details}, nil
}

// findOrCreate finds the sandbox labelled with spec's name, or creates it.
func (p *Provider) findOrCreate(ctx context.Context, r resolved, spec sdk.Spec, block bool) (api.Sandbox, bool, error) {
	if sb, err := r.acct.lookup(ctx, spec.Name, spec.ID); err == nil {
		return sb, false, nil
	} else if !errors.Is(err, sdk.ErrNotFound) {
		return api.Sandbox{}, false, err
	}
	req := r.set.createRequest(spec, block)
	sb, err := r.acct.api.CreateSandbox(ctx, req)
	if api.StatusOf(err) == 409 {
		// Created meanwhile by another amelia, or a sandbox of that name
		// that is not ours.
		sb, err = r.acct.api.GetSandbox(ctx, spec.Name)
		if err == nil && sb.Labels[LabelSandbox] != spec.Name {
			return api.Sandbox{}, false, sdk.Errorf(sdk.ErrConflict, "a Daytona sandbox named %s (%s) exists and is not Amelia's (no %s=%s label): rename the profile, or remove that sandbox", spec.Name, sb.ID, LabelSandbox, spec.Name)
		}
		return sb, false, err
	}
	if err != nil {
		return api.Sandbox{}, false, fmt.Errorf("create Daytona sandbox %s: %w", spec.Name, err)
	}
	return sb, true, nil
}

// createRequest is the API request that creates spec's sandbox.
func (s Settings) createRequest(spec sdk.Spec, block bool) api.CreateSandbox {
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelSandbox] = spec.Name
	env := map[string]string{}
	for k, v := range s.Env {
		env[k] = v
	}
	env["AMELIA_SANDBOX"] = spec.Name
	req := api.CreateSandbox{
		Name:             spec.Name,
		Snapshot:         s.Snapshot,
		Env:              env,
		Labels:           labels,
		NetworkBlockAll:  block,
		Target:           s.Target,
		CPU:              s.CPU,
		Memory:           s.Memory,
		Disk:             s.Disk,
		AutoStopInterval: s.AutoStopInterval,
	}
	if s.Image != "" {
		// The API has no image field: an image is a one-line Dockerfile.
		req.BuildInfo = &api.CreateBuildInfo{DockerfileContent: "FROM " + s.Image}
	}
	return req
}

// waitStarted starts the sandbox when it is stopped and waits, within the
// settings' start timeout, until it is started, logging each state it
// passes through.
func (p *Provider) waitStarted(ctx context.Context, r resolved, name string, sb api.Sandbox) (api.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	last := api.State("")
	started := false
	wait := 50 * time.Millisecond
	for {
		if sb.State != last && (last != "" || sb.State != api.StateStarted) {
			// What the user waits for, as it happens: creating…
			// pulling_snapshot… started.
			sdk.Progress(p.opts.Logger, fmt.Sprintf("Daytona sandbox %s: %s", name, sb.State), "id", sb.ID)
		}
		last = sb.State
		switch st := sb.State; {
		case st == api.StateStarted:
			return sb, nil
		case st.Failed():
			reason := sb.ErrorReason
			if reason == "" {
				reason = "Daytona gave no reason"
			}
			kind := sdk.ErrUnavailable
			what := "failed"
			if st == api.StateBuildFailed {
				kind, what = sdk.ErrInvalid, "could not be built"
			}
			return sb, sdk.Errorf(kind, "Daytona sandbox %s (%s) %s (state %s): %s", name, sb.ID, what, st, reason)
		case st.Gone():
			return sb, sdk.Errorf(sdk.ErrNotFound, "Daytona sandbox %s (%s) is being deleted: try again once it is gone", name, sb.ID)
		case st.Stopped() && !started:
			s, err := r.acct.api.StartSandbox(ctx, sb.ID)
			if err != nil {
				return sb, fmt.Errorf("start Daytona sandbox %s (%s): %w", name, sb.ID, err)
			}
			started = true
			sb = s
			continue
		}
		if err := pause(ctx, &wait, p.opts.PollInterval); errors.Is(err, context.DeadlineExceeded) {
			return sb, sdk.Errorf(sdk.ErrTimeout, "Daytona sandbox %s (%s) is still %s after %v: it may yet start (the next run reuses it); raise daytona.start_timeout for slow builds", name, sb.ID, sb.State, r.timeout)
		} else if err != nil {
			return sb, err
		}
		s, err := r.acct.api.GetSandbox(ctx, sb.ID)
		if err != nil {
			if errors.Is(err, sdk.ErrNotFound) {
				return sb, sdk.Errorf(sdk.ErrNotFound, "Daytona sandbox %s (%s) was deleted while it started", name, sb.ID)
			}
			return sb, fmt.Errorf("wait for Daytona sandbox %s (%s) to start: %w", name, sb.ID, err)
		}
		if s.State.Stopped() && last == api.StateStopping {
			started = false // stopped after all: start it now
		}
		sb = s
	}
}

// lookup finds the sandbox of an Amelia sandbox name: by id when known,
// else by its label. Several (a race of two creations) give the started
// one, else the first.
func (a *account) lookup(ctx context.Context, name, id string) (api.Sandbox, error) {
	if id != "" {
		sb, err := a.api.GetSandbox(ctx, id)
		if err == nil && sb.Labels[LabelSandbox] == name && !sb.State.Gone() {
			return sb, nil
		}
		if err != nil && !errors.Is(err, sdk.ErrNotFound) {
			return sb, fmt.Errorf("find Daytona sandbox %s: %w", name, err)
		}
	}
	all, err := a.api.ListSandboxes(ctx, map[string]string{LabelSandbox: name})
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("find Daytona sandbox %s: %w", name, err)
	}
	var pick *api.Sandbox
	for i, sb := range all {
		if sb.Labels[LabelSandbox] != name || sb.State.Gone() {
			continue
		}
		if pick == nil || sb.State == api.StateStarted && pick.State != api.StateStarted {
			pick = &all[i]
		}
	}
	if pick == nil {
		return api.Sandbox{}, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist in Daytona (no sandbox labelled %s=%s): start it with `amelia sandbox up`", name, LabelSandbox, name)
	}
	return *pick, nil
}

// box returns the sandbox a ref names, as last seen.
func (p *Provider) box(ctx context.Context, ref sdk.SandboxRef) (*box, error) {
	r, err := p.account(ref.Config)
	if err != nil {
		return nil, err
	}
	r.acct.mu.Lock()
	b := r.acct.boxes[ref.Name]
	r.acct.mu.Unlock()
	if b != nil {
		return b, nil
	}
	sb, err := r.acct.lookup(ctx, ref.Name, ref.ID)
	if err != nil {
		return nil, err
	}
	return r.acct.adopt(ref.Name, sb, r.set.SSHTokenMinutes), nil
}

func (p *Provider) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.TTY {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the daytona provider does not allocate terminals")
	}
	b, err := p.box(ctx, req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	if req.User != "" && req.User != b.user {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the daytona provider runs commands as the sandbox's user %s; it cannot run them as %q", b.user, req.User)
	}
	set, err := b.ready(ctx)
	if err != nil {
		return sdk.ExitStatus{}, b.failed(ctx, err)
	}
	workdir := workspace(set.home)
	dir := req.Dir
	switch {
	case dir == "":
		dir = workdir
	case !path.IsAbs(dir):
		dir = path.Join(workdir, dir)
	}
	env := map[string]string{"HOME": set.home, "AMELIA_SANDBOX": b.name}
	for k, v := range req.Env {
		env[k] = v
	}
	cmd := envelope.Command{Argv: req.Argv, Env: env, Dir: dir, Tag: shexec.NewTag()}
	st, err := b.run(ctx, cmd, eio, req.Grace())
	if errors.Is(err, envelope.ErrNoDir) && dir == workdir {
		// The workspace went missing.
		if _, _, err = b.prepare(ctx); err == nil {
			st, err = b.run(ctx, cmd, eio, req.Grace())
		}
	}
	if errors.Is(err, envelope.ErrNoDir) {
		return st, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", dir)
	}
	if err != nil {
		return st, b.failed(ctx, err)
	}
	return st, nil
}

// failed turns a failed exec into what the sandbox's state says: gone,
// stopped (auto-stop), or the gateway's own failure.
func (b *box) failed(ctx context.Context, cause error) error {
	switch {
	case errors.Is(cause, sdk.ErrNotFound):
		b.acct.forget(b)
		return sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist in Daytona any more: start it with `amelia sandbox up`", b.name)
	case !errors.Is(cause, sdk.ErrUnavailable) || ctx.Err() != nil:
		return cause
	}
	sb, err := b.acct.api.GetSandbox(ctx, b.id)
	switch {
	case errors.Is(err, sdk.ErrNotFound) || err == nil && sb.State == api.StateDestroyed:
		b.acct.forget(b)
		return sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist in Daytona any more: start it with `amelia sandbox up`", b.name)
	case err == nil && sb.State != api.StateStarted:
		return sdk.Errorf(sdk.ErrConflict, "Daytona sandbox %s (%s) is %s, not started (auto-stop stops idle sandboxes): `amelia sandbox up` starts it", b.name, b.id, sb.State)
	}
	return fmt.Errorf("Daytona sandbox %s (%s) through the SSH gateway: %w", b.name, b.id, cause)
}

func (p *Provider) Teardown(ctx context.Context, ref sdk.SandboxRef) error {
	r, err := p.account(ref.Config)
	if err != nil {
		return err
	}
	all, err := r.acct.api.ListSandboxes(ctx, map[string]string{LabelSandbox: ref.Name})
	if err != nil {
		return fmt.Errorf("find Daytona sandbox %s: %w", ref.Name, err)
	}
	r.acct.mu.Lock()
	b := r.acct.boxes[ref.Name]
	delete(r.acct.boxes, ref.Name)
	r.acct.mu.Unlock()
	if b != nil {
		b.close(r.set.OnTeardown == TeardownStop)
	}
	for _, sb := range all {
		if sb.Labels[LabelSandbox] != ref.Name {
			continue
		}
		if err := p.remove(ctx, r.acct, ref.Name, sb, r.set.OnTeardown == TeardownStop); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes (or stops) one sandbox and waits until it is gone
// (stopped).
func (p *Provider) remove(ctx context.Context, a *account, name string, sb api.Sandbox, stop bool) error {
	what := TeardownDelete
	if stop {
		what = TeardownStop
	}
	var err error
	switch {
	case stop && sb.State.Stopped():
		return nil
	case stop:
		_, err = a.api.StopSandbox(ctx, sb.ID)
	default:
		err = a.api.DeleteSandbox(ctx, sb.ID)
	}
	if errors.Is(err, sdk.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s Daytona sandbox %s (%s): %w", what, name, sb.ID, err)
	}
	wait := 50 * time.Millisecond
	for {
		s, err := a.api.GetSandbox(ctx, sb.ID)
		switch {
		case errors.Is(err, sdk.ErrNotFound) || err == nil && s.State == api.StateDestroyed:
			p.opts.Logger.Info("removed Daytona sandbox", "sandbox", name, "id", sb.ID)
			return nil
		case err == nil && stop && s.State.Stopped():
			p.opts.Logger.Info("stopped Daytona sandbox", "sandbox", name, "id", sb.ID)
			return nil
		case err == nil && s.State.Failed() && !sb.State.Failed():
			return sdk.Errorf(sdk.ErrUnavailable, "%s Daytona sandbox %s (%s): it ended in state %s: %s", what, name, sb.ID, s.State, s.ErrorReason)
		case err != nil:
			return fmt.Errorf("wait for Daytona sandbox %s (%s) to go: %w", name, sb.ID, err)
		}
		if err := pause(ctx, &wait, p.opts.PollInterval); err != nil {
			return fmt.Errorf("wait for Daytona sandbox %s (%s) to go (still %s): %w", name, sb.ID, s.State, err)
		}
	}
}

// pause waits *wait, or until ctx ends, then doubles *wait up to most: the
// pace of polling a sandbox that is changing state.
func pause(ctx context.Context, wait *time.Duration, most time.Duration) error {
	t := time.NewTimer(*wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	*wait = min(*wait*2, most)
	return nil
}

func (p *Provider) HealthCheck(ctx context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	r, err := p.account(ref.Config)
	if err != nil {
		return sdk.Health{}, err
	}
	sb, err := r.acct.lookup(ctx, ref.Name, ref.ID)
	if err != nil {
		return sdk.Health{}, err
	}
	switch {
	case sb.State.Stopped():
		return sdk.Health{State: sdk.HealthStopped, Message: "Daytona sandbox " + sb.ID + " is " + string(sb.State)}, nil
	case sb.State.Failed():
		return sdk.Health{State: sdk.HealthUnhealthy, Message: fmt.Sprintf("Daytona sandbox %s is in state %s: %s", sb.ID, sb.State, sb.ErrorReason)}, nil
	case sb.State != api.StateStarted:
		return sdk.Health{State: sdk.HealthUnhealthy, Message: "Daytona sandbox " + sb.ID + " is " + string(sb.State)}, nil
	}
	b := r.acct.adopt(ref.Name, sb, r.set.SSHTokenMinutes)
	// A bare shell, not the envelope: the check must not wait for the
	// worker's upload.
	conn, err := b.connection(ctx)
	code := 0
	if err == nil {
		_, code, err = conn.Bootstrap(ctx, "true", nil)
	}
	if err != nil || code != 0 {
		return sdk.Health{State: sdk.HealthUnhealthy, Message: fmt.Sprintf("Daytona sandbox %s is started, but a command through the SSH gateway failed: %v (exit %d)", sb.ID, err, code)}, nil
	}
	return sdk.Health{State: sdk.HealthReady, Message: "Daytona sandbox " + sb.ID}, nil
}

func (p *Provider) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	r, err := p.account(req.Config)
	if err != nil {
		return nil, err
	}
	all, err := r.acct.api.ListSandboxes(ctx, req.Labels)
	if err != nil {
		return nil, fmt.Errorf("list Daytona sandboxes: %w", err)
	}
	var found []sdk.Listed
	for _, sb := range all {
		name := sb.Labels[LabelSandbox]
		if !sdk.ValidName(name) || sb.State.Gone() {
			continue
		}
		state := sdk.HealthUnhealthy
		switch {
		case sb.State == api.StateStarted:
			state = sdk.HealthReady
		case sb.State.Stopped():
			state = sdk.HealthStopped
		}
		created, _ := time.Parse(time.RFC3339, sb.CreatedAt)
		found = append(found, sdk.Listed{
			Ref:     sdk.SandboxRef{Name: name, ID: sb.ID, Config: req.Config},
			Labels:  sb.Labels,
			State:   state,
			Created: created,
		})
	}
	return found, nil
}

// Close closes every gateway connection and stops renewing tokens; the SDK
// calls it when the plugin stops. Tokens are left to expire.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.accounts {
		a.mu.Lock()
		for name, b := range a.boxes {
			b.shut()
			delete(a.boxes, name)
		}
		a.mu.Unlock()
	}
	return nil
}

// gatewayAddr reads host:port from an access's sshCommand
// ("ssh -p 2222 TOKEN@ssh.app.daytona.io").
func gatewayAddr(cmd string) (string, error) {
	f := strings.Fields(cmd)
	port, host := "22", ""
	for i := 0; i < len(f); i++ {
		switch {
		case f[i] == "-p" && i+1 < len(f):
			port = f[i+1]
			i++
		case strings.Contains(f[i], "@"):
			host = f[i][strings.LastIndex(f[i], "@")+1:]
		}
	}
	if host == "" {
		return "", fmt.Errorf("daytona: no host in the SSH access's command (%d words)", len(f))
	}
	return net.JoinHostPort(host, port), nil
}
