package sdktest

import (
	"errors"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Lifecycle group.

func (k *kit) infoCase(t T) {
	info, err := k.p.Info(k.ctx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name == "" {
		t.Errorf("Info.Name is empty")
	}
	found := false
	for _, v := range info.APIVersions {
		found = found || v == sdk.APIVersion
	}
	if !found {
		t.Errorf("Info.APIVersions = %v, want it to include %d", info.APIVersions, sdk.APIVersion)
	}
	if !info.Supports(k.cfg.Network) {
		t.Errorf("Info.EgressModes = %v, but the kit runs with network %q", info.EgressModes, k.cfg.Network)
	}
}

func (k *kit) ensureIdempotent(t T) {
	sb := k.ensure(t, "idem")
	if !sb.Created {
		t.Errorf("first EnsureRunning of a new sandbox: Created = false, want true")
	}
	if !strings.HasPrefix(sb.Workdir, "/") {
		t.Errorf("Workdir = %q, want an absolute path", sb.Workdir)
	}
	again, err := k.p.EnsureRunning(k.ctx(t), k.spec(sb.Ref.Name))
	if err != nil {
		t.Fatalf("second EnsureRunning: %v", err)
	}
	if again.Created {
		t.Errorf("second EnsureRunning: Created = true, want false (the sandbox was reused)")
	}
	if again.Ref.ID != sb.Ref.ID || again.Workdir != sb.Workdir {
		t.Errorf("second EnsureRunning gave %+v / %q, first gave %+v / %q", again.Ref.ID, again.Workdir, sb.Ref.ID, sb.Workdir)
	}
}

func (k *kit) health(t T) {
	start := time.Now()
	h, err := k.p.HealthCheck(k.ctx(t), k.sb.Ref)
	if err != nil {
		t.Fatalf("HealthCheck: %v", err)
	}
	if h.State != sdk.HealthReady {
		t.Errorf("HealthCheck of a running sandbox = %+v, want ready", h)
	}
	if d := time.Since(start); d > sdk.HealthCheckTimeout {
		t.Errorf("HealthCheck took %v, longer than its %v bound", d, sdk.HealthCheckTimeout)
	}
}

func (k *kit) teardown(t T) {
	sb := k.ensure(t, "down")
	ctx := k.ctx(t)
	if err := k.p.Teardown(ctx, sb.Ref); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if err := k.p.Teardown(ctx, sb.Ref); err != nil {
		t.Errorf("second Teardown: %v, want nil", err)
	}
	_, err := k.p.Exec(ctx, sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{})
	if !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("Exec after Teardown: %v, want an error matching sdk.ErrNotFound", err)
	}
	if _, err := k.p.HealthCheck(ctx, sb.Ref); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("HealthCheck after Teardown: %v, want an error matching sdk.ErrNotFound", err)
	}
}

// A sandbox torn down is gone with its files: EnsureRunning of its name
// makes a new one, empty, where commands run.
func (k *kit) ensureAfterTeardown(t T) {
	sb := k.ensure(t, "again")
	const leftover = "amelia-sdktest-leftover"
	if r := k.run(k.ctx(t), t, k.in(sb, sh("echo old > "+leftover)), nil); r.st.Code != 0 {
		t.Fatalf("write a file in the sandbox: exit %+v, stderr %q", r.st, r.stderr)
	}
	if err := k.p.Teardown(k.ctx(t), sb.Ref); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	again, err := k.p.EnsureRunning(k.ctx(t), k.spec(sb.Ref.Name))
	if err != nil {
		t.Fatalf("EnsureRunning after Teardown: %v", err)
	}
	k.teardownAtEnd(t, again.Ref)
	if !again.Created {
		t.Errorf("EnsureRunning after Teardown: Created = false, want true (the old sandbox is gone)")
	}
	r := k.run(k.ctx(t), t, k.in(again, sh("if test -e "+leftover+"; then echo left; else echo gone; fi")), nil)
	if got := string(r.stdout); got != "gone\n" || r.st.Code != 0 {
		t.Errorf("a file of the sandbox before Teardown, in the new one: %q (exit %+v), want gone", got, r.st)
	}
}
