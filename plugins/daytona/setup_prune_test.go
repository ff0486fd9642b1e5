package daytona_test

import (
	"slices"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// PruneSetups deletes the old setup snapshots of the profile that the
// profile no longer starts from, and only those: not its current one,
// however old, not another profile's (nor another config file's), not
// one a sandbox was created from, not a young one; a dry run deletes
// nothing.
func TestPruneSetupsDeletesOnlyTheProfilesOldSnapshots(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, map[string]any{"image": image.TestBase})
	p := newProvider(t)
	mk := func(profile, config, line string) (sdk.Spec, string) {
		t.Helper()
		s := spec(profile, cfg, sdk.NetworkNone)
		s.Labels["amelia.config"] = config
		s.Setup = []sdk.SetupCommand{appendLine(line)}
		res, err := p.Prepare(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		return s, res.Ref
	}
	n := nonce()
	_, old := mk("dev", "cfg1", "old "+n)
	_, inUse := mk("dev", "cfg1", "in use "+n)
	_, young := mk("dev", "cfg1", "young "+n)
	current, cur := mk("dev", "cfg1", "current "+n)
	_, otherProfile := mk("other", "cfg1", "other profile "+n)
	_, otherConfig := mk("dev", "cfg2", "other config "+n)

	// A sandbox made from the in-use setup (the profile's setup then).
	was := current
	was.Setup = []sdk.SetupCommand{appendLine("in use " + n)}
	sb, err := p.EnsureRunning(t.Context(), was)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Teardown(t.Context(), sb.Ref) })
	if sb.Details["setup"] != inUse {
		t.Fatalf("the sandbox was made from %q, want %s", sb.Details["setup"], inUse)
	}

	month := time.Now().Add(-30 * 24 * time.Hour)
	for _, name := range []string{old, inUse, cur, otherProfile, otherConfig} {
		if !f.AgeSnapshot(name, month) {
			t.Fatalf("no snapshot %s in the fake", name)
		}
	}
	req := sdk.PruneRequest{Spec: current, OlderThan: 14 * 24 * time.Hour, DryRun: true}
	dry, err := p.PruneSetups(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{old: "", inUse: "a sandbox was created from it (amelia stop removes a sandbox)"}
	check := func(what string, got []sdk.PrunedSetup) {
		t.Helper()
		seen := map[string]string{}
		for _, ps := range got {
			seen[ps.Ref] = ps.Left
			if ps.Age < 29*24*time.Hour {
				t.Errorf("%s: %s is %s old, want 30 days", what, ps.Ref, ps.Age)
			}
		}
		if len(seen) != len(want) || seen[old] != want[old] || seen[inUse] != want[inUse] {
			t.Errorf("%s: %+v, want %s removed and %s left", what, got, old, inUse)
		}
	}
	check("dry run", dry)
	for _, name := range []string{old, inUse, young, cur, otherProfile, otherConfig} {
		if _, ok := f.Snapshots()[name]; !ok {
			t.Errorf("the dry run deleted %s", name)
		}
	}

	req.DryRun = false
	done, err := p.PruneSetups(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	check("prune", done)
	var left []string
	for name := range f.Snapshots() {
		left = append(left, name)
	}
	slices.Sort(left)
	wantLeft := []string{inUse, young, cur, otherProfile, otherConfig}
	slices.Sort(wantLeft)
	if !slices.Equal(left, wantLeft) {
		t.Errorf("snapshots after the prune: %v, want %v", left, wantLeft)
	}

	// The other profile's current setup stays when it is named among
	// the others, even for its own prune.
	otherSpec := spec("other", cfg, sdk.NetworkNone)
	otherSpec.Labels["amelia.config"] = "cfg1"
	otherSpec.Setup = []sdk.SetupCommand{appendLine("other profile " + n)}
	if res, err := p.PruneSetups(t.Context(), sdk.PruneRequest{Spec: otherSpec, Others: []sdk.Spec{current}, OlderThan: time.Hour}); err != nil || len(res) != 0 {
		t.Errorf("prune of the other profile, whose only setup is current: %+v %v", res, err)
	}
	if _, ok := f.Snapshots()[otherProfile]; !ok {
		t.Errorf("the other profile's current setup %s went", otherProfile)
	}
}
