// Package gc decides what `amelia gc` tidies: for each piece of stale
// work this host knows of (a run's record and its checkout in a sandbox,
// a log, an audit log, an orphan sandbox, a worker binary of another
// version), whether it is past its profile's retention and, if so, what
// may be done with it without losing anyone's work. It only decides: the
// command does what an Item says, and says what it did with Line.
//
// The rules, which never lose work:
//   - a run whose agent may be running is never touched;
//   - kept work (a run that ended, was stopped or kept) is exported to a
//     bundle on the host first, and only then removed from its sandbox;
//   - a checkout whose work reached the host (delivered) or had none
//     (discarded) is removed, with its record;
//   - a record whose sandbox is gone is forgotten, whatever it says;
//   - a sandbox no profile owns is removed only when it is running and
//     holds no checkout at all; one that may hold work is left alone;
//   - exported work is never removed by gc: `amelia results` brings it
//     back (or --discard drops it);
//   - a parked checkout holds no work (only checkouts whose work was
//     delivered, or had none, are parked): it goes;
//   - a kept setup goes when its profile no longer starts from it and
//     no sandbox was made from it.
package gc

import (
	"fmt"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/runstore"
)

// Kind is what an Item is.
type Kind string

const (
	// Run is a run's record, and what of it is in its sandbox.
	Run Kind = "run"
	// Log is this host's copy of what a run showed.
	Log Kind = "log"
	// Audit is a run's audit log at the proxy.
	Audit Kind = "audit log"
	// Sandbox is a sandbox no configured profile owns (an orphan).
	Sandbox Kind = "sandbox"
	// Worker is an amelia-worker binary in a sandbox that this version
	// does not use.
	Worker Kind = "worker"
	// Parked is a checkout parked in a sandbox for a later workflow to
	// reuse: its work was delivered, or there was none.
	Parked Kind = "parked checkout"
	// Setup is a profile's setup kept by its provider (an image, a
	// snapshot) that the profile no longer starts from.
	Setup Kind = "setup"
)

// Action is what gc does with an Item.
type Action string

const (
	// Export: export the run's kept work to a bundle on the host, record
	// the run as exported, then remove its checkout from the sandbox.
	Export Action = "export"
	// Remove: remove it (for a run: its checkout and its record); nothing
	// of value goes with it.
	Remove Action = "remove"
	// Forget: remove the run's record; its sandbox, and all it held, is
	// gone already.
	Forget Action = "forget"
	// Leave: past retention, but left alone (Why says why).
	Leave Action = "leave"
)

// Item is one piece of stale work and what to do with it.
type Item struct {
	Kind Kind
	// Name names it in messages: "profile/workflow" for a run, a path
	// for a file, a sandbox's name.
	Name   string
	Action Action
	// Why says why it is left alone (Leave), or what it is.
	Why string
	// Age is how long ago it was last written (a run: its record).
	Age time.Duration
	// Record is the run's, for Kind Run.
	Record runstore.Record
	// Where is the sandbox (runs, workers) or directory (files) it is in.
	Where string
	// Export is where an Export puts the bundle.
	Export string
	// Detail says what it is, beside its name (an orphan's profile).
	Detail string
}

// SandboxState is what gc found of a run's sandbox.
type SandboxState string

const (
	// Up: the sandbox runs.
	Up SandboxState = "up"
	// Down: the sandbox exists and is stopped; it keeps its filesystem.
	Down SandboxState = "down"
	// Gone: the provider says there is no such sandbox.
	Gone SandboxState = "gone"
	// Unknown: the provider could not be asked, or did not say.
	Unknown SandboxState = "unknown"
)

// RunInput is what PlanRun needs of a run.
type RunInput struct {
	Record runstore.Record
	// Age is how long ago its record was last written.
	Age       time.Duration
	Retention time.Duration
	// Sandbox is the state of the sandbox that holds its work; Why, for
	// Unknown, says what went wrong.
	Sandbox    SandboxState
	SandboxWhy string
	// Export is where its kept work would be exported to.
	Export string
}

// PlanRun decides what to do with a run's record and its work. ok is
// false when the run is not past its retention, or is nothing gc tidies
// (an exported run, whose bundle is the user's work).
func PlanRun(in RunInput) (Item, bool) {
	r := in.Record
	it := Item{Kind: Run, Name: r.Profile + "/" + r.Workflow, Age: in.Age, Record: r, Where: r.SandboxName()}
	if in.Age <= in.Retention || r.State == runstore.Exported {
		return it, false
	}
	switch {
	case r.State.AgentMayRun():
		// Never touched, whatever became of its sandbox: the agent may
		// still be at work there.
		return leave(it, fmt.Sprintf("its agent may be running: follow it with amelia attach --profile %s %s", r.Profile, r.Workflow)), true
	case r.State.Preparing():
		return leave(it, fmt.Sprintf("it may still be starting (%s): remove it with amelia results --profile %s --discard %s", r.State, r.Profile, r.Workflow)), true
	}
	switch in.Sandbox {
	case Gone:
		it.Action, it.Why = Forget, "its sandbox "+r.SandboxName()+" is gone"
		return it, true
	case Unknown:
		why := "cannot tell what its sandbox " + r.SandboxName() + " holds"
		if in.SandboxWhy != "" {
			why += ": " + in.SandboxWhy
		}
		return leave(it, why), true
	}
	switch r.State {
	case runstore.Ended, runstore.Stopped, runstore.Kept:
		it.Action, it.Export, it.Why = Export, in.Export, "kept work ("+string(r.State)+")"
	case runstore.Delivered, runstore.Discarded:
		it.Action, it.Why = Remove, "a checkout whose work "+map[runstore.State]string{runstore.Delivered: "was delivered", runstore.Discarded: "was nothing to keep"}[r.State]
	default:
		return leave(it, "unknown state "+string(r.State)), true
	}
	return it, true
}

func leave(it Item, why string) Item {
	it.Action, it.Why = Leave, why
	return it
}

// FileInput is a log or audit log.
type FileInput struct {
	Kind      Kind
	Path      string
	Age       time.Duration
	Retention time.Duration
	// InUse: the file belongs to a run whose agent may be running.
	InUse bool
}

// PlanFile decides what to do with a log or an audit log; ok is false
// when it is within its retention.
func PlanFile(in FileInput) (Item, bool) {
	it := Item{Kind: in.Kind, Name: in.Path, Age: in.Age}
	switch {
	case in.Age <= in.Retention:
		return it, false
	case in.InUse:
		return leave(it, "its run may be running"), true
	}
	it.Action = Remove
	return it, true
}

// OrphanInput is a sandbox no configured profile owns.
type OrphanInput struct {
	Name, Profile, Provider string
	// Age is how long ago it was created; zero when the provider did not
	// say.
	Age       time.Duration
	Retention time.Duration
	// Up: it runs, so what it holds could be listed (Workflows).
	Up bool
	// Workflows are the checkouts it holds; Listed says they were listed.
	Workflows []string
	Listed    bool
	// Recorded are the runs this host recorded in it.
	Recorded []string
}

// PlanOrphan decides what to do with an orphan sandbox: it goes only
// when it is past retention, running, and holds no checkout and no
// recorded run; ok is false when it is within retention.
func PlanOrphan(in OrphanInput) (Item, bool) {
	it := Item{Kind: Sandbox, Name: in.Name, Age: in.Age, Where: in.Provider,
		Detail: "orphan of profile " + in.Profile + ", provider " + in.Provider}
	switch {
	case in.Age == 0:
		return leave(it, "its provider does not say its age, so gc cannot tell it is stale: see what it holds with amelia sandbox ls, then remove it with amelia stop"), true
	case in.Age <= in.Retention:
		return it, false
	case len(in.Recorded) > 0:
		return leave(it, "it holds work of runs this host recorded ("+strings.Join(in.Recorded, ", ")+"): configure profile "+in.Profile+" again and bring it back with amelia results --profile "+in.Profile+" WORKFLOW (or drop it with amelia results --profile "+in.Profile+" --discard WORKFLOW), then amelia stop removes the sandbox"), true
	case !in.Up:
		return leave(it, "it is not running, so gc cannot tell whether it holds work: amelia stop removes it unless it does (then --force removes that too)"), true
	case !in.Listed:
		return leave(it, "its checkouts could not be listed, so it may hold work: see with amelia sandbox ls; amelia stop removes it unless it does"), true
	case len(in.Workflows) > 0:
		return leave(it, "it holds checkouts no run record names ("+strings.Join(in.Workflows, ", ")+"), which may hold work: amelia stop --force removes them with it, once you have what you need of them"), true
	}
	it.Action = Remove
	return it, true
}

// WorkerInput is an amelia-worker binary in a sandbox's worker
// directory.
type WorkerInput struct {
	Path, Sandbox string
	Age           time.Duration
	Retention     time.Duration
	// Current: this version's (or one a recorded run names).
	Current bool
}

// PlanWorker decides what to do with a worker binary: another version's,
// past retention, goes; ok is false otherwise.
func PlanWorker(in WorkerInput) (Item, bool) {
	it := Item{Kind: Worker, Name: in.Path, Age: in.Age, Where: in.Sandbox}
	if in.Current || in.Age <= in.Retention {
		return it, false
	}
	it.Action = Remove
	return it, true
}

// ParkedInput is a checkout parked in a sandbox for reuse.
type ParkedInput struct {
	// Name is its entry in the sandbox's .amelia/parked/.
	Name, Sandbox string
	UID           int
	Age           time.Duration
	Retention     time.Duration
}

// PlanParked decides what to do with a parked checkout: past retention,
// it goes (it holds no work: only a checkout whose work was delivered,
// or had none, is parked); ok is false otherwise.
func PlanParked(in ParkedInput) (Item, bool) {
	it := Item{Kind: Parked, Name: in.Name, Age: in.Age, Where: in.Sandbox, Detail: fmt.Sprintf("uid %d", in.UID)}
	if in.Age <= in.Retention {
		return it, false
	}
	it.Action, it.Why = Remove, "kept for reuse, with no work in it"
	return it, true
}

// SetupInput is a setup a provider kept for a profile that the profile
// no longer starts from, past retention (as the provider reported it).
type SetupInput struct {
	Ref, Profile, Provider string
	Age                    time.Duration
	// Left is why the provider keeps it; "" when it removes it.
	Left string
}

// PlanSetup says what the provider did (or would do) with a setup.
func PlanSetup(in SetupInput) Item {
	it := Item{Kind: Setup, Name: in.Ref, Age: in.Age, Where: in.Provider,
		Detail: "of profile " + in.Profile + ", provider " + in.Provider}
	if in.Left != "" {
		return leave(it, in.Left)
	}
	it.Action, it.Why = Remove, "profile "+in.Profile+" no longer starts from it"
	return it
}

// Line says what was, or with dry would be, done with it: one line,
// without its newline. err, when the action failed, is said instead.
func Line(it Item, dry bool, err error) string {
	age := Age(it.Age)
	var what string
	switch it.Kind {
	case Run:
		what = "run " + it.Name + " (" + string(it.Record.State) + ", " + age + " old)"
	case Sandbox:
		what = "sandbox " + it.Name + " (" + it.Detail + ", " + age + " old)"
	case Worker:
		what = "worker " + it.Name + " in sandbox " + it.Where + " (" + age + " old)"
	case Parked:
		what = "parked checkout " + it.Name + " in sandbox " + it.Where + " (" + it.Detail + ", " + age + " old)"
	case Setup:
		what = "setup " + it.Name + " (" + it.Detail + ", " + age + " old)"
	default:
		what = string(it.Kind) + " " + it.Name + " (" + age + " old)"
	}
	if err != nil {
		return "failed to " + verb(it, false) + " " + what + ": " + err.Error()
	}
	if it.Action == Leave {
		return "left alone: " + what + ": " + it.Why
	}
	v := verb(it, !dry)
	if dry {
		v = "would " + v
	}
	switch it.Action {
	case Export:
		then := "removed"
		if dry {
			then = "remove"
		}
		return fmt.Sprintf("%s %s to %s and %s its checkout from sandbox %s (amelia results --profile %s %s brings it back)",
			v, what, it.Export, then, it.Where, it.Record.Profile, it.Record.Workflow)
	case Forget:
		return v + " " + what + ": " + it.Why
	case Remove:
		switch it.Kind {
		case Run:
			return v + " " + what + " from sandbox " + it.Where + ": " + it.Why
		case Parked, Setup:
			return v + " " + what + ": " + it.Why
		}
	}
	return v + " " + what
}

// Unlisted says that what of kind in where could not be listed (a
// directory, a sandbox's worker directory): one line, as Line's.
func Unlisted(kind Kind, where string, err error) string {
	return "failed to list the " + string(kind) + "s in " + where + ": " + err.Error()
}

// verb is what the action does: in the infinitive, or done (past).
func verb(it Item, past bool) string {
	v := map[Action][2]string{
		Export: {"export", "exported"},
		Remove: {"remove", "removed"},
		Forget: {"forget", "forgot"},
		Leave:  {"leave", "left"},
	}[it.Action]
	if past {
		return v[1]
	}
	return v[0]
}

// Age is d in its largest whole unit: 45s, 12m, 5h, 3d.
func Age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
