package daytona

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// A profile's setup (sdk.Spec.Setup) is kept as a Daytona snapshot built
// from a Dockerfile: FROM the profile's base (daytona.image, or the image
// of daytona.snapshot), one RUN per command, as the sandbox user
// (Daytona's default, daytona) in its home. The snapshot is named
// amelia-setup-<hash of the Dockerfile>, so a change of the commands or
// the base names another; Daytona makes a name once (409 for the others),
// so of several processes preparing it one builds it and the others wait.
// Sandboxes of the profile are then created from the snapshot.

// setupUser is the user Daytona runs a sandbox as when the request names
// none (sandbox.service.ts: createSandboxDto.user || 'daytona'), which
// this provider never does.
const setupUser = "daytona"

// setupSnapshotPrefix starts the name of a setup's snapshot.
const setupSnapshotPrefix = "amelia-setup-"

// setupStepEnv names the command a RUN line runs, so that the builder's
// error for a failed one ("The command '...' returned a non-zero code:
// N") says which.
const setupStepEnv = "AMELIA_SETUP_STEP"

// setupDockerfile is the Dockerfile of spec's setup on base.
func setupDockerfile(base string, set Settings, setup []sdk.SetupCommand) string {
	home := "/home/" + setupUser
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\nUSER root\n", base)
	// As Daytona's runner makes the sandbox user when the image lacks it.
	line, _ := json.Marshal([]string{"sh", "-c", fmt.Sprintf("id -u %[1]s >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/bash %[1]s", setupUser)})
	fmt.Fprintf(&b, "RUN %s\nUSER %s\n", line, setupUser)
	for i, c := range setup {
		argv := []string{"env", setupStepEnv + "=" + strconv.Itoa(i+1), "HOME=" + home}
		for _, k := range slices.Sorted(maps.Keys(set.Env)) {
			argv = append(argv, k+"="+set.Env[k])
		}
		argv = append(argv, "sh", "-c", `cd "$HOME" && exec "$@"`, "sh")
		argv = append(argv, c.Argv...)
		line, _ := json.Marshal(argv)
		fmt.Fprintf(&b, "RUN %s\n", line)
	}
	b.WriteString("USER root\n")
	return b.String()
}

// setupBase is the image the setup's snapshot is built FROM.
func (p *Provider) setupBase(ctx context.Context, r resolved) (string, error) {
	switch {
	case r.set.Image != "":
		return r.set.Image, nil
	case r.set.Snapshot != "":
		s, err := r.acct.api.GetSnapshot(ctx, r.set.Snapshot)
		if err != nil {
			return "", fmt.Errorf("find the image of daytona.snapshot %s, which sandbox.setup builds on: %w", r.set.Snapshot, err)
		}
		if s.ImageName != "" {
			return s.ImageName, nil
		}
		if s.Ref != "" {
			return s.Ref, nil
		}
		return "", sdk.Errorf(sdk.ErrInvalid, "daytona.snapshot %s names no image that sandbox.setup could build on: set daytona.image instead", r.set.Snapshot)
	}
	return "", sdk.Errorf(sdk.ErrInvalid, "sandbox.setup on daytona builds a snapshot FROM the profile's image: set daytona.image (or daytona.snapshot) to the base to build on")
}

// setupSnapshot is the name and Dockerfile of spec's setup snapshot.
func (p *Provider) setupSnapshot(ctx context.Context, r resolved, spec sdk.Spec) (string, string, error) {
	base, err := p.setupBase(ctx, r)
	if err != nil {
		return "", "", err
	}
	df := setupDockerfile(base, r.set, spec.Setup)
	sum := sha256.Sum256([]byte(df))
	return setupSnapshotPrefix + hex.EncodeToString(sum[:])[:16], scoped(df, spec), nil
}

// Scope lines, comments of a setup's Dockerfile after its FROM, say which
// profile of which config file made the snapshot (PruneSetups' scope).
// They are not part of the name: profiles with the same setup share one.
const (
	scopeProfile = "# amelia.setup.profile="
	scopeConfig  = "# amelia.setup.config="
)

// scoped is dockerfile with spec's scope lines after its first line.
func scoped(dockerfile string, spec sdk.Spec) string {
	profile, config := spec.Labels["amelia.profile"], spec.Labels["amelia.config"]
	if profile == "" || config == "" || strings.ContainsAny(profile+config, "\r\n") {
		return dockerfile
	}
	from, rest, _ := strings.Cut(dockerfile, "\n")
	return from + "\n" + scopeProfile + profile + "\n" + scopeConfig + config + "\n" + rest
}

// scopeOf is the profile and config file a setup's Dockerfile names.
func scopeOf(dockerfile string) (profile, config string) {
	for l := range strings.Lines(dockerfile) {
		l = strings.TrimRight(l, "\n")
		if v, ok := strings.CutPrefix(l, scopeProfile); ok {
			profile = v
		} else if v, ok := strings.CutPrefix(l, scopeConfig); ok {
			config = v
		}
	}
	return profile, config
}

// Prepare builds the snapshot of spec's setup unless Daytona has it.
func (p *Provider) Prepare(ctx context.Context, spec sdk.Spec) (sdk.Prepared, error) {
	r, err := p.account(spec.Config)
	if err != nil {
		return sdk.Prepared{}, err
	}
	name, df, err := p.setupSnapshot(ctx, r, spec)
	if err != nil {
		return sdk.Prepared{}, err
	}
	made, err := p.prepareSnapshot(ctx, r, spec, name, df)
	if err != nil {
		return sdk.Prepared{}, err
	}
	return sdk.Prepared{UpToDate: !made, Ref: name}, nil
}

// prepareSnapshot makes the snapshot name from dockerfile unless it is
// active already, and waits until it is; it reports whether it made it.
// One that failed to build is deleted: by the process that made it, which
// reports which command failed, or, left by a process that died, by the
// next one, which builds it again.
func (p *Provider) prepareSnapshot(ctx context.Context, r resolved, spec sdk.Spec, name, dockerfile string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	mine := false
	wait := 50 * time.Millisecond
	last := api.SnapshotState("")
	for {
		s, err := r.acct.api.GetSnapshot(ctx, name)
		switch {
		case errors.Is(err, sdk.ErrNotFound):
			sdk.Progress(p.opts.Logger, fmt.Sprintf("sandbox %s: building its setup as Daytona snapshot %s (%d commands)", spec.Name, name, len(spec.Setup)))
			_, err := r.acct.api.CreateSnapshot(ctx, api.CreateSnapshot{
				Name: name, BuildInfo: &api.CreateBuildInfo{DockerfileContent: dockerfile},
				CPU: r.set.CPU, Memory: r.set.Memory, Disk: r.set.Disk,
			})
			switch {
			case err == nil:
				mine = true
				// Daytona builds them all in one go: what it runs.
				for i, c := range spec.Setup {
					sdk.Progress(p.opts.Logger, fmt.Sprintf("setup %d/%d: %s", i+1, len(spec.Setup), c))
				}
				continue
			case api.StatusOf(err) != http.StatusConflict: // 409: another process made it
				return false, fmt.Errorf("create Daytona snapshot %s: %w", name, err)
			}
		case err != nil:
			return false, fmt.Errorf("look for Daytona snapshot %s: %w", name, err)
		case s.State == api.SnapshotActive:
			return mine, nil
		case s.State.Failed():
			dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			derr := r.acct.api.DeleteSnapshot(dctx, s.ID)
			dcancel()
			if derr != nil && !errors.Is(derr, sdk.ErrNotFound) {
				p.opts.Logger.Warn("delete the Daytona snapshot whose build failed", "snapshot", name, "error", derr)
			}
			if mine {
				return false, setupFailure(spec, name, s)
			}
			p.opts.Logger.Info("removed a Daytona setup snapshot whose build had failed; building it again", "snapshot", name, "reason", s.ErrorReason)
			continue
		default:
			if s.State != last {
				sdk.Progress(p.opts.Logger, fmt.Sprintf("Daytona snapshot %s: %s", name, s.State))
				last = s.State
			}
		}
		if err := pause(ctx, &wait, p.opts.PollInterval); err != nil {
			return false, fmt.Errorf("wait for Daytona snapshot %s (%s): %w; raise daytona.start_timeout for slow setups", name, last, err)
		}
	}
}

// builderFailure is the builder's message for a RUN that failed.
var builderFailure = regexp.MustCompile(`returned a non-zero code: (\d+)`)

// setupStep finds the command a failed RUN ran (setupStepEnv).
var setupStep = regexp.MustCompile(setupStepEnv + `=(\d+)`)

// setupFailure says which command of a snapshot that failed to build
// failed, and how, from its error reason.
func setupFailure(spec sdk.Spec, name string, s api.Snapshot) error {
	reason := strings.Join(strings.Fields(s.ErrorReason), " ")
	m, step := builderFailure.FindStringSubmatch(reason), setupStep.FindStringSubmatch(reason)
	if m != nil && step != nil {
		n, _ := strconv.Atoi(step[1])
		code, _ := strconv.Atoi(m[1])
		if n >= 1 && n <= len(spec.Setup) {
			return &sdk.SetupError{Index: n - 1, Command: spec.Setup[n-1], Status: sdk.ExitStatus{Code: code}}
		}
	}
	return fmt.Errorf("the setup's Daytona snapshot %s could not be built (%s): %s; nothing of the setup was kept", name, s.State, reason)
}
