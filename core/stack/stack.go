// Package stack opens, in order, the layers every command on a sandbox
// works through, and owns them: the profile's provider plugin (which
// Repair replaces when it dies), its sandbox, the amelia-worker inside,
// the workspace, and a workflow's uid with the driver of its agent.
// `amelia run` and `attach` (core/run), `results`, `logs`, `sandbox ls`
// and `sandbox exec` each open one Stack and go as far up it as they
// need; what a step learns once (the worker's path, the workflow's uid)
// is a field of the Stack from then on, not a value passed along.
//
// A Stack is used by one command at a time, step after step; only Exec,
// SandboxRef, Sandbox and Repair may be called from other goroutines.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/execsession"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/workspace"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Host is what a Stack needs of the machine it runs on.
type Host struct {
	// Sandboxes starts a profile's provider: sandbox.Plugins for amelia.
	Sandboxes sandbox.Opener
	// Workers puts the right amelia-worker into sandboxes; nil finds
	// none, which InstallWorker then says.
	Workers *driver.Installer
	Logger  *slog.Logger
}

// Stack is one command's way into one sandbox.
type Stack struct {
	host    Host
	profile *config.Profile
	name    string // the sandbox's name when it is not the profile's own

	mu sync.Mutex
	sb *sandbox.Sandbox // the provider plugin; Repair replaces a dead one

	// Running is the sandbox as Up found it; nil until then.
	Running *sdk.Sandbox
	// Worker is the amelia-worker's path in the sandbox, once
	// InstallWorker put it there.
	Worker string
	// Workspace is the sandbox's workspace, once OpenWorkspace.
	Workspace *workspace.Workspace
	// UID is the workflow's own uid, where the provider separates runs
	// ("" for the sandbox's user), and Driver drives its agent as that
	// uid: both once As.
	UID    string
	Driver *driver.Driver

	commands sandboxexec.Execer // what the workspace and the driver run through
	sessions *execsession.Sessions

	// activity, once the watchdog runs, makes Exec's commands activity.
	activity atomic.Pointer[activityWrap]
}

// Open starts p's provider plugin for the sandbox named name, or for the
// profile's own sandbox when name is "". Nothing is started in the
// sandbox yet.
func Open(ctx context.Context, host Host, p *config.Profile, name string) (*Stack, error) {
	if host.Logger == nil {
		host.Logger = slog.New(slog.DiscardHandler)
	}
	if host.Workers == nil {
		host.Workers = &driver.Installer{Logger: host.Logger}
	}
	s := &Stack{host: host, profile: p, name: name}
	sb, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	s.sb = sb
	return s, nil
}

// OpenWorkflow is Open, taken up to a workflow's driver: the sandbox is
// started if it is not running, the worker put in, and the workspace and
// the driver run as workflow's uid. It is how the commands on a recorded
// run (results, logs, attach's stop) reach it.
func OpenWorkflow(ctx context.Context, host Host, p *config.Profile, name, workflow string) (*Stack, error) {
	s, err := Open(ctx, host, p, name)
	if err != nil {
		return nil, err
	}
	err = s.Up(ctx)
	if err == nil {
		err = s.InstallWorker(ctx)
	}
	if err == nil {
		err = s.OpenWorkspace(workspace.Options{})
	}
	if err == nil {
		err = s.As(ctx, workflow, nil)
	}
	if err != nil {
		s.Close(ctx)
		return nil, err
	}
	return s, nil
}

// open starts the provider plugin, for the stack's sandbox.
func (s *Stack) open(ctx context.Context) (*sandbox.Sandbox, error) {
	sb, err := s.host.Sandboxes.Open(ctx, s.profile, s.host.Logger)
	if err != nil || s.name == "" {
		return sb, err
	}
	return sb.Other(sdk.SandboxRef{Name: s.name, Config: sb.Ref.Config}), nil
}

// Sandbox is the provider plugin, for the stack's sandbox: after a
// Repair, the one that replaced a plugin that died.
func (s *Stack) Sandbox() *sandbox.Sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb
}

// Exec runs in the sandbox through the current plugin; once the
// sandbox's watchdog runs, as its activity (asActivity).
func (s *Stack) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	return s.Sandbox().Exec(ctx, s.asActivity(req), eio)
}

// SandboxRef is the sandbox the stack is in.
func (s *Stack) SandboxRef() sdk.SandboxRef { return s.Sandbox().Ref }

// Up starts the sandbox if it is not running, and keeps what it says of
// itself in Running.
func (s *Stack) Up(ctx context.Context) error {
	running, err := s.Sandbox().Up(ctx)
	if err != nil {
		return err
	}
	s.Running = &running
	return nil
}

// InstallWorker puts the amelia-worker for the sandbox's architecture in
// it, where Up said, unless it is there already; Worker says where. It
// starts the sandbox's lifetime watchdog too (see ensureWatchdog).
func (s *Stack) InstallWorker(ctx context.Context) error {
	if s.Running == nil {
		return errors.New("install the worker: the sandbox is not up yet (Up first)")
	}
	worker, err := s.host.Workers.EnsureWorker(ctx, s, s.Running.Worker)
	if err != nil {
		return err
	}
	s.Worker = worker
	// The sandbox holds its lifetime when the host is gone: a watchdog
	// that fails to start leaves the sandbox running, as before, and says so.
	if err := s.ensureWatchdog(ctx); err != nil {
		s.host.Logger.Warn("the sandbox will not stop by itself", "err", err)
	}
	return nil
}

// FindWorker sets Worker to this host's amelia-worker in the sandbox,
// where Up said, if it is there, installing nothing and starting no
// watchdog (what only looks, as amelia gc --dry-run, uses it); found is
// false when it is not there.
func (s *Stack) FindWorker(ctx context.Context) (found bool, err error) {
	if s.Running == nil {
		return false, errors.New("find the worker: the sandbox is not up yet (Up first)")
	}
	worker, err := s.host.Workers.FindWorker(ctx, s, s.Running.Worker)
	if err != nil || worker == "" {
		return false, err
	}
	s.Worker = worker
	return true, nil
}

// InstallTool puts the host executable bin (a CLI agent) into the
// sandbox beside the worker, unless a copy is there already, and
// returns its path there.
func (s *Stack) InstallTool(ctx context.Context, name, bin string) (string, error) {
	if s.Running == nil {
		return "", fmt.Errorf("install %s: the sandbox is not up yet (Up first)", name)
	}
	return s.host.Workers.EnsureTool(ctx, s, s.Running.Worker, name, bin)
}

// Repair starts the provider plugin again if it died, and its sandbox
// should it be down; it reports whether it did.
func (s *Stack) Repair(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.sb.ProviderExited() {
		return false, nil
	}
	s.host.Logger.Warn("the provider plugin is gone; starting it again", "provider", s.sb.Info.Name)
	sb, err := s.open(ctx)
	if err != nil {
		return false, err
	}
	if _, err := sb.Up(ctx); err != nil {
		sb.Close()
		return false, err
	}
	s.sb.Close()
	s.sb = sb
	return true, nil
}

// OpenWorkspace opens the sandbox's workspace (Running.Workdir), with the
// worker, the provider's run users and the profile's settings filled into
// opts. Where the provider separates runs by uid, a uid's commands go
// over one exec of the worker as that uid (execsession), ended by Close.
func (s *Stack) OpenWorkspace(opts workspace.Options) error {
	switch {
	case s.profile == nil:
		return errors.New("open the workspace: a stack over a plugin (Over) has none")
	case s.Worker == "" || s.Running == nil:
		return errors.New("open the workspace: no worker in the sandbox yet (Up and InstallWorker first)")
	}
	info := s.Sandbox().Info
	opts.Worker, opts.RunUsers, opts.ParkedCheckouts, opts.Logger = s.Worker, info.RunUsers, s.profile.Sandbox.Parked(), s.host.Logger
	s.commands = s
	if info.RunUsers && s.sessions == nil {
		s.sessions = execsession.New(s.commands, s.Worker, s.host.Logger)
		s.commands = s.sessions
	}
	ws, err := workspace.New(s.commands, s.Running.Workdir, opts)
	if err != nil {
		return fmt.Errorf("open the workspace: %w", err)
	}
	s.Workspace = ws
	return nil
}

// As makes the stack workflow's: UID is its uid where the provider
// separates runs (made if it has none yet), and Driver drives its agent
// as that uid, with env in the environment of what it starts.
func (s *Stack) As(ctx context.Context, workflow string, env map[string]string) error {
	if s.Workspace == nil {
		return errors.New("run as a workflow's uid: no workspace yet (OpenWorkspace first)")
	}
	uid, err := s.Workspace.RunUser(ctx, workflow)
	if err != nil {
		return err
	}
	s.UID = uid
	s.Driver = s.driver(s.commands, uid, s.Worker, env)
	return nil
}

// RecordedDriver is a driver for the agent that worker, already in the
// sandbox, started as uid (the sandbox's user for ""): a run's record
// names both. It installs nothing and starts nothing.
func (s *Stack) RecordedDriver(worker, uid string) *driver.Driver {
	return s.driver(s, uid, worker, nil)
}

// driver is a driver for the agents worker runs as uid, through ex.
func (s *Stack) driver(ex sandboxexec.Execer, uid, worker string, env map[string]string) *driver.Driver {
	return &driver.Driver{Exec: workspace.RunAs(ex, uid), Worker: worker, Provider: s.Sandbox().Info.Name, Env: env, Logger: s.host.Logger}
}

// Close ends the command sessions and stops the provider plugin; the
// sandbox goes on running.
func (s *Stack) Close(ctx context.Context) error {
	var err error
	if s.sessions != nil {
		err = s.sessions.Close(ctx)
		s.sessions = nil
	}
	s.Sandbox().Close()
	return err
}

// Over is a Stack over sb, a provider plugin the caller started and
// stops (sandbox ls visits every provider's sandboxes), for commands on
// sandboxes that are running: nothing is started, the caller names the
// worker (RecordedDriver). It has no profile, so no workspace.
func Over(sb *sandbox.Sandbox, logger *slog.Logger) *Stack {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Stack{host: Host{Logger: logger}, sb: sb}
}
