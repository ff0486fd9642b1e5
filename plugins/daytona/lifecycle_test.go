package daytona_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// How the provider copes with what Daytona's API does beyond its OpenAPI
// file (see daytonatest's daytona_test.go for the fake doing it): one
// test per behaviour. The fake runs on the host backend here: these are
// about the API, and the gateway logs in to it all the same.

// client is a client of the fake's API: another Daytona user.
func client(t *testing.T, f *daytonatest.Fake) *api.Client {
	t.Helper()
	c, err := api.New(api.Options{BaseURL: f.URL(), APIKey: f.APIKey()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// count is how many requests the fake got with that method and path.
func count(f *daytonatest.Fake, method, path string) int { return len(requests(f, method, path)) }

// waitUntil polls cond until it holds, failing the test if done says
// first that the call it waits beside has returned.
func waitUntil[T any](t *testing.T, done <-chan T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case r := <-done:
			t.Fatalf("returned before %s: %+v", what, r)
		case <-time.After(10 * time.Millisecond): // polling interval
		}
	}
}

// `sandbox down` while a start or stop is in flight waits for it and
// deletes the sandbox: Daytona refuses (409) to delete while a state
// change is pending. The fake holds every transition where it is until
// the test has seen Teardown wait, whatever the machine's speed.
func TestTeardownWaitsOutATransition(t *testing.T) {
	f, cfg := startWith(t, daytonatest.Options{}, nil)
	t.Cleanup(f.ReleaseTransitions)
	p := newProvider(t)
	sb, err := p.EnsureRunning(t.Context(), spec("busy", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	// Teardown of ref while the sandbox id is in the middle of a
	// transition: it looks twice, and so waits, before the transition may
	// end; then it deletes the sandbox.
	tearDownAmid := func(what, id string, ref sdk.SandboxRef) {
		t.Helper()
		looked := count(f, "GET", "/api/sandbox/"+id)
		done := make(chan error, 1)
		go func() { done <- newProvider(t).Teardown(t.Context(), ref) }()
		waitUntil(t, done, "the "+what+" ended", func() bool { return count(f, "GET", "/api/sandbox/"+id) >= looked+2 })
		f.ReleaseTransitions()
		if err := <-done; err != nil {
			t.Fatalf("Teardown while %s: %v", what, err)
		}
		if got, _ := f.Sandbox(id); got.State != api.StateDestroyed {
			t.Errorf("after Teardown while %s: %s", what, got.State)
		}
	}
	f.HoldTransitions()
	if _, err := client(t, f).StopSandbox(t.Context(), sb.Ref.ID); err != nil {
		t.Fatal(err)
	}
	tearDownAmid("stopping", sb.Ref.ID, sb.Ref)

	// Another amelia is creating it: Teardown waits, then deletes.
	f.HoldTransitions()
	created, err := client(t, f).CreateSandbox(t.Context(), api.CreateSandbox{Name: "creating", Labels: map[string]string{daytona.LabelSandbox: "creating"}})
	if err != nil {
		t.Fatal(err)
	}
	tearDownAmid("creating", created.ID, sdk.SandboxRef{Name: "creating", Config: cfg})

	// Bounded by the context all the same: the creation never ends here.
	f.HoldTransitions()
	other, err := client(t, f).CreateSandbox(t.Context(), api.CreateSandbox{Name: "bounded", Labels: map[string]string{daytona.LabelSandbox: "bounded"}})
	if err != nil {
		t.Fatal(err)
	}
	// Cancelled once it has looked twice: it was waiting.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	looked := count(f, "GET", "/api/sandbox/"+other.ID)
	done := make(chan error, 1)
	go func() {
		done <- newProvider(t).Teardown(ctx, sdk.SandboxRef{Name: "bounded", ID: other.ID, Config: cfg})
	}()
	waitUntil(t, done, "the creation ended", func() bool { return count(f, "GET", "/api/sandbox/"+other.ID) >= looked+2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "still creating") {
		t.Errorf("Teardown past its context: %v", err)
	}
}

// A sandbox being deleted (desiredState destroyed, its state kept, as the
// list shows it) is gone: not adopted, not listed; a new one is made. The
// fake holds the deletion half done until the new one is being created.
func TestBeingDeletedIsGone(t *testing.T) {
	f, cfg := startWith(t, daytonatest.Options{ListLag: 100 * time.Millisecond}, nil)
	t.Cleanup(f.ReleaseTransitions)
	first, err := newProvider(t).EnsureRunning(t.Context(), spec("doomed", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, f)
	f.HoldTransitions()
	if err := c.DeleteSandbox(t.Context(), first.Ref.ID); err != nil {
		t.Fatal(err)
	}
	// Until the list shows it still started, with desiredState destroyed.
	for {
		l, err := c.ListSandboxes(t.Context(), map[string]string{daytona.LabelSandbox: "doomed"})
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 1 && l[0].State == api.StateStarted && l[0].DesiredState == api.DesiredDestroyed {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	p := newProvider(t) // knows nothing of it: reads the list
	listed, err := p.List(t.Context(), sdk.ListRequest{Config: cfg, Labels: map[string]string{"amelia.profile": "doomed"}})
	if err != nil || len(listed) != 0 {
		t.Errorf("List shows the sandbox being deleted: %+v, %v", listed, err)
	}
	if _, err := p.HealthCheck(t.Context(), sdk.SandboxRef{Name: "doomed", Config: cfg}); !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("HealthCheck of the sandbox being deleted: %v, want not found", err)
	}
	type result struct {
		sb  sdk.Sandbox
		err error
	}
	done := make(chan result, 1)
	go func() {
		sb, err := p.EnsureRunning(t.Context(), spec("doomed", cfg, sdk.NetworkOpen))
		done <- result{sb, err}
	}()
	// Its new sandbox is created beside the one still being deleted; then
	// both go on.
	waitUntil(t, done, "creating a new sandbox", func() bool { return count(f, "POST", "/api/sandbox") == 2 })
	if got, _ := f.Sandbox(first.Ref.ID); got.State == api.StateDestroyed {
		t.Fatal("the first sandbox is destroyed while the fake holds its deletion")
	}
	f.ReleaseTransitions()
	r := <-done
	if r.err != nil || !r.sb.Created || r.sb.Ref.ID == first.Ref.ID {
		t.Fatalf("EnsureRunning beside the sandbox being deleted: %+v, %v; want a new one", r.sb, r.err)
	}
}

// A sandbox created a moment ago is found by GET (by name) although the
// list, which lags, does not show it yet: no second create. The fake's
// list is held, as when its index lags, whatever the machine's speed.
func TestFindsWhatTheListLacks(t *testing.T) {
	f, cfg := startWith(t, daytonatest.Options{}, nil)
	f.HoldList()
	first, err := newProvider(t).EnsureRunning(t.Context(), spec("fresh", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := client(t, f).ListSandboxes(t.Context(), nil); err != nil || len(l) != 0 {
		t.Fatalf("the held list shows it (%v, %v): the test proves nothing", l, err)
	}
	again, err := newProvider(t).EnsureRunning(t.Context(), spec("fresh", cfg, sdk.NetworkOpen))
	if err != nil || again.Created || again.Ref.ID != first.Ref.ID {
		t.Fatalf("second EnsureRunning: %+v, %v; want the same sandbox", again, err)
	}
	if n := count(f, "POST", "/api/sandbox"); n != 1 {
		t.Errorf("%d creates, want 1", n)
	}
}

// List answers what this process made or removed a moment ago, which the
// list, lagging, does not show (or still shows).
func TestListReconcilesTheLaggingList(t *testing.T) {
	// No lag of its own: the test holds the list's index where it wants
	// it behind (HoldList), so the list lags however long each step
	// takes on this machine.
	f, cfg := startWith(t, daytonatest.Options{ListLag: -1}, nil)
	p := newProvider(t)
	c := client(t, f)
	mine := map[string]string{"amelia.profile": "lagging"}
	listed := func() []api.Sandbox {
		t.Helper()
		raw, err := c.ListSandboxes(t.Context(), mine)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}

	f.HoldList()
	sb, err := p.EnsureRunning(t.Context(), spec("lagging", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	if raw := listed(); len(raw) != 0 {
		t.Fatalf("Daytona's held list shows the new sandbox (%v): the test proves nothing", raw)
	}
	got, err := p.List(t.Context(), sdk.ListRequest{Config: cfg, Labels: mine})
	if err != nil || len(got) != 1 || got[0].Ref.ID != sb.Ref.ID || got[0].State != sdk.HealthReady {
		t.Fatalf("List right after EnsureRunning: %+v, %v", got, err)
	}
	if other, err := p.List(t.Context(), sdk.ListRequest{Config: cfg, Labels: map[string]string{"amelia.profile": "other"}}); err != nil || len(other) != 0 {
		t.Errorf("List with other labels: %+v, %v", other, err)
	}

	f.ReleaseList()
	if raw := listed(); len(raw) != 1 {
		t.Fatalf("Daytona's list, caught up, shows %v, want the sandbox", raw)
	}
	f.HoldList()
	if err := p.Teardown(t.Context(), sb.Ref); err != nil {
		t.Fatal(err)
	}
	if raw := listed(); len(raw) != 1 {
		t.Fatalf("Daytona's held list no longer shows the removed sandbox (%v): the test proves nothing", raw)
	}
	if got, err := p.List(t.Context(), sdk.ListRequest{Config: cfg, Labels: mine}); err != nil || len(got) != 0 {
		t.Errorf("List right after Teardown: %+v, %v", got, err)
	}
}

// An amelia that loses the race to create a profile's sandbox to another
// (Daytona answers its create 409) uses the other's sandbox, though for a
// while Daytona's lookup by name answers 404 (its cache keeps the miss of
// the first look until the new sandbox first changes state) and its list
// does not show it either.
func TestCreateRaceLostToAnotherAmelia(t *testing.T) {
	f, cfg := startWith(t, daytonatest.Options{}, nil)
	c := client(t, f)
	// The other amelia's sandbox stays as it is created, in state
	// creating, and out of the list, until the test lets it go on.
	f.HoldTransitions()
	t.Cleanup(f.ReleaseTransitions)
	f.HoldList()
	if _, err := c.GetSandbox(t.Context(), "raced"); api.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("the other amelia's look: %v, want 404", err)
	}
	other, err := c.CreateSandbox(t.Context(), api.CreateSandbox{Name: "raced", Labels: map[string]string{daytona.LabelSandbox: "raced", "amelia.profile": "raced"}})
	if err != nil {
		t.Fatal(err)
	}

	p := newProvider(t)
	type result struct {
		sb  sdk.Sandbox
		err error
	}
	done := make(chan result, 1)
	go func() {
		sb, err := p.EnsureRunning(t.Context(), spec("raced", cfg, sdk.NetworkOpen))
		done <- result{sb, err}
	}()
	// Its create answered 409, and its look by name after it 404.
	waitUntil(t, done, "the other's sandbox could be found", func() bool {
		return count(f, "POST", "/api/sandbox") >= 2 && count(f, "GET", "/api/sandbox/raced") >= 3
	})
	f.ReleaseTransitions()
	r := <-done
	if r.err != nil || r.sb.Created || r.sb.Ref.ID != other.ID {
		t.Fatalf("EnsureRunning that lost the race: %+v, %v; want the other's sandbox %s, not created", r.sb, r.err, other.ID)
	}
}

// Start's answer is not taken as the sandbox's state: it is polled until
// started. A stop in flight is waited out before the start.
func TestStartIsPolled(t *testing.T) {
	// Daytona's start answers after at most 30 s, started or not; a
	// short wait makes it answer before the sandbox is started.
	f, cfg := startWith(t, daytonatest.Options{
		StartDelay:      time.Second,
		StartWait:       10 * time.Millisecond,
		Snapshots:       map[string]string{"vm": "amelia-base:bookworm"},
		SnapshotClasses: map[string]string{"vm": api.ClassLinuxVM},
	}, nil)
	sb, err := newProvider(t).EnsureRunning(t.Context(), spec("polled", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, f)
	f.StopSandbox(sb.Ref.ID)
	again, err := newProvider(t).EnsureRunning(t.Context(), spec("polled", cfg, sdk.NetworkOpen))
	if err != nil || again.Details["state"] != "started" {
		t.Fatalf("EnsureRunning on the stopped sandbox: %+v, %v", again, err)
	}
	if got, _ := f.Sandbox(sb.Ref.ID); got.State != api.StateStarted {
		t.Errorf("EnsureRunning returned with the sandbox %s", got.State)
	}
	starts := count(f, "POST", "/api/sandbox/"+sb.Ref.ID+"/start")
	if starts != 1 {
		t.Errorf("%d starts, want 1", starts)
	}

	// Stopping when EnsureRunning comes: no start until it is stopped.
	if _, err := c.StopSandbox(t.Context(), sb.Ref.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := newProvider(t).EnsureRunning(t.Context(), spec("polled", cfg, sdk.NetworkOpen)); err != nil {
		t.Fatalf("EnsureRunning while it stops: %v", err)
	}
	if got, _ := f.Sandbox(sb.Ref.ID); got.State != api.StateStarted {
		t.Errorf("EnsureRunning returned with the sandbox %s", got.State)
	}
	if n := count(f, "POST", "/api/sandbox/"+sb.Ref.ID+"/start") - starts; n != 1 {
		t.Errorf("%d starts while it stopped, want 1 once it had", n)
	}

	// A paused VM's start answers it paused still, with desiredState
	// started (SandboxDto maps no pending change from paused): started
	// once, then waited for.
	vmCfg := withSetting(t, cfg, "snapshot", "vm")
	vm, err := newProvider(t).EnsureRunning(t.Context(), spec("polled-vm", vmCfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	f.PauseSandbox(vm.Ref.ID)
	if _, err := newProvider(t).EnsureRunning(t.Context(), spec("polled-vm", vmCfg, sdk.NetworkOpen)); err != nil {
		t.Fatalf("EnsureRunning on the paused VM: %v", err)
	}
	if n := count(f, "POST", "/api/sandbox/"+vm.Ref.ID+"/start"); n != 1 {
		t.Errorf("%d starts of the paused VM, want 1", n)
	}
}

// A paused sandbox is started as Daytona allows: a VM's start resumes it;
// another's is refused (422), so it is stopped (Daytona stops a paused
// sandbox), then started.
func TestPausedSandbox(t *testing.T) {
	f, cfg := startWith(t, daytonatest.Options{
		Snapshots:       map[string]string{"vm": "amelia-base:bookworm"},
		SnapshotClasses: map[string]string{"vm": api.ClassLinuxVM},
	}, nil)
	for _, c := range []struct {
		name, snapshot string
		starts, stops  int
	}{
		{"container", "", 2, 1},
		{"vm", "vm", 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := cfg
			if c.snapshot != "" {
				cfg = withSetting(t, cfg, "snapshot", c.snapshot)
			}
			p := newProvider(t)
			sb, err := p.EnsureRunning(t.Context(), spec("paused-"+c.name, cfg, sdk.NetworkOpen))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := run(t, p, sb.Ref, "echo kept > kept.txt"); err != nil {
				t.Fatal(err)
			}
			f.PauseSandbox(sb.Ref.ID)
			if h, err := p.HealthCheck(t.Context(), sb.Ref); err != nil || h.State != sdk.HealthStopped {
				t.Errorf("health of the paused sandbox: %+v, %v", h, err)
			}
			if _, err := newProvider(t).EnsureRunning(t.Context(), spec("paused-"+c.name, cfg, sdk.NetworkOpen)); err != nil {
				t.Fatalf("EnsureRunning on the paused sandbox: %v", err)
			}
			if got, _ := f.Sandbox(sb.Ref.ID); got.State != api.StateStarted {
				t.Errorf("state after EnsureRunning: %s", got.State)
			}
			if n := count(f, "POST", "/api/sandbox/"+sb.Ref.ID+"/stop"); n != c.stops {
				t.Errorf("%d stops, want %d", n, c.stops)
			}
			if n := count(f, "POST", "/api/sandbox/"+sb.Ref.ID+"/start"); n != c.starts {
				t.Errorf("%d starts, want %d", n, c.starts)
			}
			if out, _, err := run(t, newProvider(t), sb.Ref, "cat kept.txt"); err != nil || out != "kept\n" {
				t.Errorf("the file written before the pause: %q, %v", out, err)
			}
		})
	}
}

// withSetting is a daytona settings block with key set to value.
func withSetting(t *testing.T, cfg json.RawMessage, key string, value any) json.RawMessage {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(cfg, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
