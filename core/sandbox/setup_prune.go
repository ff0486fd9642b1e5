package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// ErrNoPruner is PruneSetups' error for a provider that keeps no setups
// (it runs them in each sandbox) or cannot remove them.
var ErrNoPruner = errors.New("the provider keeps no setups it could prune")

// PruneSetups has the provider remove the setups it kept for this
// profile (sdk.SetupPruner) that are older than olderThan and that
// neither this profile nor any of others (the config's other profiles:
// those on this provider count) starts from now; with dry it removes
// nothing. It returns each such setup, with why it stays when it does.
func (s *Sandbox) PruneSetups(ctx context.Context, others []*config.Profile, olderThan time.Duration, dry bool) ([]sdk.PrunedSetup, error) {
	p, ok := s.Provider.(sdk.SetupPruner)
	if !ok {
		return nil, ErrNoPruner
	}
	req := sdk.PruneRequest{Spec: s.Spec(), OlderThan: olderThan, DryRun: dry}
	for _, op := range others {
		if op.Name == s.Profile.Name || op.Sandbox.Provider != s.Profile.Sandbox.Provider {
			continue
		}
		settings, err := Settings(op)
		if err != nil {
			return nil, err
		}
		o := *s
		o.Profile, o.Ref = op, sdk.SandboxRef{Name: Name(op, s.owner), Config: settings}
		req.Others = append(req.Others, o.Spec())
	}
	res, err := p.PruneSetups(ctx, req)
	if errors.Is(err, sdk.ErrUnsupported) {
		return nil, ErrNoPruner
	}
	if err != nil {
		return res, fmt.Errorf("prune the setups of profile %s (provider %s): %w", s.Profile.Name, s.Info.Name, err)
	}
	return res, nil
}
