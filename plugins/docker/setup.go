package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// A profile's setup (sdk.Spec.Setup) is kept as an image: a container
// made from the sandbox image runs the commands, and is committed as
// amelia-setup:<hash>, the hash covering the sandbox image's id, the
// user, the environment and the commands. Sandboxes of the profile are
// created from that image, so they start set up; a change of any of those
// names another image, which the next start makes.
const (
	setupRepo = "amelia-setup"
	// labelSetup is on a prepared image and on the sandboxes made from
	// it: the setup's hash.
	labelSetup = "amelia.setup"
	// labelSetupProfile and labelSetupConfig are on a prepared image:
	// the profile, and the config file, that prepared it (the scope of
	// PruneSetups). Not amelia.profile: the container that prepares it
	// is no sandbox.
	labelSetupProfile = "amelia.setup.profile"
	labelSetupConfig  = "amelia.setup.config"
	// setupPrefix starts the name of the container that prepares a
	// setup: amelia-setup-<hash>. The engine gives a name to one
	// container only, so of several processes preparing the same setup,
	// one makes it and the others wait for it.
	setupPrefix = "amelia-setup-"
	// setupTail is how much of a failed command's output its error keeps.
	setupTail = 4 << 10
)

// setupLabels are the labels of the container that prepares spec's
// setup hash, which its image keeps.
func setupLabels(spec sdk.Spec, hash string) map[string]string {
	l := map[string]string{labelSetup: hash, labelCreated: time.Now().UTC().Format(time.RFC3339)}
	if v := spec.Labels[labelProfile]; v != "" {
		l[labelSetupProfile] = v
	}
	if v := spec.Labels[labelConfig]; v != "" {
		l[labelSetupConfig] = v
	}
	return l
}

// setupPlan is the image a setup makes, and what from.
type setupPlan struct {
	base imagePlan // the sandbox image it starts from
	hash string
	tag  string // amelia-setup:<hash>
}

// planSetup works out the setup's image, building (or pulling) the
// sandbox image it starts from when the engine lacks it: its id is part
// of the hash, so a new base makes a new setup.
func (p *Provider) planSetup(ctx context.Context, e *engine, set Settings, setup []sdk.SetupCommand) (setupPlan, error) {
	pl, err := p.ensureImage(ctx, e, set)
	if err != nil {
		return setupPlan{}, err
	}
	return setupHash(ctx, e, pl, set, setup)
}

// setupHash is the setup's image on the base pl, which the engine has.
func setupHash(ctx context.Context, e *engine, pl imagePlan, set Settings, setup []sdk.SetupCommand) (setupPlan, error) {
	img, err := e.cli.ImageInspect(ctx, pl.tag)
	if err != nil {
		return setupPlan{}, e.wrap(err, "inspect image "+pl.tag)
	}
	h := sha256.New()
	fmt.Fprintf(h, "amelia setup v1\x00base %s\x00user %s\x00", img.ID, set.User)
	for _, k := range slices.Sorted(maps.Keys(set.Env)) {
		fmt.Fprintf(h, "env %s=%s\x00", k, set.Env[k])
	}
	for _, c := range setup {
		fmt.Fprintf(h, "command %d\x00", len(c.Argv))
		for _, a := range c.Argv {
			fmt.Fprintf(h, "%d:%s\x00", len(a), a)
		}
	}
	hash := hex.EncodeToString(h.Sum(nil))[:16]
	return setupPlan{base: pl, hash: hash, tag: setupRepo + ":" + hash}, nil
}

// Prepare makes the image of spec's setup unless the engine has it.
func (p *Provider) Prepare(ctx context.Context, spec sdk.Spec) (sdk.Prepared, error) {
	set, err := decodeSettings(spec.Config)
	if err != nil {
		return sdk.Prepared{}, err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return sdk.Prepared{}, err
	}
	sp, err := p.planSetup(ctx, e, set, spec.Setup)
	if mb := (*missingBase)(nil); errors.As(err, &mb) {
		mb.profile = profileOf(spec)
	}
	if err != nil {
		return sdk.Prepared{}, err
	}
	made, err := p.prepare(ctx, e, set, spec, sp)
	if err != nil {
		return sdk.Prepared{}, err
	}
	return sdk.Prepared{UpToDate: !made, Ref: sp.tag, Details: map[string]string{"base": sp.base.tag}}, nil
}

// prepare makes the setup's image unless the engine has it, and reports
// whether it made it. One that another process is making is waited for.
func (p *Provider) prepare(ctx context.Context, e *engine, set Settings, spec sdk.Spec, sp setupPlan) (bool, error) {
	name := setupPrefix + sp.hash
	var w *watch
	defer func() {
		if w != nil {
			w.stop()
		}
	}()
	told := false
	for {
		if ok, err := hasImage(ctx, e, sp.tag); err != nil || ok {
			return false, err
		}
		err := p.runSetup(ctx, e, set, spec, sp, name)
		if !errors.Is(err, errSetupBusy) {
			return err == nil, err
		}
		if w == nil {
			w = e.watch(ctx, name) // then look again at once
			continue
		}
		if !told {
			sdk.Progress(p.opts.Logger, fmt.Sprintf("sandbox %s: another process is preparing its setup (container %s); waiting for it", spec.Name, name))
			told = true
		}
		if _, err := w.next(ctx); err != nil {
			return false, fmt.Errorf("sandbox %s: wait for the setup another process is preparing (container %s): %w", spec.Name, name, err)
		}
	}
}

// errSetupBusy is a setup container that another process is running.
var errSetupBusy = errors.New("another process is preparing this setup")

// runSetup makes the setup's image in a container named name: it runs
// the commands one after another and commits the container once all have
// succeeded. The container's main process reads its stdin, which this
// process holds: if this process dies, the container ends, and the next
// prepare removes what is left. Whatever happens, the container goes;
// the image is tagged only when every command succeeded.
func (p *Provider) runSetup(ctx context.Context, e *engine, set Settings, spec sdk.Spec, sp setupPlan, name string) error {
	env := make([]string, 0, len(set.Env))
	for _, k := range slices.Sorted(maps.Keys(set.Env)) {
		env = append(env, k+"="+set.Env[k])
	}
	pids := set.Resources.Pids
	cfg := &container.Config{
		Image:      sp.base.tag,
		User:       set.User,
		Env:        env,
		Labels:     setupLabels(spec, sp.hash),
		Entrypoint: []string{"sh", "-c", "exec cat >/dev/null"},
		Cmd:        []string{},
		OpenStdin:  true,
		StdinOnce:  true,
	}
	init := true
	host := &container.HostConfig{
		// Setup installs things: it gets the engine's default network,
		// as an image build's RUN does, whatever the profile's policy
		// for the agent's sandbox.
		NetworkMode: "bridge",
		Init:        &init,
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges"},
		Resources: container.Resources{
			NanoCPUs:  int64(set.Resources.CPUs * 1e9),
			Memory:    int64(set.Resources.Memory),
			PidsLimit: &pids,
		},
	}
	res, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Config: cfg, HostConfig: host})
	if cerrdefs.IsConflict(err) {
		return p.setupConflict(ctx, e, name)
	}
	if err != nil {
		return e.wrap(err, "create setup container "+name)
	}
	defer func() {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), internalTimeout)
		defer cancel()
		_, _ = e.cli.ContainerRemove(rmCtx, res.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}()
	att, err := e.cli.ContainerAttach(ctx, res.ID, client.ContainerAttachOptions{Stream: true, Stdin: true})
	if err != nil {
		return e.wrap(err, "attach to setup container "+name)
	}
	defer att.Close()
	if _, err := e.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return e.wrap(err, "start setup container "+name)
	}
	sdk.Progress(p.opts.Logger, fmt.Sprintf("sandbox %s: preparing its setup (%d commands) on %s", spec.Name, len(spec.Setup), sp.base.tag))
	for i, c := range spec.Setup {
		sdk.Progress(p.opts.Logger, fmt.Sprintf("setup %d/%d: %s", i+1, len(spec.Setup), c))
		start := time.Now()
		st, tail, err := p.runSetupCommand(ctx, e, res.ID, set.User, c.Argv)
		if err != nil {
			return fmt.Errorf("setup command %d (%s): %w; nothing of the setup was kept", i+1, c, err)
		}
		if st.Code != 0 {
			return &sdk.SetupError{Index: i, Command: c, Status: st, Tail: tail}
		}
		p.opts.Logger.Info("setup command done", "command", c.String(), "took", time.Since(start).Round(time.Millisecond))
	}
	// Committed as it runs (the engine pauses it meanwhile): a container
	// that does not run is one whose process died, which another prepare
	// removes.
	if _, err := e.cli.ContainerCommit(ctx, res.ID, client.ContainerCommitOptions{
		Reference: sp.tag,
		Comment:   "amelia: the setup of sandbox " + spec.Name,
		Changes:   []string{`ENTRYPOINT []`, `CMD ["sleep", "infinity"]`},
	}); err != nil {
		return e.wrap(err, "commit setup container "+name+" as "+sp.tag)
	}
	sdk.Progress(p.opts.Logger, fmt.Sprintf("sandbox %s: setup prepared as %s", spec.Name, sp.tag))
	return nil
}

// setupConflict looks at the setup container that holds name: one that
// runs is another process's setup under way (errSetupBusy); one that
// does not was left by a process that died, and is removed, after which
// the caller tries again (errSetupBusy too).
func (p *Provider) setupConflict(ctx context.Context, e *engine, name string) error {
	res, err := e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err):
		return errSetupBusy // gone meanwhile: look again
	case err != nil:
		return e.wrap(err, "inspect setup container "+name)
	}
	if st := res.Container.State; st != nil && (st.Running || st.Status == container.StateCreated && time.Since(created(res.Container)) < internalTimeout) {
		return errSetupBusy
	}
	p.opts.Logger.Info("removing a setup container a process that died left", "container", name)
	_, err = e.cli.ContainerRemove(ctx, res.Container.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return e.wrap(err, "remove setup container "+name)
	}
	return errSetupBusy
}

func created(c container.InspectResponse) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, c.Created)
	return t
}

// runSetupCommand runs one setup command in the setup container, in the
// user's home directory, its output to the log (debug) and the end of it
// kept for a failure's message.
func (p *Provider) runSetupCommand(ctx context.Context, e *engine, id, user string, argv []string) (sdk.ExitStatus, string, error) {
	cmd := append([]string{"sh", "-c", `cd "${HOME:-/}" 2>/dev/null || cd /; exec "$@"`, "sh"}, argv...)
	out := &tailLog{logWriter: logWriter{log: p.opts.Logger}}
	code, err := e.runTo(ctx, id, user, cmd, out)
	if err != nil {
		return sdk.ExitStatus{}, "", err
	}
	return sdk.ExitStatus{Code: code}, out.tail(), nil
}

// tailLog logs a command's output lines at debug, and keeps its end.
type tailLog struct {
	logWriter
	end []byte
}

func (t *tailLog) Write(b []byte) (int, error) {
	t.end = append(t.end, b...)
	if len(t.end) > 2*setupTail {
		t.end = append(t.end[:0], t.end[len(t.end)-setupTail:]...)
	}
	return t.logWriter.Write(b)
}

func (t *tailLog) tail() string {
	b := t.end
	if len(b) > setupTail {
		b = b[len(b)-setupTail:]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// setupOf is the setup's image for a new sandbox of spec: prepared first
// when the engine lacks it.
func (p *Provider) setupOf(ctx context.Context, e *engine, set Settings, spec sdk.Spec) (setupPlan, error) {
	sp, err := p.planSetup(ctx, e, set, spec.Setup)
	if err != nil {
		return sp, err
	}
	_, err = p.prepare(ctx, e, set, spec, sp)
	return sp, err
}
