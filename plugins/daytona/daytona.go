// Package daytona is the "daytona" sandbox provider: sandboxes are Daytona
// cloud sandboxes, managed through Daytona's REST API (package api) and
// reached through its SSH gateway, where every command runs as an SSH
// session exec over the SSH provider's transport, with a short-lived
// access token as the login.
//
// A profile's sandbox is the Daytona sandbox labelled amelia.sandbox=<name>
// (and named <name>): EnsureRunning finds it (by id or name, else by that
// label), starts it when stopped, or creates it, and waits until it is
// started. network none and
// allowlist create it with networkBlockAll, so the sandbox reaches nothing
// but Amelia's tunnel, which runs over the gateway (the gateway refuses
// port forwarding). The API key stays in this process: it is sent to the
// API only, never into the sandbox.
package daytona

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
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
	// StateDir is where the provider keeps what outlives a process: the
	// SSH gateway tokens the amelia processes of this host share (see
	// tokens.go). Default $XDG_STATE_HOME (or ~/.local/state) +
	// /amelia/daytona.
	StateDir string
}

// Provider is the Daytona provider.
type Provider struct {
	opts    Options
	tokens  *tokenCache
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
	if opts.StateDir == "" {
		opts.StateDir = defaultStateDir(opts.Getenv)
	}
	return &Provider{opts: opts, tokens: newTokenCache(opts.StateDir, opts.Logger), workers: &workers{dirs: opts.WorkerDirs}, accounts: map[string]*account{}}
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
			// A terminal amelia-worker opens in the sandbox (onWorkerTTY).
			TTY: true,
		},
	}, nil
}

// account is one API endpoint and key, and the sandboxes used through it.
type account struct {
	api      *api.Client
	hostKeys *sshtransport.HostKeys
	workers  *workers
	logger   *slog.Logger
	tokens   *tokenCache

	mu    sync.Mutex
	boxes map[string]*box // by sandbox name
	// seen are the sandboxes this process created, used or removed, by
	// id: List confirms them by GET (see List).
	seen map[string]seen
}

// seen is a sandbox this process knows of.
type seen struct {
	labels  map[string]string
	removed time.Time // when it was removed; zero while it lives
}

// forgetRemoved is how long a removed sandbox is remembered, and so kept
// out of List's answers: longer than Daytona's list lags.
const forgetRemoved = 10 * time.Minute

// saw notes a sandbox this process created or used.
func (a *account) saw(sb api.Sandbox) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen[sb.ID] = seen{labels: maps.Clone(sb.Labels)}
}

// removed notes a sandbox this process removed.
func (a *account) removed(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := a.seen[id]
	k.removed = time.Now()
	a.seen[id] = k
}

// known returns the sandboxes seen whose labels match, forgetting the
// ones removed long enough ago.
func (a *account) known(match func(map[string]string) bool) map[string]seen {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]seen{}
	for id, k := range a.seen {
		if !k.removed.IsZero() && time.Since(k.removed) > forgetRemoved {
			delete(a.seen, id)
			continue
		}
		if match(k.labels) {
			out[id] = k
		}
	}
	return out
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
	hostKeys, err := sshtransport.KnownHosts(known, sshtransport.HostKeyPolicy(set.HostKeyPolicy))
	if err != nil {
		return resolved{}, err
	}
	a := &account{api: client, hostKeys: hostKeys, workers: p.workers, logger: p.opts.Logger, tokens: p.tokens, boxes: map[string]*box{}, seen: map[string]seen{}}
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
			if derr := p.remove(dctx, r.acct, spec.Name, sb.ID, false); derr != nil {
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
	// Daytona stops the sandbox once idle (autoStopInterval, from
	// sandbox.idle_timeout); the watchdog keeps the record.
	details := map[string]string{"id": sb.ID, "state": string(sb.State), sdk.DetailStop: sdk.StopByProvider}
	if strings.HasPrefix(sb.Snapshot, setupSnapshotPrefix) {
		details["setup"] = sb.Snapshot
	}
	if sb.Target != "" {
		details["region"] = sb.Target
	}
	return sdk.Sandbox{
		Ref: ref, Created: created, Workdir: workspace(set.home), Details: details,
		// ready() put the worker in Dir under the name amelia's installer
		// gives it (its sha256), so the installer finds it there without
		// another upload.
		Worker: sdk.WorkerPlace{Dir: workerDir(set.home)},
	}, nil
}

// findOrCreate finds the sandbox labelled with spec's name, or creates it.
// Several processes may do so at once (runs started together): Daytona
// makes one sandbox of a name and answers the others' creates 409, and
// they look for it again until they find it, within the start timeout,
// since for a while Daytona may still not find it: its lookup by name
// keeps the miss of their first look in a cache until the new sandbox
// first changes (or 10 s), and its list lags.
func (p *Provider) findOrCreate(ctx context.Context, r resolved, spec sdk.Spec, block bool) (api.Sandbox, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	wait := 50 * time.Millisecond
	setup := "" // the setup's snapshot, once prepared
	for {
		if sb, err := r.acct.lookup(ctx, spec.Name, spec.ID); err == nil {
			return sb, false, nil
		} else if !errors.Is(err, sdk.ErrNotFound) {
			return api.Sandbox{}, false, err
		}
		req := r.set.createRequest(spec, block)
		if len(spec.Setup) > 0 {
			if setup == "" {
				name, df, err := p.setupSnapshot(ctx, r, spec)
				if err != nil {
					return api.Sandbox{}, false, err
				}
				if _, err := p.prepareSnapshot(ctx, r, spec, name, df); err != nil {
					return api.Sandbox{}, false, err
				}
				setup = name
			}
			// The snapshot fixes the resources: it was made with them.
			req.Snapshot, req.BuildInfo, req.CPU, req.Memory, req.Disk = setup, nil, 0, 0, 0
		}
		sb, err := r.acct.api.CreateSandbox(ctx, req)
		switch {
		case err == nil:
			r.acct.saw(sb)
			return sb, true, nil
		case api.StatusOf(err) != http.StatusConflict:
			return api.Sandbox{}, false, fmt.Errorf("create Daytona sandbox %s: %w", spec.Name, err)
		}
		// The name is taken: by the sandbox another amelia has just
		// created, or by one that is not Amelia's.
		sb, err = r.acct.api.GetSandbox(ctx, spec.Name)
		switch {
		case err == nil && sb.Labels[LabelSandbox] != spec.Name:
			return api.Sandbox{}, false, sdk.Errorf(sdk.ErrConflict, "a Daytona sandbox named %s (%s) exists and is not Amelia's (no %s=%s label): rename the profile, or remove that sandbox", spec.Name, sb.ID, LabelSandbox, spec.Name)
		case err == nil:
			r.acct.saw(sb)
			return sb, false, nil
		case !errors.Is(err, sdk.ErrNotFound):
			return api.Sandbox{}, false, fmt.Errorf("find Daytona sandbox %s: %w", spec.Name, err)
		}
		if err := pause(ctx, &wait, p.opts.PollInterval); err != nil {
			return api.Sandbox{}, false, fmt.Errorf("create Daytona sandbox %s: Daytona says the name is taken (409) but finds no sandbox of that name; remove the sandbox of that name in Daytona if it is stuck: %w", spec.Name, err)
		}
	}
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
	if req.AutoStopInterval == nil {
		req.AutoStopInterval = autoStopMinutes(spec.Lifetime.IdleTimeout)
	}
	if s.Image != "" {
		// The API has no image field: an image is a one-line Dockerfile.
		req.BuildInfo = &api.CreateBuildInfo{DockerfileContent: "FROM " + s.Image}
	}
	return req
}

// autoStopMinutes is Daytona's autoStopInterval for sandbox.idle_timeout
// idle: whole minutes, rounded up, at least 1; 0 (never) when idle is off
// (negative); nil, Daytona's default, when the host did not say. Auto-stop
// keeps the sandbox (it is stopped, not deleted: amelia never makes it
// ephemeral, autoDeleteInterval 0), and so does Daytona's auto-archive,
// left at its default.
func autoStopMinutes(idle time.Duration) *int {
	var m int
	switch {
	case idle == 0:
		return nil
	case idle < 0:
		m = 0
	default:
		m = max(1, int((idle+time.Minute-1)/time.Minute))
	}
	return &m
}

// waitStarted starts the sandbox when it is at rest and waits, within
// the settings' start timeout, until it is started, logging each state it
// passes through. Daytona's answers to start are not the new state (it
// answers after waiting up to 30 s, with the sandbox as it was then), so
// only GET's are read: a sandbox whose desiredState is not its state is
// changing, and is waited for.
func (p *Provider) waitStarted(ctx context.Context, r resolved, name string, sb api.Sandbox) (api.Sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	last := api.State("")
	wait := 50 * time.Millisecond
	for {
		if sb.State != last && (last != "" || sb.State != api.StateStarted) {
			// What the user waits for, as it happens: creating…
			// pulling_snapshot… started.
			sdk.Progress(p.opts.Logger, fmt.Sprintf("Daytona sandbox %s: %s", name, sb.State), "id", sb.ID)
		}
		last = sb.State
		switch st := sb.State; {
		case sb.Gone():
			return sb, sdk.Errorf(sdk.ErrNotFound, "Daytona sandbox %s (%s) is being deleted: try again once it is gone", name, sb.ID)
		case st == api.StateStarted && sb.Settled():
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
		case !sb.Settled():
			// On its way somewhere: wait until it gets there.
		case st.Stopped():
			_, err := r.acct.api.StartSandbox(ctx, sb.ID)
			switch {
			case st == api.StatePaused && api.StatusOf(err) == http.StatusUnprocessableEntity:
				// Daytona resumes only VMs (sandbox.service.ts start);
				// the class is not asked first, as an answer may not
				// carry it.
				if err := p.unpause(ctx, r.acct, name, sb); err != nil {
					return sb, err
				}
			case api.StatusOf(err) == http.StatusConflict:
				// Another client is changing its state: wait for that.
			case err != nil:
				return sb, fmt.Errorf("start Daytona sandbox %s (%s): %w", name, sb.ID, err)
			}
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
		sb = s
	}
}

// unpause stops a paused sandbox that Daytona cannot resume (only VM
// classes can be: its start answers 422 "Resuming is not supported for
// this sandbox" for others), which its stop allows; waitStarted then
// starts it once it is stopped. Its processes are lost, its files kept.
func (p *Provider) unpause(ctx context.Context, a *account, name string, sb api.Sandbox) error {
	p.opts.Logger.Info("Daytona sandbox is paused and cannot be resumed: stopping it to start it again", "sandbox", name, "id", sb.ID, "class", sb.SandboxClass)
	_, err := a.api.StopSandbox(ctx, sb.ID)
	if err == nil || api.StatusOf(err) == http.StatusConflict {
		return nil
	}
	return fmt.Errorf("daytona sandbox %s (%s) is paused, and Daytona resumes only VM sandboxes (this one is %q); stopping it to start it again failed: %w: remove it (amelia sandbox down) to recreate it", name, sb.ID, sb.SandboxClass, err)
}

// lookup finds the sandbox of an Amelia sandbox name: by id when known,
// else by its name (the sandbox's own), else by its label. GET comes
// first because Daytona's list is eventually consistent (a search index):
// a sandbox created a moment ago may be missing from it, and one deleted
// still there. What the list gives is confirmed by GET; of several (a
// race of two creations), the started one wins, else the first.
func (a *account) lookup(ctx context.Context, name, id string) (api.Sandbox, error) {
	for _, key := range []string{id, name} {
		if key == "" {
			continue
		}
		if sb, ok, err := a.fetch(ctx, key, name); ok || err != nil {
			return sb, err
		}
	}
	all, err := a.api.ListSandboxes(ctx, map[string]string{LabelSandbox: name})
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("find Daytona sandbox %s: %w", name, err)
	}
	all = slices.DeleteFunc(all, func(sb api.Sandbox) bool { return sb.Labels[LabelSandbox] != name || sb.Gone() })
	slices.SortStableFunc(all, func(x, y api.Sandbox) int {
		return cmp.Compare(stateRank(x.State), stateRank(y.State))
	})
	for _, listed := range all {
		if sb, ok, err := a.fetch(ctx, listed.ID, name); ok || err != nil {
			return sb, err
		}
	}
	return api.Sandbox{}, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist in Daytona (no sandbox labelled %s=%s): start it with `amelia sandbox up`", name, LabelSandbox, name)
}

// fetch GETs the sandbox key (an id or a name) and reports whether it is
// the live sandbox called name.
func (a *account) fetch(ctx context.Context, key, name string) (api.Sandbox, bool, error) {
	sb, err := a.api.GetSandbox(ctx, key)
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		return sb, false, nil
	case err != nil:
		return sb, false, fmt.Errorf("find Daytona sandbox %s: %w", name, err)
	case sb.Labels[LabelSandbox] != name || sb.Gone():
		return sb, false, nil
	}
	a.saw(sb)
	return sb, true, nil
}

// stateRank orders the sandboxes lookup may pick: started ones first.
func stateRank(s api.State) int {
	if s == api.StateStarted {
		return 0
	}
	return 1
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
	b, err := p.box(ctx, req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	switch {
	case req.User == "root":
		// Even when the sandbox's user is root: Info does not declare
		// ExecAsRoot.
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the daytona provider does not run commands as root on request; it runs them as the sandbox's user %s", b.user)
	case req.User != "" && req.User != b.user:
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
	if req.TTY {
		// Daytona's gateway gives a terminal to a login shell only, whose
		// exit status it does not report: the worker opens one instead.
		var stop func()
		cmd.Argv, eio, stop = onWorkerTTY(set.worker, req, eio)
		defer stop()
	}
	st, err := b.run(ctx, cmd, eio, req.Grace())
	if errors.Is(err, envelope.ErrNoDir) && dir == workdir {
		// The workspace went missing.
		if _, _, _, err = b.prepare(ctx); err == nil {
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
	case errors.Is(err, sdk.ErrNotFound) || err == nil && sb.Gone():
		b.acct.forget(b)
		return sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist in Daytona any more: start it with `amelia sandbox up`", b.name)
	case err == nil && sb.State != api.StateStarted:
		return sdk.Errorf(sdk.ErrConflict, "Daytona sandbox %s (%s) is %s, not started (auto-stop stops idle sandboxes): `amelia sandbox up` starts it", b.name, b.id, sb.State)
	}
	return fmt.Errorf("daytona sandbox %s (%s) through the SSH gateway: %w", b.name, b.id, cause)
}

func (p *Provider) Teardown(ctx context.Context, ref sdk.SandboxRef) error {
	r, err := p.account(ref.Config)
	if err != nil {
		return err
	}
	r.acct.mu.Lock()
	b := r.acct.boxes[ref.Name]
	delete(r.acct.boxes, ref.Name)
	r.acct.mu.Unlock()
	// Every sandbox of the name: the one in use, the ref's, the one that
	// has the name, and those the list has, which may lag (a sandbox
	// made a moment ago missing, one deleted still there: remove reads
	// each with GET).
	var ids []string
	add := func(id string) {
		if id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if b != nil {
		add(b.id)
	}
	add(ref.ID)
	named, err := r.acct.api.GetSandbox(ctx, ref.Name)
	switch {
	case err == nil && named.Labels[LabelSandbox] == ref.Name:
		add(named.ID)
	case err != nil && !errors.Is(err, sdk.ErrNotFound):
		return fmt.Errorf("find Daytona sandbox %s: %w", ref.Name, err)
	}
	all, err := r.acct.api.ListSandboxes(ctx, map[string]string{LabelSandbox: ref.Name})
	if err != nil {
		return fmt.Errorf("find Daytona sandbox %s: %w", ref.Name, err)
	}
	for _, sb := range all {
		if sb.Labels[LabelSandbox] == ref.Name {
			add(sb.ID)
		}
	}
	if b != nil {
		b.close(r.set.OnTeardown == TeardownStop)
	}
	for _, id := range ids {
		if err := p.remove(ctx, r.acct, ref.Name, id, r.set.OnTeardown == TeardownStop); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes (or stops) the sandbox id, when it is the Amelia
// sandbox name's, and waits, as long as ctx allows, until it is gone
// (stopped). Daytona refuses to delete or stop a sandbox while a state
// change is pending (409, sandbox.service.ts destroy and stop): remove
// waits for the change to end, then asks. A sandbox already being
// deleted is waited for.
func (p *Provider) remove(ctx context.Context, a *account, name, id string, stop bool) error {
	what := TeardownDelete
	if stop {
		what = TeardownStop
	}
	wait := 50 * time.Millisecond
	asked := false
	var seen *api.Sandbox // the sandbox as the last look found it
	for {
		sb, err := a.api.GetSandbox(ctx, id)
		switch {
		case errors.Is(err, sdk.ErrNotFound) || err == nil && sb.State == api.StateDestroyed:
			if asked && !stop {
				p.opts.Logger.Info("removed Daytona sandbox", "sandbox", name, "id", id)
			}
			a.removed(id)
			return nil
		case err != nil && ctx.Err() != nil && seen != nil:
			// Cut short while looking again: it was waiting for this.
			return fmt.Errorf("%s Daytona sandbox %s (%s): still %s (desired %s): %w", what, name, id, seen.State, seen.DesiredState, ctx.Err())
		case err != nil:
			return fmt.Errorf("%s Daytona sandbox %s (%s): %w", what, name, id, err)
		case sb.Labels[LabelSandbox] != name:
			return nil // not this name's: left alone
		case stop && sb.Gone():
			return nil // being deleted: nothing to stop
		case stop && sb.Settled() && (sb.State == api.StateStopped || sb.State == api.StateArchived):
			if asked {
				p.opts.Logger.Info("stopped Daytona sandbox", "sandbox", name, "id", id)
			}
			return nil
		case stop && sb.State.Failed():
			return sdk.Errorf(sdk.ErrUnavailable, "stop Daytona sandbox %s (%s): it is in state %s: %s", name, id, sb.State, sb.ErrorReason)
		case sb.DesiredState == api.DesiredDestroyed:
			// Being deleted: wait until it is gone.
		case !sb.Settled() && sb.State != api.StatePendingBuild:
			// A change under way (creating, starting, stopping...):
			// Daytona answers 409 until it ends.
		default:
			if stop {
				_, err = a.api.StopSandbox(ctx, id)
			} else {
				err = a.api.DeleteSandbox(ctx, id)
			}
			switch {
			case errors.Is(err, sdk.ErrNotFound):
				a.removed(id)
				return nil
			case api.StatusOf(err) == http.StatusConflict:
				// Changing after all: wait, then ask again.
			case err != nil:
				return fmt.Errorf("%s Daytona sandbox %s (%s): %w", what, name, id, err)
			default:
				asked = true
			}
		}
		seen = &sb
		if err := pause(ctx, &wait, p.opts.PollInterval); err != nil {
			return fmt.Errorf("%s Daytona sandbox %s (%s): still %s (desired %s): %w", what, name, id, sb.State, sb.DesiredState, err)
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

// List lists the sandboxes carrying req's labels. Daytona's list is
// eventually consistent (a search index): a sandbox this process just
// created may be missing from it, and one it just removed still there.
// So the sandboxes this process knows (created, used or removed) are read
// again by GET and merged in, or dropped; others are taken as the list
// says, less those being deleted.
func (p *Provider) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	r, err := p.account(req.Config)
	if err != nil {
		return nil, err
	}
	all, err := r.acct.api.ListSandboxes(ctx, req.Labels)
	if err != nil {
		return nil, fmt.Errorf("list Daytona sandboxes: %w", err)
	}
	for id := range r.acct.known(req.Matches) {
		sb, err := r.acct.api.GetSandbox(ctx, id)
		if err != nil && !errors.Is(err, sdk.ErrNotFound) {
			return nil, fmt.Errorf("list Daytona sandboxes: read %s: %w", id, err)
		}
		i := slices.IndexFunc(all, func(l api.Sandbox) bool { return l.ID == id })
		switch {
		case err != nil || !req.Matches(sb.Labels):
			if i >= 0 {
				all = slices.Delete(all, i, i+1)
			}
		case i >= 0:
			all[i] = sb
		default:
			all = append(all, sb)
		}
	}
	var found []sdk.Listed
	for _, sb := range all {
		name := sb.Labels[LabelSandbox]
		if !sdk.ValidName(name) || sb.Gone() {
			continue
		}
		state := sdk.HealthUnhealthy
		switch {
		case sb.State == api.StateStarted && sb.Settled():
			state = sdk.HealthReady
		case sb.State.Stopped() && sb.Settled():
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
