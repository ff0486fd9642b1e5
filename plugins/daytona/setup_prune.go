package daytona

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

var _ sdk.SetupPruner = (*Provider)(nil)

// PruneSetups deletes the setup snapshots (amelia-setup-<hash>) of the
// account that req.Spec's profile of req.Spec's config file built (their
// Dockerfile's scope lines say so: a snapshot built before those lines
// is no profile's, and stays), past req.OlderThan, that are the current
// setup of neither req.Spec nor req.Others, and that no sandbox of the
// account, in any state, was created from.
func (p *Provider) PruneSetups(ctx context.Context, req sdk.PruneRequest) ([]sdk.PrunedSetup, error) {
	profile, config := req.Spec.Labels["amelia.profile"], req.Spec.Labels["amelia.config"]
	if profile == "" || config == "" {
		return nil, sdk.Errorf(sdk.ErrInvalid, "prune the setups of sandbox %s: its spec names no profile and config file, which say whose setups they are", req.Spec.Name)
	}
	if req.OlderThan <= 0 {
		return nil, sdk.Errorf(sdk.ErrInvalid, "prune the setups of profile %s: give a positive age", profile)
	}
	r, err := p.account(req.Spec.Config)
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, spec := range append([]sdk.Spec{req.Spec}, req.Others...) {
		if len(spec.Setup) == 0 {
			continue
		}
		sr, err := p.account(spec.Config)
		if err != nil {
			return nil, fmt.Errorf("prune the setups of profile %s: tell the current setup of sandbox %s: %w", profile, spec.Name, err)
		}
		name, _, err := p.setupSnapshot(ctx, sr, spec)
		if errors.Is(err, sdk.ErrInvalid) {
			continue // a setup it cannot have: none current
		}
		if err != nil {
			return nil, fmt.Errorf("prune the setups of profile %s: tell the current setup of sandbox %s: %w", profile, spec.Name, err)
		}
		keep[name] = true
	}
	snaps, err := r.acct.api.ListSnapshots(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the Daytona snapshots: %w", err)
	}
	// What the account's sandboxes, whoever made them, were created from.
	sbs, err := r.acct.api.ListSandboxes(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list the Daytona sandboxes: %w", err)
	}
	used := map[string]bool{}
	for _, sb := range sbs {
		used[sb.Snapshot] = true
	}
	now := time.Now()
	var out []sdk.PrunedSetup
	for _, s := range snaps {
		if s.General || !strings.HasPrefix(s.Name, setupSnapshotPrefix) || keep[s.Name] || s.BuildInfo == nil {
			continue
		}
		if sp, sc := scopeOf(s.BuildInfo.DockerfileContent); sp != profile || sc != config {
			continue
		}
		age := now.Sub(s.CreatedAt)
		if s.CreatedAt.IsZero() || age <= req.OlderThan {
			continue
		}
		ps := sdk.PrunedSetup{Ref: s.Name, Age: age}
		switch {
		case used[s.Name] || used[s.ID]:
			ps.Left = "a sandbox was created from it (amelia stop removes a sandbox)"
		case !req.DryRun:
			if err := r.acct.api.DeleteSnapshot(ctx, s.ID); err != nil {
				if errors.Is(err, sdk.ErrNotFound) {
					continue
				}
				return out, fmt.Errorf("delete Daytona snapshot %s: %w", s.Name, err)
			}
		}
		out = append(out, ps)
	}
	return out, nil
}
