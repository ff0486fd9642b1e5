package sdktest

import (
	"errors"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Lister group: the optional sdk.Lister. A provider without one
// answers ErrUnsupported, and the cases say so as they skip.

// needsLister skips the case when the provider has no List.
func (k *kit) needsLister(t T) {
	t.Helper()
	mine := map[string]string{"amelia.sdktest-run": k.runID}
	if _, err := k.p.List(k.ctx(t), sdk.ListRequest{Config: k.cfg.Settings, Labels: mine}); errors.Is(err, sdk.ErrUnsupported) {
		t.Skipf("the provider does not implement sdk.Lister (List: %v): nothing to check", err)
	}
}

// listedAs is the listing of the sandbox named name among the sandboxes of
// this run, or nil.
func (k *kit) listedAs(t T, name string) *sdk.Listed {
	t.Helper()
	mine := map[string]string{"amelia.sdktest-run": k.runID}
	found, err := k.p.List(k.ctx(t), sdk.ListRequest{Config: k.cfg.Settings, Labels: mine})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got *sdk.Listed
	for i, f := range found {
		if f.Labels["amelia.sdktest-run"] != k.runID {
			t.Errorf("List(labels %v) gave %s with labels %v", mine, f.Ref.Name, f.Labels)
		}
		if f.Ref.Name == name {
			got = &found[i]
		}
	}
	return got
}

// A sandbox is listed by the labels it was made with, carrying them all,
// as ready, by a ref that reaches it; a label no sandbox carries lists
// none.
func (k *kit) listed(t T) {
	k.needsLister(t)
	sb := k.ensure(t, "list")
	got := k.listedAs(t, sb.Ref.Name)
	if got == nil {
		t.Fatalf("List(labels amelia.sdktest-run=%s) does not include %s", k.runID, sb.Ref.Name)
	}
	if want := k.spec(sb.Ref.Name).Labels; !(sdk.ListRequest{Labels: want}).Matches(got.Labels) {
		t.Errorf("listed labels %v, want all of those EnsureRunning was given: %v", got.Labels, want)
	}
	if got.State != sdk.HealthReady {
		t.Errorf("listed state of a running sandbox %q, want ready", got.State)
	}
	ctx := k.ctx(t)
	if h, err := k.p.HealthCheck(ctx, got.Ref); err != nil || h.State != sdk.HealthReady {
		t.Errorf("HealthCheck by the listed ref: %+v, %v; want ready", h, err)
	}
	other, err := k.p.List(ctx, sdk.ListRequest{Config: k.cfg.Settings, Labels: map[string]string{"amelia.sdktest-run": "not-" + k.runID}})
	if err != nil || len(other) != 0 {
		t.Errorf("List with a label no sandbox carries = %v, %v; want none", other, err)
	}
}

// A sandbox torn down is no longer listed.
func (k *kit) notListedAfterTeardown(t T) {
	k.needsLister(t)
	sb := k.ensure(t, "unlist")
	if k.listedAs(t, sb.Ref.Name) == nil {
		t.Fatalf("List(labels amelia.sdktest-run=%s) does not include %s (see ListedWithLabels)", k.runID, sb.Ref.Name)
	}
	if err := k.p.Teardown(k.ctx(t), sb.Ref); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got := k.listedAs(t, sb.Ref.Name); got != nil {
		t.Errorf("List after Teardown still lists %s (labels %v, state %q)", sb.Ref.Name, got.Labels, got.State)
	}
}
