package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// LocalBase reports, for `amelia init`, the engine a docker block without
// host or context reaches (DOCKER_HOST, else the current docker context),
// and a base image that engine already holds to build the sandbox image
// FROM: the bootstrapped image.TestBase, else image.DefaultBase. It pulls
// nothing. Holding neither is an error matching sdk.ErrNotFound that says
// how to make one, with base the one Bootstrap makes.
func (p *Provider) LocalBase(ctx context.Context) (engine, base string, err error) {
	e, err := p.engine(ctx, Settings{})
	if err != nil {
		return "", "", err
	}
	candidates := []string{image.TestBase, image.DefaultBase}
	for _, c := range candidates {
		if ok, err := hasImage(ctx, e, c); err != nil {
			return e.host, "", err
		} else if ok {
			return e.host, c, nil
		}
	}
	return e.host, image.TestBase, sdk.Errorf(sdk.ErrNotFound,
		"the Docker engine at %s holds none of %v to build the sandbox image from: pull one, or make %s from Debian's packages with `amelia init --bootstrap` (needs mmdebstrap and root or sudo)",
		e.host, candidates, image.TestBase)
}

// Bootstrap makes image.TestBase from Debian's packages with the embedded
// bootstrap-base.sh (mmdebstrap, then docker import), writing its output
// to out. It does nothing when the engine has it already. It runs on this
// machine, with the docker CLI, and needs root or sudo.
func (p *Provider) Bootstrap(ctx context.Context, out io.Writer) error {
	cmd := exec.CommandContext(ctx, "bash", "-s", "base")
	cmd.Stdin = bytes.NewReader(image.Bootstrap)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bootstrap %s: %w", image.TestBase, err)
	}
	return nil
}

// Preflight tells why EnsureRunning(spec) would fail now, creating and
// changing nothing: an engine that does not answer; a container of that
// name that is not this spec's (another config file's, another network's,
// not Amelia's, another devcontainer's); or, with no container, an image to make it from that the
// engine lacks: docker.image, or the base the sandbox image is built FROM
// when that image is not built yet.
func (p *Provider) Preflight(ctx context.Context, spec sdk.Spec) error {
	set, err := decodeSettings(spec.Config)
	if err != nil {
		return err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return err
	}
	name := containerName(spec.Name)
	res, err := e.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	switch {
	case err == nil:
		if err := checkOwned(res.Container, spec); err != nil {
			return err
		}
		return p.checkEnvironment(ctx, e, set, res.Container)
	case !cerrdefs.IsNotFound(err):
		return e.wrap(err, "inspect container "+name)
	}
	pl, err := p.plan(ctx, e, set)
	if err != nil {
		return err
	}
	if pl.ready == "" {
		if built, err := hasImage(ctx, e, pl.tag); err != nil || built {
			return err // a built sandbox image needs nothing more
		}
	}
	ref, err := missing(ctx, e, pl)
	switch {
	case err != nil || ref == "":
		return err
	case pl.ready == "":
		return &missingBase{base: ref, host: e.host, profile: profileOf(spec)}
	}
	return sdk.Errorf(sdk.ErrNotFound, "docker.image %s is not on the Docker engine at %s (the first start would pull it): docker pull %s", ref, e.host, ref)
}
