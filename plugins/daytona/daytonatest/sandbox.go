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

	state       api.State
	desired     api.DesiredState
	errorReason string
	createdAt   time.Time
	updatedAt   time.Time

	image     string // the local image it runs
	home      string // the user's home, in the container or on the host
	container string // Docker container id, once created
	op        *operation
}

// operation is a transition running in the background.
type operation struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// view is the sandbox as the API shows it (the Sandbox schema).
func (s *sandbox) view() api.Sandbox {
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
		CreatedAt:           s.createdAt.UTC().Format(time.RFC3339Nano),
		UpdatedAt:           s.updatedAt.UTC().Format(time.RFC3339Nano),
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

// setState changes a sandbox's state; the caller holds f.mu.
func (s *sandbox) setState(st api.State) {
	s.state = st
	s.updatedAt = time.Now()
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
	s.setState(steps[0].state)
	dwell := f.opts.StartDelay / time.Duration(len(steps))
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(op.done)
		defer cancel()
		for i, st := range steps {
			if i > 0 && !f.showState(s, op, st.state) {
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
		f.finish(s, op, final, reason)
	}()
	return op
}

// showState moves a sandbox to the state of the next step of op, unless a
// later transition superseded op.
func (f *Fake) showState(s *sandbox, op *operation, st api.State) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.op != op {
		return false
	}
	s.setState(st)
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
	s.setState(st)
	s.errorReason = reason
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

// startSteps start a stopped sandbox: starting → started.
func (f *Fake) startSteps() []step {
	return []step{{api.StateStarting, func(ctx context.Context, s *sandbox) error { return f.backend.start(ctx, s) }}}
}

// stopSteps stop a started sandbox: stopping → stopped.
func (f *Fake) stopSteps() []step {
	return []step{{api.StateStopping, func(ctx context.Context, s *sandbox) error { return f.backend.stop(ctx, s) }}}
}

// destroySteps delete a sandbox after cancelling the transition it was
// in: destroying → destroyed.
func (f *Fake) destroySteps(prev *operation) []step {
	return []step{{api.StateDestroying, func(ctx context.Context, s *sandbox) error {
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
func (f *Fake) StopSandbox(id string) {
	for {
		f.mu.Lock()
		s, ok := f.boxes[id]
		if !ok || s.state == api.StateStopped || f.ctx.Err() != nil {
			f.mu.Unlock()
			return
		}
		op := s.op
		switch {
		case s.state == api.StateStarted:
			s.desired = "stopped"
			op = f.transition(s, f.stopSteps(), api.StateStopped, "")
		case op == nil: // failed, or destroyed
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		<-op.done
	}
}
