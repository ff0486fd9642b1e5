// Package docker is the "docker" sandbox provider: one container per
// profile on a Docker engine, reached through the Engine API (no docker
// CLI), started from Amelia's sandbox image, which it builds when the
// engine lacks it.
//
// A sandbox is the container amelia-sandbox-<name>: tini as PID 1 over
// `sleep infinity`, no bind mounts and no Docker socket, its workdir on a
// volume of its own (see workdirVolume), every capability
// dropped, no-new-privileges, limits on CPUs, memory and processes, and for
// network allowlist or none no network at all (NetworkMode none), so that
// the only way out is the tunnel amelia opens over Exec. Commands run as the
// unprivileged user amelia; cancelling one kills its whole process group
// inside the container.
package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// Name is the provider's name.
const Name = "docker"

// Container labels. Spec.Labels (amelia.profile, amelia.config,
// amelia.owner, amelia.created) go on the container as they are.
const (
	labelPrefix  = "amelia."
	labelProfile = "amelia.profile" // marks Amelia's containers; the sandbox's name when the spec has none
	labelConfig  = "amelia.config"
	labelCreated = "amelia.created"
	labelNetwork = "amelia.network" // the policy it was created for
	// labelEnvironment is a hash of the image and the env the container
	// was created with; labelDevcontainer the devcontainer.json they came
	// from, if any (Settings.DevcontainerFile).
	labelEnvironment  = "amelia.environment"
	labelDevcontainer = "amelia.devcontainer"
)

// containerPrefix starts every sandbox container's name.
const containerPrefix = "amelia-sandbox-"

func containerName(sandbox string) string { return containerPrefix + sandbox }

// profileOf is the profile spec's sandbox is for: its amelia.profile
// label, else the sandbox's name.
func profileOf(spec sdk.Spec) string {
	if p := spec.Labels[labelProfile]; p != "" {
		return p
	}
	return spec.Name
}

// containerRef is how to address a sandbox's container: by the id
// EnsureRunning returned when known (a container re-created under the same
// name is not the one a run started in), else by name.
func containerRef(ref sdk.SandboxRef) string {
	if ref.ID != "" {
		return ref.ID
	}
	return containerName(ref.Name)
}

// Options configure the provider.
type Options struct {
	// Version is reported by Info.
	Version string
	// WorkerDirs hold amelia-worker-linux-ARCH, which goes into the image.
	WorkerDirs []string
	Logger     *slog.Logger
}

// Provider is the Docker provider.
type Provider struct {
	opts Options
	sums workerbin.Sums

	mu      sync.Mutex
	engines map[string]*engine // by endpoint

	buildMu sync.Mutex // one image build at a time
}

// New returns the Docker provider. It connects to an engine on first use.
func New(opts Options) *Provider {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Provider{opts: opts, engines: map[string]*engine{}}
}

func (p *Provider) Info(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name:        Name,
		Version:     p.opts.Version,
		Description: "a container per profile on a Docker engine: no mounts, no capabilities, no network for allowlist and none",
		Capabilities: sdk.Capabilities{
			EgressModes:    []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkAllowlist, sdk.NetworkNone},
			Isolated:       true,
			ExecAsRoot:     true,
			ResourceLimits: true,
			// An exec of the engine's own with a terminal.
			TTY: true,
			// Any numeric uid: an exec runs as it with every capability
			// dropped, so one uid can neither signal another's processes
			// nor read or write its private files.
			RunUsers: true,
		},
	}, nil
}

// networkMode is the container network a policy gets: open keeps the
// engine's default bridge; allowlist and none get no network, so the only
// way out is amelia's tunnel (and, for allowlist, its egress proxy).
func networkMode(m sdk.NetworkMode) container.NetworkMode {
	if m == sdk.NetworkOpen {
		return "bridge"
	}
	return "none"
}

// EnsureRunning starts the profile's container, or reuses it. Runs
// started together make several processes ensure one sandbox at once: each
// looks at the container and acts on what it finds, and one that finds
// another's change under way (a create that holds the name but has not
// made the container yet, a removal) waits until the engine reports the
// container's next event, then looks again, for as long as ctx allows. So
// all of them end up in the one container that one of them created.
func (p *Provider) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	set, err := decodeSettings(spec.Config)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return sdk.Sandbox{}, err
	}
	name := containerName(spec.Name)
	var w *watch
	told := "" // the wait last shown
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	for {
		sb, err := p.ensureOnce(ctx, e, set, spec, name)
		var race *raceError
		if !errors.As(err, &race) {
			return sb, err
		}
		if w == nil {
			// Watch from now on and look again at once: a change made
			// before the watch began shows in that look, any later one
			// in an event.
			w = e.watch(ctx, name)
			continue
		}
		p.opts.Logger.Debug("waiting for the sandbox container to change", "container", name, "seen", race.what)
		woke, werr := w.next(ctx)
		if werr != nil {
			return sdk.Sandbox{}, fmt.Errorf("sandbox %s: container %s %s, and amelia stopped waiting for it: %w", spec.Name, name, race.what, werr)
		}
		if !woke && told != race.what {
			// A wait that is not over in a moment is shown, once.
			sdk.Progress(p.opts.Logger, fmt.Sprintf("sandbox %s: container %s %s; waiting for it", spec.Name, name, race.what))
			told = race.what
		}
	}
}

// raceError is a container that another process is changing: it was
// created or removed between a look and an act, or it is between two
// states. what says which.
type raceError struct{ what string }

func (r *raceError) Error() string { return r.what }

func raced(what string) error { return &raceError{what} }

// ensureOnce looks at the container once and acts on what it finds:
// creates it, starts it or reuses it. A *raceError means another process
// is changing it: look again once it has.
func (p *Provider) ensureOnce(ctx context.Context, e *engine, set Settings, spec sdk.Spec, name string) (sdk.Sandbox, error) {
	res, err := e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return p.create(ctx, e, set, spec)
	}
	if err != nil {
		return sdk.Sandbox{}, e.wrap(err, "inspect container "+name)
	}
	c := res.Container
	if err := checkOwned(c, spec); err != nil {
		return sdk.Sandbox{}, err
	}
	return p.resume(ctx, e, set, spec, c)
}

// checkOwned refuses a container that is not this spec's sandbox: one
// Amelia did not create (it is left alone), one of the same profile name
// in another config file, or one created for a different network policy.
func checkOwned(c container.InspectResponse, spec sdk.Spec) error {
	name := strings.TrimPrefix(c.Name, "/")
	labels := c.Config.Labels
	if _, ok := labels[labelProfile]; !ok {
		return sdk.Errorf(sdk.ErrConflict, "a container named %s exists that Amelia did not create; amelia leaves it alone: rename or remove it yourself, or rename the profile", name)
	}
	if want, have := spec.Labels[labelConfig], labels[labelConfig]; want != "" && have != "" && want != have {
		return sdk.Errorf(sdk.ErrConflict, "container %s is the sandbox of profile %s in %s, not of %s: rename one of the profiles, or remove it with `amelia --config %s sandbox down -p %s`",
			name, labels[labelProfile], have, want, have, labels[labelProfile])
	}
	want := networkMode(spec.Network.Mode)
	if have := c.HostConfig.NetworkMode; have != want {
		return sdk.Errorf(sdk.ErrConflict, "sandbox %s was created with network %q (%s); the profile asks for %q: remove it with `amelia sandbox down`, then start again",
			spec.Name, labels[labelNetwork], have, spec.Network.Mode)
	}
	return nil
}

// resume makes an existing sandbox container run: as it is when it runs,
// started when it was stopped or never started, unpaused when paused.
func (p *Provider) resume(ctx context.Context, e *engine, set Settings, spec sdk.Spec, c container.InspectResponse) (sdk.Sandbox, error) {
	sb := sandboxOf(spec, c.ID, c.Config.Image, c.Config.Labels[labelImageHash])
	if h := c.Config.Labels[labelSetup]; h != "" {
		sb.Details["setup"] = setupRepo + ":" + h
	}
	if err := p.checkEnvironment(ctx, e, set, c); err != nil {
		return sb, err
	}
	switch st := c.State; {
	case st.Running && !st.Paused:
		return sb, nil
	case st.Paused:
		_, err := e.cli.ContainerUnpause(ctx, c.ID, client.ContainerUnpauseOptions{})
		switch {
		case cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
			return sb, raced("was unpaused or removed by another process") // look at what it is now
		case err != nil:
			return sb, e.wrap(err, "unpause container "+sb.Details["container"])
		}
	case st.Status == container.StateDead:
		_, err := e.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) { // conflict: another removal is under way
			return sb, e.wrap(err, "remove dead container "+sb.Details["container"])
		}
		return sb, raced("was dead, and is being removed")
	case st.Status == container.StateRemoving:
		return sb, raced("is being removed by another process")
	case st.Restarting:
		return sb, raced("is restarting")
	default: // created (by another process that is starting it, or by one that died), exited
		if err := p.start(ctx, e, set, c.ID); errors.Is(err, sdk.ErrNotFound) {
			return sb, raced("was removed by another process as amelia started it")
		} else if err != nil {
			return sb, err
		}
	}
	p.opts.Logger.Info("started sandbox container", "container", sb.Details["container"], "state", c.State.Status)
	return sb, nil
}

// create makes and starts the sandbox's container, building its image
// when needed. A container that cannot serve (see unusable) is removed;
// one whose start failed for another reason (ctx ended) is left for the
// next EnsureRunning to start, since another process may already be
// starting it and using it.
func (p *Provider) create(ctx context.Context, e *engine, set Settings, spec sdk.Spec) (sdk.Sandbox, error) {
	pl, err := p.ensureImage(ctx, e, set)
	if mb := (*missingBase)(nil); errors.As(err, &mb) {
		mb.profile = profileOf(spec)
	}
	if err != nil {
		return sdk.Sandbox{}, err
	}
	var sp setupPlan
	if len(spec.Setup) > 0 {
		if sp, err = p.setupOf(ctx, e, set, spec); err != nil {
			return sdk.Sandbox{}, err
		}
	}
	name := containerName(spec.Name)
	labels := map[string]string{}
	maps.Copy(labels, set.Labels)
	maps.Copy(labels, spec.Labels)
	if labels[labelProfile] == "" {
		labels[labelProfile] = spec.Name
	}
	if labels[labelCreated] == "" {
		labels[labelCreated] = time.Now().UTC().Format(time.RFC3339)
	}
	labels[labelNetwork] = string(spec.Network.Mode)
	labels[labelEnvironment] = environment(pl, set)
	if set.DevcontainerFile != "" {
		labels[labelDevcontainer] = set.DevcontainerFile
	}
	img := pl.tag
	if sp.tag != "" {
		img, labels[labelSetup] = sp.tag, sp.hash
	}
	env := []string{"AMELIA_SANDBOX=" + spec.Name}
	for _, k := range slices.Sorted(maps.Keys(set.Env)) {
		env = append(env, k+"="+set.Env[k])
	}
	cfg := &container.Config{
		Image:      img,
		User:       set.User,
		WorkingDir: image.Workdir,
		Env:        env,
		Labels:     labels,
		// tini reaps every orphan the agent's commands leave; a ready
		// image may lack it, and gets the engine's own init instead.
		Entrypoint: []string{"tini", "--"},
		Cmd:        []string{"sleep", "infinity"},
	}
	pids := set.Resources.Pids
	host := &container.HostConfig{
		Mounts:      []mount.Mount{workdirVolume},
		NetworkMode: networkMode(spec.Network.Mode),
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		Resources: container.Resources{
			NanoCPUs:  int64(set.Resources.CPUs * 1e9),
			Memory:    int64(set.Resources.Memory),
			PidsLimit: &pids,
		},
	}
	for _, p := range slices.Sorted(maps.Keys(set.Tmpfs)) {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeTmpfs, Target: p, TmpfsOptions: &mount.TmpfsOptions{SizeBytes: int64(set.Tmpfs[p]), Mode: 0o1777}})
	}
	if pl.ready != "" {
		init := true
		host.Init = &init
		cfg.Entrypoint, cfg.Cmd = []string{"sleep", "infinity"}, nil
	} else {
		labels[labelImageHash] = pl.hash
	}
	res, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: host})
	if cerrdefs.IsConflict(err) {
		// The engine takes the name before it makes the container: until
		// it has, inspect finds nothing and a create conflicts.
		return sdk.Sandbox{}, raced("is being created by another process")
	}
	if err != nil {
		return sdk.Sandbox{}, e.wrap(err, "create container "+name)
	}
	if err := p.start(ctx, e, set, res.ID); err != nil {
		if errors.Is(err, sdk.ErrNotFound) {
			return sdk.Sandbox{}, raced("was removed by another process as amelia started it")
		}
		if errors.As(err, new(unusable)) {
			rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), internalTimeout)
			defer cancel()
			_, _ = e.cli.ContainerRemove(rmCtx, res.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
		return sdk.Sandbox{}, err
	}
	sb := sandboxOf(spec, res.ID, pl.tag, pl.hash)
	if sp.tag != "" {
		sb.Details["setup"] = sp.tag
	}
	sb.Created = true
	p.opts.Logger.Info("created sandbox container", "container", name, "image", pl.tag, "network", host.NetworkMode)
	return sb, nil
}

// unusable is a container that cannot serve as the sandbox, whoever
// starts it: the engine refused to start it, it exited as it started, or
// commands cannot run in it as the profile's user. Other failures of start
// (ctx ended, the engine out of reach, the container removed) say nothing
// about the container.
type unusable struct{ error }

func (u unusable) Unwrap() error { return u.error }

// start starts a container and checks that commands run in it as the
// profile's user, in the workdir: the first exec shows a wrong image or
// user now, with a message saying which. Starting a container another
// process started already is no error: the engine answers that it runs.
func (p *Provider) start(ctx context.Context, e *engine, set Settings, id string) error {
	if _, err := e.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		switch {
		case strings.Contains(err.Error(), "unable to find user"):
			return unusable{sdk.Errorf(sdk.ErrInvalid, "docker.user %q is not a user of the sandbox image (%v): set docker.user to one it has", set.User, err)}
		case ctx.Err() != nil, client.IsErrConnectionFailed(err), cerrdefs.IsNotFound(err), cerrdefs.IsConflict(err):
			return e.wrap(err, "start container "+id[:min(12, len(id))])
		}
		return unusable{e.wrap(err, "start container "+id[:min(12, len(id))])}
	}
	code, out, err := e.run(ctx, id, set.User, []string{"sh", "-c", `test -d "$1" && test -w "$1" || { echo "$1 is missing or not writable by $(id -un)"; exit 1; }`, "sh", image.Workdir})
	if err == nil && code != 0 {
		return unusable{fmt.Errorf("the sandbox container started, but commands cannot run in it as user %s: %s (docker.user and docker.image must fit together)", set.User, out)}
	}
	if err != nil {
		res, ierr := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		switch {
		case cerrdefs.IsNotFound(ierr):
			return sdk.Errorf(sdk.ErrNotFound, "container %s was removed as it started", id[:min(12, len(id))])
		case ierr == nil && res.Container.State != nil && !res.Container.State.Running:
			return unusable{fmt.Errorf("the sandbox container exited as it started (exit code %d%s): is the image a sandbox image (docker.image)?", res.Container.State.ExitCode, stateError(res.Container.State))}
		}
		return fmt.Errorf("the sandbox container started, but a first command in it failed: %w", err)
	}
	return nil
}

func stateError(st *container.State) string {
	if st.Error == "" {
		return ""
	}
	return ", " + st.Error
}

// environment identifies what a container of the plan runs with: its
// image and its env.
func environment(pl imagePlan, set Settings) string {
	h := sha256.New()
	fmt.Fprintf(h, "image %s\x00", pl.tag)
	for _, k := range slices.Sorted(maps.Keys(set.Env)) {
		fmt.Fprintf(h, "env %s=%s\x00", k, set.Env[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// checkEnvironment refuses to reuse, for a run whose environment comes
// from its repository's devcontainer (set.DevcontainerFile), a container
// made for another: another devcontainer, an older version of this one,
// or the profile's own image. The container may hold other runs' work, so
// it is never replaced unasked. Without a devcontainer, a container made
// from one is reused (amelia sandbox exec, attach, a run of a repository
// without one), with a warning saying so.
func (p *Provider) checkEnvironment(ctx context.Context, e *engine, set Settings, c container.InspectResponse) error {
	name := strings.TrimPrefix(c.Name, "/")
	from := c.Config.Labels[labelDevcontainer]
	if set.DevcontainerFile == "" {
		if from != "" {
			p.opts.Logger.Warn(fmt.Sprintf("sandbox %s runs the environment a repository's %s gave it, not the profile's own image: `amelia sandbox down -p %s` to go back to that",
				c.Config.Labels[labelProfile], from, c.Config.Labels[labelProfile]), "container", name)
		} else {
			p.noteStale(ctx, e, set, c)
		}
		return nil
	}
	pl, err := p.plan(ctx, e, set)
	if err != nil {
		return err
	}
	if c.Config.Labels[labelEnvironment] == environment(pl, set) {
		return nil
	}
	made := "the profile's own image"
	if from != "" {
		made = "the environment of " + from + " as it was then (or another repository's)"
	}
	profile := c.Config.Labels[labelProfile]
	return sdk.Errorf(sdk.ErrConflict, "sandbox %s (container %s) was made with %s, not the one this repository's %s asks for; amelia does not replace a sandbox that may hold other runs' work: remove it with `amelia sandbox down -p %s` once nothing in it is needed (amelia sandbox ls), then run again, or set docker.devcontainer: off",
		profile, name, made, set.DevcontainerFile, profile)
}

// noteStale logs when a running sandbox's image is not the one a new
// container would get (amelia or its base changed since it was created).
// It runs on every reuse, so it only looks where that is cheap: not for a
// ready image, nor for a profile's own Dockerfile, whose plan hashes its
// whole build context.
func (p *Provider) noteStale(ctx context.Context, e *engine, set Settings, c container.InspectResponse) {
	have := c.Config.Labels[labelImageHash]
	if have == "" || set.Image != "" || set.Dockerfile != "" {
		return
	}
	if pl, err := p.plan(ctx, e, set); err == nil && pl.hash != have {
		p.opts.Logger.Info("the sandbox runs an older image; `amelia sandbox down` then up to use the current one",
			"container", strings.TrimPrefix(c.Name, "/"), "image", c.Config.Image, "current", pl.tag)
	}
}

// workdirVolume puts the sandbox's workdir, where the repository and the
// runs' checkouts are, on an anonymous volume of the container's own
// (filled from the image's workdir when the container is made, removed
// with it by Teardown): a directory of the engine's filesystem, not the
// container's copy-on-write layer. Through a storage driver in user space
// (fuse-overlayfs, as rootless and some hosts run) every file a checkout
// writes or removes costs a round trip to that process; on overlay2 a
// large removal costs less there too. It holds nothing of the host's.
var workdirVolume = mount.Mount{Type: mount.TypeVolume, Target: image.Workdir}

func sandboxOf(spec sdk.Spec, id, img, hash string) sdk.Sandbox {
	ref := spec.SandboxRef
	ref.ID = id
	// tini (or the engine's init), PID 1, ends the container on SIGTERM
	// from the watchdog, which runs as the same user: the container stays,
	// stopped, with its volume.
	details := map[string]string{"container": containerName(spec.Name), "image": img, "network": string(networkMode(spec.Network.Mode)), sdk.DetailStop: sdk.StopInit}
	if hash != "" {
		details["image-hash"] = hash
	}
	return sdk.Sandbox{Ref: ref, Workdir: image.Workdir, Details: details, Worker: sdk.WorkerPlace{Preinstalled: []string{image.WorkerPath}}}
}

// inspectOwned finds the sandbox's container; one that is missing, or not
// Amelia's, is ErrNotFound.
func (p *Provider) inspectOwned(ctx context.Context, e *engine, ref sdk.SandboxRef) (container.InspectResponse, error) {
	res, err := e.cli.ContainerInspect(ctx, containerRef(ref), client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return container.InspectResponse{}, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist (no container %s)", ref.Name, containerName(ref.Name))
	}
	if err != nil {
		return container.InspectResponse{}, e.wrap(err, "inspect container "+containerName(ref.Name))
	}
	if _, ok := res.Container.Config.Labels[labelProfile]; !ok {
		return container.InspectResponse{}, sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist: the container %s was not created by Amelia", ref.Name, containerName(ref.Name))
	}
	return res.Container, nil
}

// Teardown force-removes the sandbox's container and its anonymous
// volumes. A container of that name that Amelia did not create is refused,
// never removed.
func (p *Provider) Teardown(ctx context.Context, ref sdk.SandboxRef) error {
	set, err := decodeSettings(ref.Config)
	if err != nil {
		return err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return err
	}
	name := containerName(ref.Name)
	res, err := e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return e.wrap(err, "inspect container "+name)
	}
	if _, ok := res.Container.Config.Labels[labelProfile]; !ok {
		return sdk.Errorf(sdk.ErrConflict, "refusing to remove container %s: Amelia did not create it", name)
	}
	e.sessions.forget(name)
	e.sessions.forget(res.Container.ID)
	_, err = e.cli.ContainerRemove(ctx, res.Container.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !strings.Contains(err.Error(), "already in progress") {
		return e.wrap(err, "remove container "+name)
	}
	p.opts.Logger.Info("removed sandbox container", "container", name)
	return nil
}

// healthTimeout bounds HealthCheck's exec, well inside sdk.HealthCheckTimeout.
const healthTimeout = 5 * time.Second

// HealthCheck: ready when the container runs and an exec of `true` answers
// in time.
func (p *Provider) HealthCheck(ctx context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	set, err := decodeSettings(ref.Config)
	if err != nil {
		return sdk.Health{}, err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return sdk.Health{}, err
	}
	c, err := p.inspectOwned(ctx, e, ref)
	if err != nil {
		return sdk.Health{}, err
	}
	switch state := health(c.State.Status); state {
	case sdk.HealthReady:
	default:
		msg := "container " + containerName(ref.Name) + " is " + string(c.State.Status)
		if at, err := time.Parse(time.RFC3339Nano, c.State.FinishedAt); c.State.Status == container.StateExited && err == nil && !at.IsZero() {
			msg += " since " + at.UTC().Format(time.RFC3339)
		}
		return sdk.Health{State: state, Message: msg}, nil
	}
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	code, out, err := e.run(hctx, c.ID, set.User, []string{"true"})
	if err != nil || code != 0 {
		return sdk.Health{State: sdk.HealthUnhealthy, Message: fmt.Sprintf("container %s runs, but `true` did not answer: %v%s", containerName(ref.Name), err, out)}, nil
	}
	return sdk.Health{State: sdk.HealthReady, Message: "container " + containerName(ref.Name) + " (" + c.ID[:12] + ")"}, nil
}

// health maps a container state to a sandbox's.
func health(s container.ContainerState) sdk.HealthState {
	switch s {
	case container.StateRunning:
		return sdk.HealthReady
	case container.StateCreated, container.StateExited, container.StatePaused:
		return sdk.HealthStopped
	}
	return sdk.HealthUnhealthy
}

// List finds the sandbox containers on the settings' engine that carry
// every label asked for, running or not (a crash can leave them Created or
// Exited).
func (p *Provider) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	set, err := decodeSettings(req.Config)
	if err != nil {
		return nil, err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return nil, err
	}
	f := make(client.Filters).Add("label", labelProfile).Add("name", containerPrefix)
	for k, v := range req.Labels {
		f.Add("label", k+"="+v)
	}
	res, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, e.wrap(err, "list sandbox containers")
	}
	var out []sdk.Listed
	for _, c := range res.Items {
		var name string
		for _, n := range c.Names {
			if s, ok := strings.CutPrefix(n, "/"+containerPrefix); ok && sdk.ValidName(s) {
				name = s
			}
		}
		if name == "" {
			continue
		}
		labels := map[string]string{}
		for k, v := range c.Labels {
			if strings.HasPrefix(k, labelPrefix) {
				labels[k] = v
			}
		}
		out = append(out, sdk.Listed{
			Ref:     sdk.SandboxRef{Name: name, ID: c.ID, Config: req.Config},
			Labels:  labels,
			State:   health(c.State),
			Created: time.Unix(c.Created, 0),
		})
	}
	return out, nil
}

// BuildImage builds the sandbox image of the settings (a profile's
// sandbox.docker block) and returns its tag, streaming the build's output to
// progress; with noCache, every step runs again. An image that is up to
// date is not built again unless noCache.
func (p *Provider) BuildImage(ctx context.Context, settings []byte, noCache bool, progress io.Writer) (string, error) {
	set, err := decodeSettings(settings)
	if err != nil {
		return "", err
	}
	if set.Image != "" {
		return "", sdk.Errorf(sdk.ErrInvalid, "docker.image %q is a ready image: amelia builds nothing for it", set.Image)
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return "", err
	}
	pl, err := p.plan(ctx, e, set)
	if err != nil {
		return "", err
	}
	built, err := p.buildIfMissing(ctx, e, pl, noCache, progress)
	if err == nil && !built {
		fmt.Fprintf(progress, "%s is up to date\n", pl.tag)
	}
	return pl.tag, err
}

// Close closes the engine connections; the SDK calls it when the plugin
// stops. Running execs end with their streams.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, e := range p.engines {
		e.sessions.forget("")
		_ = e.cli.Close()
		delete(p.engines, k)
	}
	return nil
}
