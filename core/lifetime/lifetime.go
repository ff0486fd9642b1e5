// Package lifetime is what the host and the in-sandbox watchdog
// (amelia-worker watchdog) share about a sandbox's lifetime: the policy
// the host writes (sandbox.idle_timeout, sandbox.max_lifetime and how to
// stop the sandbox), the files in the sandbox's lifetime directory, the
// status the watchdog reports, and the rule that decides when the
// sandbox stops.
//
// Activity is work done for a person or an agent: a worker command that
// does work holds a shared flock on the busy file while it runs and
// touches the activity stamp when it starts and ends; the supervisor of a
// detached agent holds it while its agent runs. The watchdog, which
// polls the busy file, touches the stamp whenever it finds it held. So
// the stamp's mtime is the last activity, and the busy file's lock says
// whether work is going on now.
//
// It imports nothing but the standard library: the worker links it.
package lifetime

import (
	"encoding/json"
	"fmt"
	"time"
)

// Dir is the watchdog's directory, relative to the sandbox's workdir
// (sdk.LifetimeDir).
const Dir = ".amelia/lifetime"

// The files in Dir.
const (
	PolicyFile  = "policy.json"   // Policy, written by the host (0644)
	BusyFile    = "busy"          // shared-locked while work goes on (0644: any uid may lock it)
	StampFile   = "activity"      // its mtime is the last activity (0666: any uid may touch it)
	LockFile    = "watchdog.lock" // the running watchdog's exclusive lock: one per sandbox
	StartedFile = "started"       // when the running watchdog started (RFC 3339)
	DecidedFile = "decided.json"  // Decision: why and when the watchdog stopped the sandbox
	StoppedFile = "stopped"       // sdk.LifetimeStopped: the sandbox is stopped (StopProcesses)
	LogFile     = "watchdog.log"  // the watchdog's stderr
	WorkerFile  = "worker"        // the path of the worker that started the watchdog
)

// How the watchdog stops a sandbox (sdk.StopInit, sdk.StopProcesses,
// sdk.StopByProvider).
const (
	StopInit       = "init"
	StopProcesses  = "processes"
	StopByProvider = "provider"
)

// EnvDir names the lifetime directory to a worker command whose working
// directory is not under the sandbox's workdir; the worker removes it
// from the environment of what it runs.
const EnvDir = "AMELIA_LIFETIME_DIR"

// Policy is what the host tells the watchdog.
type Policy struct {
	// IdleTimeout stops the sandbox once nothing was active for that
	// long; 0: never for being idle.
	IdleTimeout time.Duration `json:"idle_timeout"`
	// MaxLifetime stops the sandbox once it has run that long (from when
	// its watchdog started) and no work goes on; 0: no bound.
	MaxLifetime time.Duration `json:"max_lifetime"`
	// Stop is how: StopInit, StopProcesses or StopByProvider.
	Stop string `json:"stop"`
	// Poll is how often the watchdog looks; 0: Policy.PollEvery.
	Poll time.Duration `json:"poll,omitempty"`
}

// Check says what is wrong with p, if anything.
func (p Policy) Check() error {
	switch p.Stop {
	case StopInit, StopProcesses, StopByProvider:
	default:
		return fmt.Errorf("unknown way to stop the sandbox %q (want %s, %s or %s)", p.Stop, StopInit, StopProcesses, StopByProvider)
	}
	if p.IdleTimeout < 0 || p.MaxLifetime < 0 || p.Poll < 0 {
		return fmt.Errorf("negative duration in the lifetime policy")
	}
	return nil
}

// PollEvery is how often the watchdog looks: Poll, or a twentieth of the
// shorter bound, from 200ms to 30s.
func (p Policy) PollEvery() time.Duration {
	if p.Poll > 0 {
		return p.Poll
	}
	d := 30 * time.Second
	for _, b := range []time.Duration{p.IdleTimeout, p.MaxLifetime} {
		if b > 0 {
			d = min(d, b/20)
		}
	}
	return max(d, 200*time.Millisecond)
}

// Reasons a sandbox stops.
const (
	ReasonIdle     = "idle"
	ReasonLifetime = "lifetime"
)

// Next says when, by p, a sandbox that started at started, was last
// active at last and is busy now (work goes on) stops, and why: the
// zero time when it never does. A busy sandbox's idle clock has not
// started; a busy sandbox past its lifetime stops once the work has
// ended and nothing was active for Quiet (at is then in the past and due
// is false).
func (p Policy) Next(now, started, last time.Time, busy bool) (at time.Time, reason string, due bool) {
	if p.MaxLifetime > 0 {
		at, reason = started.Add(p.MaxLifetime), ReasonLifetime
	}
	if p.IdleTimeout > 0 {
		idleAt := last.Add(p.IdleTimeout)
		if busy {
			idleAt = now.Add(p.IdleTimeout)
		}
		if at.IsZero() || idleAt.Before(at) {
			at, reason = idleAt, ReasonIdle
		}
	}
	due = !at.IsZero() && !busy && !now.Before(at)
	if due && reason == ReasonLifetime && now.Before(last.Add(p.Quiet())) {
		due = false // between two of the host's commands, maybe
	}
	return at, reason, due
}

// Quiet is how long nothing must have been active before a sandbox past
// its lifetime stops: a minute, or a quarter of MaxLifetime when that is
// shorter, so that the pause between two of a host's commands is not
// taken for the end of its work.
func (p Policy) Quiet() time.Duration {
	return min(time.Minute, p.MaxLifetime/4)
}

// Decision is the watchdog's record of stopping the sandbox.
type Decision struct {
	Reason string    `json:"reason"` // ReasonIdle or ReasonLifetime
	At     time.Time `json:"at"`     // when it decided
	Idle   time.Time `json:"idle"`   // the last activity before it
	Policy Policy    `json:"policy"` // the policy it applied
	Stop   string    `json:"stop"`   // how it stopped the sandbox
}

// Status is what `amelia-worker watchdog status` says of a sandbox.
type Status struct {
	// Watchdog: "running", or "none" when no watchdog runs (one that
	// stopped its sandbox, or none was started).
	Watchdog string  `json:"watchdog"`
	Policy   *Policy `json:"policy,omitempty"`
	// Started is when the running watchdog started: the sandbox's
	// lifetime counts from then.
	Started time.Time `json:"started,omitzero"`
	// LastActivity is the activity stamp; Busy, whether work goes on.
	LastActivity time.Time `json:"last_activity,omitzero"`
	Busy         bool      `json:"busy"`
	// StopsAt and Reason: when and why it will stop (Policy.Next); zero:
	// never.
	StopsAt time.Time `json:"stops_at,omitzero"`
	Reason  string    `json:"reason,omitempty"`
	// Decided is the last stop the watchdog decided, if any.
	Decided *Decision `json:"decided,omitempty"`
}

// Describe says in a few words when a sandbox stops, for sandbox ls:
// "idle at 15:04", "lifetime at Jan 2 15:04", "after its work (lifetime)",
// "never"; a stopped one: "stopped: idle since 15:04".
func (s Status) Describe(now time.Time, loc *time.Location) string {
	if s.Watchdog != "running" {
		if s.Decided != nil {
			return "stopped: " + s.Decided.Reason + " since " + clock(now, s.Decided.Idle, loc)
		}
		return "-"
	}
	switch {
	case s.StopsAt.IsZero():
		return "never"
	case s.Busy && s.Reason == ReasonLifetime && !now.Before(s.StopsAt):
		return "after its work (lifetime)"
	case s.Busy:
		return "busy; then " + s.Reason + " at " + clock(now, s.StopsAt, loc)
	}
	return s.Reason + " at " + clock(now, s.StopsAt, loc)
}

// clock is t as a wall clock time, with the date when it is not today.
func clock(now, t time.Time, loc *time.Location) string {
	if loc == nil {
		loc = time.Local
	}
	t, now = t.In(loc), now.In(loc)
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05")
	}
	return t.Format("Jan 2 15:04")
}

// StatusScript prints the status of the sandbox whose workdir is the
// working directory (where an exec runs by default) by the worker that
// started its watchdog, which it runs as `watchdog status`, a command
// that is not activity; nothing where no watchdog was ever started.
// Being a shell, not the worker, it is no activity either.
const StatusScript = `d=$PWD/` + Dir + `
[ -r "$d/` + WorkerFile + `" ] || exit 0
w=$(cat "$d/` + WorkerFile + `")
[ -x "$w" ] || exit 0
exec "$w" watchdog status --dir "$d"`

// Parse reads a Status from the watchdog's JSON.
func Parse(data []byte) (Status, error) {
	var s Status
	if err := json.Unmarshal(data, &s); err != nil {
		return Status{}, fmt.Errorf("the watchdog's status: %w", err)
	}
	return s, nil
}
