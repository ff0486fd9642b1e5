package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// LocalBase reports, for `amelia init`, the engine the settings (a
// profile's docker block) reach, and a base image that engine already
// holds to build the sandbox image FROM: the settings' base_image when
// they name one, else the bootstrapped image.TestBase, else
// image.DefaultBase. It pulls nothing. Holding none is an error matching
// sdk.ErrNotFound that says how to make one.
func (p *Provider) LocalBase(ctx context.Context, settings []byte) (engine, base string, err error) {
	set, err := decodeSettings(settings)
	if err != nil {
		return "", "", err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return "", "", err
	}
	candidates := []string{image.TestBase, image.DefaultBase}
	if set.BaseImage != image.DefaultBase {
		candidates = []string{set.BaseImage} // the profile's own choice
	}
	for _, c := range candidates {
		if _, err := e.cli.ImageInspect(ctx, c); err == nil {
			return e.host, c, nil
		}
	}
	return e.host, "", sdk.Errorf(sdk.ErrNotFound,
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
