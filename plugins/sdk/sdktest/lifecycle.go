package sdktest

import (
	"errors"
	"strings"
	"sync"
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

// Callers is how many connections the ConcurrentEnsureRunningConverges
// case ensures one sandbox from at once: as many as runs of one profile
// started together. With Config.Command each is a plugin process of its
// own, as each amelia run has.
const Callers = 10

// Runs of a profile started together ensure its sandbox from several
// processes at once, before it exists: every one of them must succeed, in
// the same sandbox, which exactly one of them created; no caller may fail
// because another is creating it, nor make a second one.
func (k *kit) concurrentEnsure(t T) {
	name := freshName("together")
	spec := k.spec(name)
	// Torn down by name, whatever the callers got: also after a failure.
	k.teardownAtEnd(t, spec.SandboxRef)
	callers := make([]conn, Callers)
	for i := range callers {
		callers[i] = connect(t, k.cfg)
	}
	ctx := k.ctx(t)
	got := make([]sdk.Sandbox, len(callers))
	errs := make([]error, len(callers))
	begin := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range callers {
		wg.Go(func() {
			<-begin
			got[i], errs[i] = c.EnsureRunning(ctx, spec)
		})
	}
	close(begin)
	wg.Wait()

	created := 0
	var first *sdk.Sandbox
	for i, err := range errs {
		if err != nil {
			t.Errorf("caller %d of %d: EnsureRunning(%s) while the others ensured it too: %v", i+1, len(callers), name, err)
			continue
		}
		sb := got[i]
		if sb.Created {
			created++
		}
		if first == nil {
			first = &got[i]
		} else if sb.Ref.ID != first.Ref.ID || sb.Workdir != first.Workdir {
			t.Errorf("caller %d of %d got sandbox %q (workdir %q), another got %q (workdir %q): one sandbox, or two?", i+1, len(callers), sb.Ref.ID, sb.Workdir, first.Ref.ID, first.Workdir)
		}
	}
	if first == nil {
		t.Fatalf("no caller of %d got the sandbox", len(callers))
	}
	if created != 1 {
		t.Errorf("%d of the %d callers say they created the sandbox (Created), want exactly 1: the others must find and reuse it", created, len(callers))
	}
	// The sandbox they share works.
	if r := k.run(ctx, t, k.in(*first, sh("echo together")), nil); r.st.Code != 0 || string(r.stdout) != "together\n" {
		t.Errorf("a command in the sandbox the callers share: exit %+v, stdout %q, stderr %q", r.st, r.stdout, r.stderr)
	}
}
