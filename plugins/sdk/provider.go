package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// APIVersion is the version of the provider contract (amelia.provider.v1)
// that this SDK speaks. It is also the go-plugin protocol version.
const APIVersion = 1

// Provider is what a sandbox provider implements. Every method must honour
// its context. Errors should wrap the sentinel errors of this package
// (ErrNotFound, ErrInvalid...) so the host can tell the cases apart.
//
// A provider fails closed: what it cannot do as asked it refuses, and never
// does something else instead.
//   - EnsureRunning with a network mode not in Capabilities.EgressModes, or
//     one the settings do not let it enforce, is refused with ErrUnsupported
//     and starts nothing.
//   - Settings it cannot read, a key it does not know among them, are
//     refused with ErrInvalid naming the key (DecodeSettings does this);
//     the optional SettingsValidator reports the same before anything
//     starts.
//   - Exec with TTY when Capabilities.TTY is false, or with User "root" when
//     Capabilities.ExecAsRoot is false, is refused with ErrUnsupported.
//   - Exec with a User it cannot run as is refused with an error
//     (ErrUnsupported, or ErrInvalid for a name that is not one; a
//     transport that learns it only from the exit status reports 126, as a
//     shell does for a command it cannot run); it never runs the command
//     as someone else.
//
// The conformance kit in sdk/sdktest checks each of these rules.
type Provider interface {
	// Info describes the provider. APIVersions is filled in by the SDK.
	Info(ctx context.Context) (Info, error)
	// EnsureRunning starts the sandbox spec names, or reuses it when it is
	// already running. Calling it again with the same spec is harmless,
	// also from several processes at once (runs of a profile started
	// together): all of them get the one sandbox, which exactly one of
	// them reports Created; one that finds another's change under way
	// waits for it (within ctx) rather than failing.
	EnsureRunning(ctx context.Context, spec Spec) (Sandbox, error)
	// Exec runs one process in a running sandbox and streams its I/O. It
	// returns once the process has exited and all its output has been
	// written to eio. A non-zero exit is reported in ExitStatus, not as an
	// error. When ctx is done, the whole process tree in the sandbox gets
	// SIGTERM, then SIGKILL after req.CancelGrace. A sandbox that does not
	// exist gives ErrNotFound.
	Exec(ctx context.Context, req ExecRequest, eio ExecIO) (ExitStatus, error)
	// Teardown removes the sandbox and everything running in it. Tearing
	// down a sandbox that does not exist is not an error.
	Teardown(ctx context.Context, ref SandboxRef) error
	// HealthCheck reports on a sandbox within HealthCheckTimeout; a sandbox
	// that does not exist gives ErrNotFound.
	HealthCheck(ctx context.Context, ref SandboxRef) (Health, error)
}

// Lister is an optional interface of a Provider: one that can enumerate the
// sandboxes it holds implements it, so the host can find sandboxes left
// behind by a crash or by a profile that is gone (orphans) and remove them.
// A provider without it is asked nothing; through a plugin, the host's call
// then fails with ErrUnsupported.
type Lister interface {
	// List returns the sandboxes, within the place req.Config says (a local
	// root, a Docker engine, an SSH host, a cloud organisation), that carry
	// every label of req.Labels. Sandboxes it cannot attribute (no labels)
	// are listed only when req.Labels is empty. It runs nothing inside the
	// sandboxes.
	List(ctx context.Context, req ListRequest) ([]Listed, error)
}

// SettingsValidator is an optional interface of a Provider: one that
// implements it lets `amelia config validate` (and doctor, and a run's
// check) refuse a profile's settings before anything starts, with every
// problem at its key, instead of EnsureRunning refusing them later. Every
// provider should: Amelia's built-in ones and examples/provider-hello do,
// and with DecodeSettings reading the block it is a few lines. It is
// optional so that a plugin built before it existed still works: the host
// is told ErrUnsupported (UNIMPLEMENTED on the wire) and says that the
// provider cannot check its settings, which are then checked only when
// its sandbox starts.
//
// ValidateSettings must agree with EnsureRunning: settings it finds no
// problem with, EnsureRunning does not refuse as invalid, and settings it
// has problems with, EnsureRunning refuses (the conformance kit's Settings
// group checks both).
type SettingsValidator interface {
	// ValidateSettings checks a profile's settings block, and the network
	// policy against what those settings let the provider enforce (a mode
	// Capabilities.EgressModes lacks is the host's to report), without
	// starting anything or reaching a backend. Problems are the answer:
	// every one found, each at its key inside the block; none means the
	// settings are good. An error means the check itself failed.
	ValidateSettings(ctx context.Context, req ValidateRequest) ([]Problem, error)
}

// Preflighter is an optional interface of a Provider that can tell,
// without creating or changing anything, why EnsureRunning(spec) would fail
// now: a backend that does not answer, an image the sandbox would be made
// from that is not there, a sandbox of that name that is not this spec's.
// `amelia doctor` asks it, so that what it calls fine is. A nil answer is
// no promise, only the absence of a known obstacle; the error wraps the
// sentinel EnsureRunning would (ErrUnavailable, ErrNotFound, ErrConflict).
type Preflighter interface {
	Preflight(ctx context.Context, spec Spec) error
}

// Preparer is an optional interface of a Provider that can keep the
// result of a sandbox's setup commands (Spec.Setup, a profile's
// sandbox.setup) where its sandboxes are made from: a committed image, a
// snapshot. The commands then run once per base and setup, not once per
// sandbox, and a sandbox EnsureRunning creates with Spec.Setup starts set
// up (EnsureRunning prepares first when the result is not there). A
// provider without it is asked nothing; the host runs the commands in
// each new sandbox itself, once, and marks it done there.
type Preparer interface {
	// Prepare runs spec.Setup's commands once on the base that spec's
	// sandboxes are made from, as the sandbox's default user in its home
	// directory, and keeps the result under a name derived from
	// everything that changes it (the base's identity, the commands, the
	// user and environment), so that a change of any makes a new one.
	// A result that is there already is reused (Prepared.UpToDate);
	// several calls at once for the same result prepare it once, the
	// others waiting for it within ctx. A command that fails is an error
	// naming it and its exit status (a *SetupError), and nothing of that
	// setup is kept: no image, no snapshot, no container left behind.
	// Progress goes to the logger as Progress records, one per command.
	Prepare(ctx context.Context, spec Spec) (Prepared, error)
}

// SetupPruner is an optional interface of a Preparer that can remove the
// setups it kept (Prepare's images, snapshots) that a profile no longer
// starts from: `amelia gc` asks it. Its scope is explicit: it removes
// only what Prepare made for req.Spec's profile of req.Spec's config file
// (it marks what it makes with both: a docker image's labels, a Daytona
// snapshot's Dockerfile), never a setup that is current for req.Spec or
// one of req.Others, one made less than OlderThan ago, nor one a sandbox
// (running or stopped) was made from: those past OlderThan it reports,
// with why they stay.
type SetupPruner interface {
	PruneSetups(ctx context.Context, req PruneRequest) ([]PrunedSetup, error)
}

// PruneRequest is what SetupPruner.PruneSetups tidies.
type PruneRequest struct {
	// Spec is the profile's sandbox whose old setups go; its Labels
	// (the profile, the config file) say whose they are.
	Spec Spec
	// Others are the sandboxes of the config's other profiles on this
	// provider: their current setups stay too.
	Others []Spec
	// OlderThan: only a setup made longer ago goes.
	OlderThan time.Duration
	// DryRun: say what would go, and remove nothing.
	DryRun bool
}

// PrunedSetup is a kept setup past OlderThan that is not current.
type PrunedSetup struct {
	// Ref is what sandboxes were created from: an image, a snapshot name.
	Ref string
	// Age is how long ago it was made.
	Age time.Duration
	// Left says why it stays; "" when it was removed (with DryRun: would
	// be).
	Left string
}

// Prepared is what Prepare kept.
type Prepared struct {
	// UpToDate is true when it was there already and nothing ran.
	UpToDate bool
	// Ref is what sandboxes are created from: an image, a snapshot name.
	Ref string
	// Details are human-readable facts (the base it was made from).
	Details map[string]string
}

// SetupCommand is one of a sandbox's setup commands.
type SetupCommand struct {
	// Name is its name in the profile's map of commands, for messages;
	// "" for the only one.
	Name string
	// Argv is the command; a profile's string is ["sh", "-c", string].
	Argv []string
}

// String is the command as messages name it: its name, else its argv.
func (c SetupCommand) String() string {
	if c.Name != "" {
		return c.Name
	}
	if len(c.Argv) == 3 && c.Argv[0] == "sh" && c.Argv[1] == "-c" {
		return clipCommand(c.Argv[2])
	}
	return clipCommand(strings.Join(c.Argv, " "))
}

func clipCommand(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// SetupError is a setup command that failed: which, and how it ended.
type SetupError struct {
	// Index is the command's place in Spec.Setup, from 0.
	Index   int
	Command SetupCommand
	Status  ExitStatus
	// Tail is the end of its output, for the message.
	Tail string
}

func (e *SetupError) Error() string {
	how := fmt.Sprintf("exited %d", e.Status.Code)
	if e.Status.Signal != "" {
		how = "was killed by SIG" + e.Status.Signal
	}
	msg := fmt.Sprintf("setup command %d (%s) %s; nothing of the setup was kept", e.Index+1, e.Command, how)
	if t := strings.TrimSpace(e.Tail); t != "" {
		lines := strings.Split(t, "\n")
		msg += ": " + strings.TrimSpace(lines[len(lines)-1])
	}
	return msg
}

// ValidateRequest is what ValidateSettings checks.
type ValidateRequest struct {
	// Config is a profile's settings block for this provider, as in
	// SandboxRef.Config.
	Config json.RawMessage
	// Network is the policy the profile's sandbox would be started with.
	Network NetworkPolicy
}

// Archiver is an optional interface of a Provider that can move a tar
// stream into and out of a sandbox's file system itself, without running
// a process in the sandbox (Docker's archive endpoints, which docker cp
// uses). The host moves big files with it (core/sandboxfs): the worker in
// the sandbox still decides where they go, checks them and puts them in
// place, so the provider only ever writes into, and reads from, a private
// staging directory the worker made. A provider without it is asked
// nothing; through a plugin, the host's call fails with ErrUnsupported and
// the host streams the bytes over Exec instead.
type Archiver interface {
	// PutArchive unpacks the tar stream r into the directory dir (an
	// absolute path in the sandbox, which exists), keeping each entry's
	// mode, time and numeric owner as its header says, never following a
	// symbolic link out of the sandbox, and never replacing a directory
	// with a file. It returns once all of r is written.
	PutArchive(ctx context.Context, ref SandboxRef, dir string, r io.Reader) error
	// GetArchive writes to w a tar stream of path (absolute in the
	// sandbox): a file as one entry named for its last element, a
	// directory with all in it. A path that does not exist gives
	// ErrNotFound.
	GetArchive(ctx context.Context, ref SandboxRef, path string, w io.Writer) error
}

// Forwarder is an optional interface of a Provider whose transport can
// carry connections from the sandbox back to the host by itself (SSH's
// remote port forwarding). The host reaches its proxy through it; without
// one, or when Forward answers ErrUnsupported, the host tunnels over Exec.
type Forwarder interface {
	// Forward listens on the sandbox's loopback and connects each
	// connection made there to req.Target, a loopback address on the host,
	// until ctx ends (then it stops listening and returns nil). It calls
	// listening once, with the address it listens on in the sandbox,
	// before any connection. An error means the forward could not start,
	// or failed; ErrUnsupported means it may not be used here (the host
	// falls back to the exec tunnel).
	Forward(ctx context.Context, req ForwardRequest, listening func(addr string)) error
}

// ForwardRequest is a forward to start.
type ForwardRequest struct {
	Sandbox SandboxRef
	// Target is host:port on the host's loopback.
	Target string
}

// ListRequest is what List looks for.
type ListRequest struct {
	// Config is a profile's settings block for this provider, as in
	// SandboxRef.Config.
	Config json.RawMessage
	// Labels must all be carried by a listed sandbox.
	Labels map[string]string
}

// Matches reports whether labels carry every label of r.Labels, as a
// listed sandbox must.
func (r ListRequest) Matches(labels map[string]string) bool {
	for k, v := range r.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Listed is one sandbox found by List.
type Listed struct {
	// Ref reaches the sandbox: with it, the host can Exec in it, check it
	// and tear it down.
	Ref SandboxRef
	// Labels are the labels it was created with (Spec.Labels).
	Labels map[string]string
	// State is as far as the provider can tell without running anything.
	State HealthState
	// Created is when the sandbox was created; zero when unknown.
	Created time.Time
}

// Info describes a provider.
type Info struct {
	Name        string
	Version     string
	APIVersions []int
	Description string
	Capabilities
}

// Capabilities are what a provider can enforce or do. The host checks a
// profile against them before it starts anything (fail closed).
type Capabilities struct {
	// EgressModes lists the network modes the provider can enforce.
	EgressModes []NetworkMode
	// Isolated is false when commands run unisolated on the host.
	Isolated bool
	// ExecAsRoot reports whether ExecRequest.User may be "root" (uid 0);
	// without it, such an exec is refused with ErrUnsupported.
	ExecAsRoot bool
	// ResourceLimits reports whether the cpu/memory/pids limits its
	// settings name are enforced.
	ResourceLimits bool
	// TTY reports whether ExecRequest.TTY is supported; without it, such an
	// exec is refused with ErrUnsupported.
	TTY bool
	// RunUsers reports whether ExecRequest.User may be any numeric uid
	// ("UID" or "UID:GID"), also one no user of the sandbox has, and each
	// such uid runs with no privilege over another's processes and files.
	// The host then separates the runs sharing a sandbox by giving each a
	// uid of its own.
	RunUsers bool
	// Archive reports that the provider implements Archiver; through a
	// plugin, the SDK sets it for a provider that does.
	Archive bool
}

// Supports reports whether the provider can enforce network mode m.
func (c Capabilities) Supports(m NetworkMode) bool {
	for _, e := range c.EgressModes {
		if e == m {
			return true
		}
	}
	return false
}

// NetworkMode is a sandbox's egress policy.
type NetworkMode string

// The network modes of a profile's sandbox.network.
const (
	// NetworkOpen leaves the sandbox's own network as the provider has it.
	NetworkOpen NetworkMode = "open"
	// NetworkAllowlist removes the sandbox's own route out; only the host's
	// tunnel remains, whose egress proxy allows the listed hosts.
	NetworkAllowlist NetworkMode = "allowlist"
	// NetworkNone removes the sandbox's own route out; only the tunnel to
	// the host's LLM and git proxy remains.
	NetworkNone NetworkMode = "none"
)

// NetworkPolicy is the egress policy a sandbox must be started with.
type NetworkPolicy struct {
	Mode         NetworkMode
	AllowedHosts []string
}

// SandboxRef names a sandbox. Name is stable (derived from the profile, its
// config file and the host) so a new host process can find a sandbox it did
// not create; Config carries the profile's provider settings (a JSON
// object) needed to reach it, which DecodeSettings reads.
type SandboxRef struct {
	Name string
	// ID is the provider's own id for the sandbox, when known.
	ID string
	// Config is the profile's settings block for this provider, as-is.
	Config json.RawMessage
}

// Spec is what EnsureRunning starts.
type Spec struct {
	SandboxRef
	Network NetworkPolicy
	// Labels to attach to the sandbox where the provider can (never secrets).
	Labels map[string]string
	// Setup are the commands that set the sandbox up (sandbox.setup). A
	// Preparer creates the sandbox from their kept result; another
	// provider ignores them (the host runs them).
	Setup []SetupCommand
	// Lifetime is the profile's sandbox.idle_timeout and
	// sandbox.max_lifetime, for a provider that bounds its sandboxes'
	// life itself (Daytona's auto-stop).
	Lifetime Lifetime
}

// Lifetime bounds a sandbox's life. For each: 0 is not said (an older
// host: the provider's own default), a negative duration is off.
type Lifetime struct {
	IdleTimeout, MaxLifetime time.Duration
}

// Sandbox is a running sandbox.
type Sandbox struct {
	Ref SandboxRef
	// Created is true when EnsureRunning created the sandbox, false when it
	// reused one.
	Created bool
	// Workdir is the absolute path inside the sandbox where work happens and
	// the default working directory of Exec.
	Workdir string
	// Worker says where amelia-worker is, or goes, in this sandbox.
	Worker WorkerPlace
	// Details are human-readable facts (container id, host, region...).
	Details map[string]string
}

// DetailEgress is the key of Sandbox.Details under which a provider
// whose enforcement of network allowlist and none rests on something it
// cannot check (a cluster's network plugin) says what it did and what
// that needs. The host adds it to its refusal when its egress check
// finds the sandbox reaching out.
const DetailEgress = "egress"

// DetailEgressSettle is the key of Sandbox.Details under which a provider
// whose enforcement of network allowlist and none takes effect some time
// after the sandbox starts (a network plugin programs a NetworkPolicy when
// it sees the pod, on its own schedule) gives, as a Go duration ("30s"),
// how long the host's egress check keeps trying before it concludes that
// the policy is not enforced. Without it one check decides.
const DetailEgressSettle = "egress-settle"

// DetailStop is the key of Sandbox.Details under which a provider says
// how the in-sandbox watchdog stops its sandbox once the profile's
// sandbox.idle_timeout or sandbox.max_lifetime is reached, keeping its
// filesystem: StopInit, StopProcesses or StopByProvider. Without it the
// host starts no watchdog in the sandbox.
const DetailStop = "stop"

// The values of Sandbox.Details[DetailStop].
const (
	// StopInit: the watchdog signals the sandbox's PID 1 (an init such as
	// tini, run as the sandbox's user), which ends the container: it
	// stays, stopped, until EnsureRunning starts it again.
	StopInit = "init"
	// StopProcesses: the watchdog ends every process of the sandbox (those
	// whose environment holds the AMELIA_SANDBOX_DIR of its own), after
	// writing LifetimeStopped, which makes HealthCheck say stopped until
	// EnsureRunning removes it.
	StopProcesses = "processes"
	// StopByProvider: the provider stops idle sandboxes itself (Daytona's
	// auto-stop); the watchdog only keeps the record.
	StopByProvider = "provider"
)

// LifetimeDir is the watchdog's directory, relative to Sandbox.Workdir,
// and LifetimeStopped the file in it that says the watchdog stopped the
// sandbox (with StopProcesses).
const (
	LifetimeDir     = ".amelia/lifetime"
	LifetimeStopped = "stopped"
)

// WorkerPlace says where the host finds amelia-worker in a sandbox, or
// puts it. The host installs the worker for the sandbox's architecture
// itself, through Exec stdin, as Dir/amelia-worker-<sha256 prefix>; a
// provider that can do better (an image that has it) names its copies.
type WorkerPlace struct {
	// Dir is the absolute directory, inside the sandbox and writable by the
	// default exec user, that the host installs the worker in. Empty means
	// $HOME/.amelia/bin of that user.
	Dir string
	// Preinstalled are absolute paths inside the sandbox where the provider
	// put a worker itself (a Docker image's /opt/amelia/bin/amelia-worker);
	// one whose sha256 is the host's binary's is used as it is.
	Preinstalled []string
}

// ExecRequest is one process to run in a sandbox.
type ExecRequest struct {
	Sandbox SandboxRef
	Argv    []string
	Env     map[string]string
	// Dir is the working directory; empty means the sandbox's workdir.
	Dir string
	// User to run as; empty means the provider's unprivileged default.
	User string
	TTY  bool
	Size TermSize
	// CancelGrace is how long the process tree has between SIGTERM and
	// SIGKILL once the exec is cancelled; zero means DefaultCancelGrace.
	CancelGrace time.Duration
	// Timeout stops the process like a cancel once it passes; zero means none.
	Timeout time.Duration
	// Traffic is what the exec's streams carry, so that the provider can
	// run it where that goes best; the zero value leaves it the choice.
	Traffic Traffic
}

// Traffic is what an exec's streams carry. The docker provider, for one,
// runs its sandbox user's commands on a command session (a fork in the
// container, a few milliseconds) unless they stream input or say
// TrafficBulk, which get an exec of the engine's own (tens of
// milliseconds to start, then bytes at the engine's own speed).
type Traffic int

const (
	// TrafficAny leaves the choice to the provider: most commands'
	// output is small.
	TrafficAny Traffic = iota
	// TrafficMessages is small messages whose latency matters more than
	// their throughput (a worker's session frames), input included.
	TrafficMessages
	// TrafficBulk is much data, either way (an archive, a dump): the
	// provider runs it where throughput beats the time to start.
	TrafficBulk
)

// DefaultCancelGrace is the grace period used when ExecRequest.CancelGrace is
// zero.
const DefaultCancelGrace = 5 * time.Second

// Grace returns the request's cancel grace period, or DefaultCancelGrace.
func (r ExecRequest) Grace() time.Duration {
	if r.CancelGrace > 0 {
		return r.CancelGrace
	}
	return DefaultCancelGrace
}

// TermSize is a terminal's size in character cells.
type TermSize struct {
	Rows, Cols uint32
}

// ExecIO carries an exec's streams. Nil Stdin means empty input; nil Stdout or
// Stderr discard that stream. A provider may write Stdout and Stderr from
// different goroutines; the SDK's gRPC client writes them one at a time,
// never at once, so both may be the same writer.
type ExecIO struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Resize delivers terminal size changes for TTY execs; may be nil.
	Resize <-chan TermSize
}

// OutputFile is an exec's Stdout that is a file of the caller's, a pipe
// or a regular file, which a provider in another process may write to
// itself: through a plugin, the file is passed to the plugin, and the
// output does not pass through the caller's process. A provider in the
// caller's process writes to it as to any writer. The caller keeps the
// file and closes it once the exec has returned.
type OutputFile struct{ *os.File }

// ExitStatus is how a process ended.
type ExitStatus struct {
	// Code is the exit code; 128+N when the process was killed by signal N.
	Code int
	// Signal is the signal that killed the process, without "SIG" ("KILL").
	Signal string
	// Canceled is true when the exec was stopped because it was cancelled.
	Canceled bool
	// TimedOut is true when the exec was stopped by ExecRequest.Timeout.
	TimedOut bool
}

// HealthState is the state of a sandbox.
type HealthState string

// Sandbox states reported by HealthCheck.
const (
	HealthReady     HealthState = "ready"
	HealthStopped   HealthState = "stopped"
	HealthUnhealthy HealthState = "unhealthy"
)

// Health is the result of a health check.
type Health struct {
	State   HealthState
	Message string
	// NeverStops says why the sandbox never stops by itself, though the
	// profile has sandbox.idle_timeout or sandbox.max_lifetime (stopping
	// it would lose its work, say), for `sandbox ls`; "" where it stops,
	// or the provider does not say.
	NeverStops string
}

// HealthCheckTimeout bounds HealthCheck: the SDK answers DeadlineExceeded
// (ErrTimeout) when a provider takes longer.
const HealthCheckTimeout = 10 * time.Second
