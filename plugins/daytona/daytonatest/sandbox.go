package daytonatest

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// sandbox is one sandbox of the fake. Its fields are guarded by Fake.mu.
type sandbox struct {
	id, name, snapshot, user string
	env, labels              map[string]string
	public, networkBlockAll  bool
	target                   string
	cpu, gpu, memory, disk   float64
	autoStop                 float64
	autoArchive, autoDelete  float64
	buildInfo                *api.BuildInfo
	toolboxURL               string
	orgID                    string
	class                    string // sandboxClass: container, linux-vm...

	// state is the state as Daytona stores it, desired what it is on its
	// way to; a GET shows the pair as shownState says, a list as stored.
	state        api.State
	desired      api.DesiredState
	errorReason  string
	createdAt    time.Time
	updatedAt    time.Time
	lastActivity time.Time

	// history is how the list (a lagging search index) has seen the
	// sandbox: its list items as they were, oldest first, pruned to what
	// Options.ListLag can still show.
	history []indexed

	image     string // the local image it runs
	home      string // the user's home, in the container or on the host
	container string // Docker container id, once created
	op        *operation
}

// isoTime is how Daytona writes times (JavaScript's toISOString):
// milliseconds, UTC, and so in order as strings.
const isoTime = "2006-01-02T15:04:05.000Z"

// indexed is the sandbox as a list showed it from a time on.
type indexed struct {
	at   time.Time
	item api.Sandbox
}

// operation is a transition running in the background.
type operation struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// pending reports whether a state change is under way: the state is not
// the desired one. error and build_failed are never pending, as Daytona's
// entity says (sandbox.entity.ts getInvariantChanges).
func (s *sandbox) pending() bool {
	return !s.state.Failed() && string(s.state) != string(s.desired)
}

// shownState is the state a single sandbox's answer (GET, start, stop,
// delete) shows: Daytona's SandboxDto names a pending change from started
// or stopped after where it goes (sandbox.dto.ts getSandboxState), while
// the list shows the stored state.
func (s *sandbox) shownState() api.State {
	switch {
	case s.state == api.StateStarted && s.desired == api.DesiredStopped:
		return api.StateStopping
	case s.state == api.StateStarted && s.desired == api.DesiredDestroyed:
		return api.StateDestroying
	case s.state == api.StateStopped && s.desired == api.DesiredStarted:
		return api.StateStarting
	case s.state == api.StateStopped && s.desired == api.DesiredDestroyed:
		return api.StateDestroying
	case s.state == api.StateStopped && s.desired == api.DesiredArchived:
		return api.StateArchiving
	case s.state == api.StateUnknown && s.desired == api.DesiredStarted:
		return api.StateCreating
	}
	return s.state
}

// visible reports whether GET finds the sandbox: not destroyed, and not a
// failed one being deleted (sandbox.service.ts findOneByIdOrName).
func (s *sandbox) visible() bool {
	return s.state != api.StateDestroyed && !(s.state.Failed() && s.desired == api.DesiredDestroyed)
}

// vm reports whether the sandbox's class can be paused and resumed.
func (s *sandbox) vm() bool { return s.class == api.ClassLinuxVM || s.class == api.ClassWindows }

// view is the sandbox as GET shows it (the Sandbox schema).
func (s *sandbox) view() api.Sandbox {
	sb := s.stored()
	sb.State = s.shownState()
	return sb
}

// stored is the sandbox with its stored state, as the list shows it.
func (s *sandbox) stored() api.Sandbox {
	autoStop, autoArchive, autoDelete := s.autoStop, s.autoArchive, s.autoDelete
	sb := api.Sandbox{
		ID:                  s.id,
		OrganizationID:      s.orgID,
		Name:                s.name,
		Snapshot:            s.snapshot,
		User:                s.user,
		Env:                 maps.Clone(s.env),
		Labels:              maps.Clone(s.labels),
		Public:              s.public,
		NetworkBlockAll:     s.networkBlockAll,
		Target:              s.target,
		CPU:                 s.cpu,
		GPU:                 s.gpu,
		Memory:              s.memory,
		Disk:                s.disk,
		State:               s.state,
		DesiredState:        s.desired,
		ErrorReason:         s.errorReason,
		AutoStopInterval:    &autoStop,
		AutoArchiveInterval: &autoArchive,
		AutoDeleteInterval:  &autoDelete,
		SandboxClass:        s.class,
		CreatedAt:           s.createdAt.UTC().Format(isoTime),
		UpdatedAt:           s.updatedAt.UTC().Format(isoTime),
		LastActivityAt:      s.lastActivity.UTC().Format(isoTime),
		ToolboxProxyURL:     s.toolboxURL,
	}
	if s.buildInfo != nil {
		bi := *s.buildInfo
		sb.BuildInfo = &bi
	}
	if sb.Env == nil {
		sb.Env = map[string]string{}
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	return sb
}

// changedLocked records a change of the sandbox: updatedAt, and what the
// list will show once Options.ListLag has passed. Every change but the
// first (the sandbox's insertion) clears the lookup cache's miss of its
// name, as Daytona's repository update does. The caller holds f.mu.
func (f *Fake) changedLocked(s *sandbox) {
	now := time.Now()
	s.updatedAt = now
	if len(s.history) > 0 {
		delete(f.misses, s.name)
	}
	s.history = append(s.history, indexed{at: now, item: s.stored()})
	// Keep the newest item the list can show already, and all after it.
	cut := f.indexedUpToLocked()
	first := 0
	for i, h := range s.history {
		if !h.at.After(cut) {
			first = i
		}
	}
	s.history = s.history[first:]
}

// indexedUpToLocked is the time up to which the list's index has taken
// the sandboxes' changes: Options.ListLag ago, or when HoldList held it if
// that is earlier. The caller holds f.mu.
func (f *Fake) indexedUpToLocked() time.Time {
	t := time.Now().Add(-f.opts.ListLag)
	if !f.heldAt.IsZero() && f.heldAt.Before(t) {
		t = f.heldAt
	}
	return t
}

// HoldList stops the list's index from taking changes until ReleaseList:
// GET /sandbox answers as things were now, whatever changes meanwhile, as
// when Daytona's search index falls behind by more than Options.ListLag.
// Tests of what the lag hides hold it, rather than racing the lag.
func (f *Fake) HoldList() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heldAt = time.Now()
}

// ReleaseList lets the list's index catch up again: from now on the list
// lags by Options.ListLag only.
func (f *Fake) ReleaseList() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heldAt = time.Time{}
}

// indexedAt is the sandbox as the list shows it at t: false when the
// index had not seen it yet.
func (s *sandbox) indexedAt(t time.Time) (api.Sandbox, bool) {
	for i := len(s.history) - 1; i >= 0; i-- {
		if !s.history[i].at.After(t) {
			return s.history[i].item, true
		}
	}
	return api.Sandbox{}, false
}

// step is one stage of a transition: the state shown while it runs and
// what it does (nil: nothing). A transition lasts at least StartDelay,
// shared evenly among its steps.
type step struct {
	state api.State
	do    func(ctx context.Context, s *sandbox) error
}

// endState is an error of a step that ends the transition in a given
// state (build_failed) rather than error.
type endState struct {
	state  api.State
	reason string
}

func (e *endState) Error() string { return e.reason }

// setStateLocked changes a sandbox's state; the caller holds f.mu.
func (f *Fake) setStateLocked(s *sandbox, st api.State) {
	s.state = st
	f.changedLocked(s)
}

// transition starts steps in the background, ending in final with reason
// as errorReason (when final is a failure). The caller holds f.mu. A later
// transition of the same sandbox supersedes this one: its states are no
// longer shown, and its context is cancelled only when the later one says
// so (deletion).
func (f *Fake) transition(s *sandbox, steps []step, final api.State, reason string) *operation {
	ctx, cancel := context.WithCancel(f.ctx)
	op := &operation{cancel: cancel, done: make(chan struct{})}
	s.op = op
	s.errorReason = ""
	f.setStateLocked(s, steps[0].state)
	dwell := f.opts.StartDelay / time.Duration(len(steps))
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(op.done)
		defer cancel()
		for i, st := range steps {
			if i > 0 && (!f.heldTransitions(ctx) || !f.showState(s, op, st.state)) {
				return
			}
			begun := time.Now()
			if st.do != nil {
				if err := st.do(ctx, s); err != nil {
					if ctx.Err() != nil {
						return
					}
					var es *endState
					if errors.As(err, &es) {
						f.finish(s, op, es.state, es.reason)
					} else {
						f.logger.Warn("daytonatest: sandbox transition failed", "sandbox", s.id, "state", st.state, "error", err)
						f.finish(s, op, api.StateError, err.Error())
					}
					return
				}
			}
			t := time.NewTimer(dwell - time.Since(begun))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		if f.heldTransitions(ctx) {
			f.finish(s, op, final, reason)
		}
	}()
	return op
}

// HoldTransitions stops every sandbox where it is, in the state it shows,
// until ReleaseTransitions: its transition takes no next step, as when
// Daytona's runner is slow to act. A test holds them to act while a
// sandbox is in a state, rather than racing its StartDelay.
func (f *Fake) HoldTransitions() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held == nil {
		f.held = make(chan struct{})
	}
}

// ReleaseTransitions lets the held transitions go on.
func (f *Fake) ReleaseTransitions() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held != nil {
		close(f.held)
		f.held = nil
	}
}

// heldTransitions waits while transitions are held; false when ctx ended
// first.
func (f *Fake) heldTransitions(ctx context.Context) bool {
	f.mu.Lock()
	held := f.held
	f.mu.Unlock()
	if held == nil {
		return true
	}
	select {
	case <-held:
		return true
	case <-ctx.Done():
		return false
	}
}

// showState moves a sandbox to the state of the next step of op, unless a
// later transition superseded op.
func (f *Fake) showState(s *sandbox, op *operation, st api.State) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.op != op {
		return false
	}
	f.setStateLocked(s, st)
	return true
}

// finish ends op in state st, unless a later transition superseded it.
func (f *Fake) finish(s *sandbox, op *operation, st api.State, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.op != op {
		return
	}
	s.op = nil
	s.errorReason = reason
	f.setStateLocked(s, st)
	f.logger.Debug("daytonatest: sandbox state", "sandbox", s.id, "state", st, "reason", reason)
}

// createSteps are the transitions of a new sandbox: from a snapshot,
// creating → pulling_snapshot → started; from a Dockerfile, pending_build
// → building_snapshot → starting → started (or build_failed when its
// image is not local). A failure from FailNext keeps the states but makes
// no container and ends in its state.
func (f *Fake) createSteps(s *sandbox, build bool, fail *failure) ([]step, api.State, string) {
	create := func(ctx context.Context, s *sandbox) error { return f.backend.create(ctx, s) }
	start := func(ctx context.Context, s *sandbox) error { return f.backend.start(ctx, s) }
	var steps []step
	if build {
		check := func(ctx context.Context, s *sandbox) error {
			ok, err := f.backend.imageExists(ctx, s.image)
			if err != nil {
				return err
			}
			if !ok {
				return &endState{state: api.StateBuildFailed, reason: "failed to build the image: pull access denied for " + s.image + " (no registry)"}
			}
			return nil
		}
		steps = []step{{api.StatePendingBuild, nil}, {api.StateBuildingSnapshot, check}, {api.StateStarting, func(ctx context.Context, s *sandbox) error {
			if err := create(ctx, s); err != nil {
				return err
			}
			return start(ctx, s)
		}}}
	} else {
		steps = []step{{api.StateCreating, create}, {api.StatePullingSnapshot, start}}
	}
	if fail != nil {
		for i := range steps {
			steps[i].do = nil
		}
		return steps, fail.state, fail.reason
	}
	return steps, api.StateStarted, ""
}

// startSteps start a stopped sandbox (stopped → starting → started) or
// resume a paused one (paused → resuming → started). The first step keeps
// the state the sandbox had: Daytona's start only records the desired
// state, which its sandbox manager acts on a moment later.
func (f *Fake) startSteps(s *sandbox) []step {
	if s.state == api.StatePaused {
		// A paused sandbox's processes live on (see PauseSandbox).
		return []step{{s.state, nil}, {api.StateResuming, nil}}
	}
	return []step{{s.state, nil}, {api.StateStarting, func(ctx context.Context, s *sandbox) error { return f.backend.start(ctx, s) }}}
}

// stopSteps stop a started or paused sandbox: (as it was) → stopping →
// stopped.
func (f *Fake) stopSteps(s *sandbox) []step {
	return []step{{s.state, nil}, {api.StateStopping, func(ctx context.Context, s *sandbox) error { return f.backend.stop(ctx, s) }}}
}

// pauseSteps pause a started sandbox: pausing → paused. Unlike Daytona's
// (a VM's memory is kept), the fake's pause leaves the processes running:
// only the gateway and toolbox, which serve started sandboxes alone, stop
// reaching them.
func (f *Fake) pauseSteps() []step {
	return []step{{api.StatePausing, nil}}
}

// destroySteps delete a sandbox after cancelling the transition it was
// in: (as it was) → destroying → destroyed.
func (f *Fake) destroySteps(s *sandbox, prev *operation) []step {
	return []step{{s.state, nil}, {api.StateDestroying, func(ctx context.Context, s *sandbox) error {
		if prev != nil {
			prev.cancel()
			<-prev.done
		}
		return f.backend.remove(ctx, s)
	}}}
}

// StopSandbox stops a sandbox out of band, as Daytona's auto-stop would,
// and returns once it is stopped. A sandbox on its way to started is
// stopped once there; one that fails, or is deleted, meanwhile is left
// as it is.
func (f *Fake) StopSandbox(id string) { f.outOfBand(id, api.DesiredStopped) }

// PauseSandbox pauses a started sandbox out of band and returns once it is
// paused, whatever its class. Daytona's API pauses only VM sandboxes
// (POST /sandbox/{id}/pause answers 422 for a container), but its start
// refuses to resume a paused one that is not a VM (422, "Resuming is not
// supported for this sandbox"): this is how a test gets one, or a paused
// VM (Options.SnapshotClasses).
func (f *Fake) PauseSandbox(id string) { f.outOfBand(id, api.DesiredPaused) }

// outOfBand moves a sandbox to want (stopped or paused) as Daytona's
// sandbox manager would, waiting out a change under way first.
func (f *Fake) outOfBand(id string, want api.DesiredState) {
	for {
		f.mu.Lock()
		s, ok := f.boxes[id]
		if !ok || f.ctx.Err() != nil || s.desired == api.DesiredDestroyed {
			f.mu.Unlock()
			return
		}
		op := s.op
		switch {
		case s.pending():
			// Wait for the change under way.
		case string(s.state) == string(want):
			op = nil
		case s.state == api.StateStarted && want == api.DesiredPaused:
			s.desired = want
			op = f.transition(s, f.pauseSteps(), api.StatePaused, "")
		case (s.state == api.StateStarted || s.state == api.StatePaused) && want == api.DesiredStopped:
			s.desired = want
			op = f.transition(s, f.stopSteps(s), api.StateStopped, "")
		default: // failed, or stopped when a pause was asked
			op = nil
		}
		f.mu.Unlock()
		if op == nil {
			return
		}
		<-op.done
	}
}
