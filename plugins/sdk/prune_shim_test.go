package sdk_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

type pruningProvider struct {
	*stubProvider
	got sdk.PruneRequest
	res []sdk.PrunedSetup
}

func (p *pruningProvider) PruneSetups(_ context.Context, req sdk.PruneRequest) ([]sdk.PrunedSetup, error) {
	p.got = req
	return p.res, nil
}

// A prune request and its answer cross the plugin boundary whole; a
// provider without SetupPruner is ErrUnsupported on the host.
func TestPruneSetupsCrossesTheBoundary(t *testing.T) {
	spec := func(name, profile string) sdk.Spec {
		return sdk.Spec{SandboxRef: sdk.SandboxRef{Name: name, Config: []byte(`{}`)}, Network: sdk.NetworkPolicy{Mode: sdk.NetworkNone},
			Labels: map[string]string{"amelia.profile": profile, "amelia.config": "/c.yaml"},
			Setup:  []sdk.SetupCommand{{Name: "deps", Argv: []string{"make", "deps"}}}}
	}
	p := &pruningProvider{stubProvider: &stubProvider{}, res: []sdk.PrunedSetup{
		{Ref: "amelia-setup:0123", Age: 20 * 24 * time.Hour},
		{Ref: "amelia-setup:4567", Age: 30 * 24 * time.Hour, Left: "a container was created from it"},
	}}
	c := serve(t, p, 0)
	req := sdk.PruneRequest{Spec: spec("dev-1", "dev"), Others: []sdk.Spec{spec("ci-2", "ci")}, OlderThan: 14 * 24 * time.Hour, DryRun: true}
	got, err := c.PruneSetups(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p.res) {
		t.Errorf("the answer: %+v, want %+v", got, p.res)
	}
	if p.got.OlderThan != req.OlderThan || !p.got.DryRun || p.got.Spec.Name != "dev-1" || p.got.Spec.Labels["amelia.profile"] != "dev" ||
		len(p.got.Others) != 1 || p.got.Others[0].Name != "ci-2" || len(p.got.Others[0].Setup) != 1 {
		t.Errorf("the request the provider got: %+v", p.got)
	}

	if _, err := serve(t, &stubProvider{}, 0).PruneSetups(t.Context(), req); !errors.Is(err, sdk.ErrUnsupported) {
		t.Errorf("a provider without SetupPruner: %v, want ErrUnsupported", err)
	}
	req.OlderThan = 0
	if _, err := c.PruneSetups(t.Context(), req); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("no age: %v, want ErrInvalid", err)
	}
}
