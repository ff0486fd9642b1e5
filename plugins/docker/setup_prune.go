package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

var _ sdk.SetupPruner = (*Provider)(nil)

// PruneSetups removes the amelia-setup images that req.Spec's profile of
// req.Spec's config file prepared (labelled so: images made before those
// labels are no profile's, and stay), that are past req.OlderThan, are
// the current setup of neither req.Spec nor req.Others, and that no
// container, running or not, was created from.
func (p *Provider) PruneSetups(ctx context.Context, req sdk.PruneRequest) ([]sdk.PrunedSetup, error) {
	profile, config := req.Spec.Labels[labelProfile], req.Spec.Labels[labelConfig]
	if profile == "" || config == "" {
		return nil, sdk.Errorf(sdk.ErrInvalid, "prune the setups of sandbox %s: its spec names no profile and config file, which say whose setups they are", req.Spec.Name)
	}
	if req.OlderThan <= 0 {
		return nil, sdk.Errorf(sdk.ErrInvalid, "prune the setups of profile %s: give a positive age", profile)
	}
	set, err := decodeSettings(req.Spec.Config)
	if err != nil {
		return nil, err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, spec := range append([]sdk.Spec{req.Spec}, req.Others...) {
		h, err := p.currentSetup(ctx, e, spec)
		if err != nil {
			return nil, fmt.Errorf("prune the setups of profile %s: tell the current setup of sandbox %s: %w", profile, spec.Name, err)
		}
		if h != "" {
			keep[h] = true
		}
	}
	imgs, err := e.cli.ImageList(ctx, client.ImageListOptions{Filters: make(client.Filters).
		Add("reference", setupRepo).
		Add("label", labelSetupProfile+"="+profile).
		Add("label", labelSetupConfig+"="+config)})
	if err != nil {
		return nil, e.wrap(err, "list the setup images")
	}
	// The images containers were created from, whatever their state:
	// the sandboxes made from a setup, a setup container under way.
	used := map[string]bool{}
	ctrs, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, e.wrap(err, "list the containers")
	}
	for _, c := range ctrs.Items {
		used[c.ImageID] = true
	}
	now := time.Now()
	var out []sdk.PrunedSetup
	for _, img := range imgs.Items {
		hash := img.Labels[labelSetup]
		if hash == "" || keep[hash] {
			continue
		}
		// Made when its labels say (as a sandbox's age is told), else when
		// the engine made it.
		made := time.Unix(img.Created, 0)
		if t, err := time.Parse(time.RFC3339, img.Labels[labelCreated]); err == nil {
			made = t
		}
		age := now.Sub(made)
		if age <= req.OlderThan {
			continue
		}
		refs := slices.DeleteFunc(slices.Clone(img.RepoTags), func(t string) bool { return !strings.HasPrefix(t, setupRepo+":") })
		if len(refs) == 0 {
			continue
		}
		ps := sdk.PrunedSetup{Ref: strings.Join(refs, ", "), Age: age}
		switch {
		case used[img.ID]:
			ps.Left = "a container was created from it (amelia stop removes a sandbox)"
		case !req.DryRun:
			// By id, not forced: the engine refuses an image a container
			// was created from meanwhile.
			if _, err := e.cli.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{PruneChildren: true}); err != nil {
				if cerrdefs.IsNotFound(err) {
					continue
				}
				if cerrdefs.IsConflict(err) {
					ps.Left = "the engine keeps it: " + oneLine(err.Error())
					break
				}
				return out, e.wrap(err, "remove setup image "+ps.Ref)
			}
		}
		out = append(out, ps)
	}
	return out, nil
}

// currentSetup is the hash of spec's setup as a new sandbox of it would
// have it, without building or pulling anything: "" when spec has no
// setup, or the engine lacks its base image (a setup of the base as it
// was is then no sandbox's to start from: the base's id is in the hash).
func (p *Provider) currentSetup(ctx context.Context, e *engine, spec sdk.Spec) (string, error) {
	if len(spec.Setup) == 0 {
		return "", nil
	}
	set, err := decodeSettings(spec.Config)
	if err != nil {
		return "", err
	}
	pl, err := p.plan(ctx, e, set)
	if err != nil {
		return "", err
	}
	sp, err := setupHash(ctx, e, pl, set, spec.Setup)
	if err != nil {
		if errors.Is(err, sdk.ErrNotFound) {
			return "", nil
		}
		return "", err
	}
	return sp.hash, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
