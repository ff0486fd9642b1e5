package daytonatest

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// The behaviours of Daytona's API that its OpenAPI file does not tell,
// read in its source (apps/api, v0.190.0): one test each.

// A new SSH access token revokes the sandbox's others
// (sandbox.service.ts createSshAccess): logins with them are refused,
// connections made with them stay up.
func TestMintRevokesOtherTokens(t *testing.T) {
	t.Parallel()
	// Its commands must report their exit: no exit-status loss here.
	f := Start(t, noLoss())
	e := newEnv(t, f)
	sb, _ := e.started(t, api.CreateSandbox{})
	first := e.token(t, sb.ID)
	c, err := dial(f, first)
	if err != nil {
		t.Fatalf("log in with the first token: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	// The gateway checks a token after the handshake that dial waits for:
	// a command run proves the login was let in before the next token
	// revokes this one.
	if r := run(t, c, "echo in", ""); r.stdout != "in\n" {
		t.Fatalf("the login with the first token: %+v", r)
	}
	second := e.token(t, sb.ID)
	if v := e.validate(t, first); v.Valid {
		t.Errorf("the first token is still valid after the second was made: %+v", v)
	}
	refused(t, f, first, "the token a newer one replaced")
	if r := run(t, c, "echo up", ""); r.stdout != "up\n" {
		t.Errorf("the connection made with the replaced token: %+v", r)
	}
	if r := run(t, e.loginWith(t, second), "echo second", ""); r.stdout != "second\n" {
		t.Errorf("the second token: %+v", r)
	}

	// The escape hatch keeps them all.
	keep := Start(t, Options{KeepOtherTokens: true})
	ke := newEnv(t, keep)
	ksb, _ := ke.started(t, api.CreateSandbox{})
	a, b := ke.token(t, ksb.ID), ke.token(t, ksb.ID)
	if !ke.validate(t, a).Valid || !ke.validate(t, b).Valid {
		t.Errorf("KeepOtherTokens: a token was revoked")
	}
}

// DELETE while a state change is pending answers 409 with Daytona's body
// (sandbox.service.ts destroy, StateChangeInProgressError), except while
// a build waits.
func TestDeleteRefusedWhilePending(t *testing.T) {
	t.Parallel()
	// Transitions held in the middle, whatever the machine's speed.
	f := Start(t, Options{})
	t.Cleanup(f.ReleaseTransitions)
	e := newEnv(t, f)
	f.HoldTransitions()
	created := e.create(t, api.CreateSandbox{})
	st, _, b := e.raw(t, "DELETE", f.URL()+"/sandbox/"+created.ID, nil, nil)
	var body api.ErrorBody
	if err := json.Unmarshal(b, &body); err != nil {
		t.Fatal(err)
	}
	if st != http.StatusConflict || body.StatusCode != 409 || body.Message != "Sandbox state change in progress" || body.Error != "Conflict" {
		t.Errorf("delete while creating: %d %s", st, b)
	}
	f.ReleaseTransitions()
	e.waitState(t, created.ID, api.StateStarted)
	f.HoldTransitions()
	if _, err := e.c.StopSandbox(context.Background(), created.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteSandbox(context.Background(), created.ID); api.StatusOf(err) != http.StatusConflict {
		t.Errorf("delete while stopping: %v, want 409", err)
	}
	f.ReleaseTransitions()
	e.waitState(t, created.ID, api.StateStopped)
	if err := e.c.DeleteSandbox(context.Background(), created.ID); err != nil {
		t.Errorf("delete once stopped: %v", err)
	}

	build := e.create(t, api.CreateSandbox{BuildInfo: &api.CreateBuildInfo{DockerfileContent: "FROM amelia-base:bookworm"}})
	if build.State != api.StatePendingBuild {
		t.Fatalf("a build starts %s", build.State)
	}
	if err := e.c.DeleteSandbox(context.Background(), build.ID); err != nil {
		t.Errorf("delete while pending_build: %v", err)
	}
	e.waitState(t, build.ID, api.StateDestroyed)
}

// Deletion is soft (sandbox.entity.ts getSoftDeleteUpdate): the sandbox
// keeps its state with desiredState destroyed and a new name, which frees
// its own; it is destroyed later.
func TestSoftDelete(t *testing.T) {
	t.Parallel()
	// Slow enough that the list shows the deleted sandbox before it is
	// destroyed.
	f := Start(t, Options{StartDelay: 2 * time.Second, ListLag: 200 * time.Millisecond})
	e := newEnv(t, f)
	ctx := context.Background()
	sb, _ := e.started(t, api.CreateSandbox{Name: "soft", Labels: map[string]string{"t": "soft"}})
	st, _, b := e.raw(t, "DELETE", f.URL()+"/sandbox/"+sb.ID, nil, nil)
	var got api.Sandbox
	if err := json.Unmarshal(b, &got); err != nil || st != 200 {
		t.Fatalf("delete: %d %s", st, b)
	}
	if got.State != api.StateDestroying || got.DesiredState != api.DesiredDestroyed || !strings.HasPrefix(got.Name, "DESTROYED_soft_") {
		t.Errorf("delete answered state %s, desiredState %s, name %s", got.State, got.DesiredState, got.Name)
	}
	if _, err := e.c.GetSandbox(ctx, "soft"); api.StatusOf(err) != http.StatusNotFound {
		t.Errorf("get by the old name: %v, want 404", err)
	}
	if g, err := e.c.GetSandbox(ctx, sb.ID); err != nil || !g.Gone() || g.Name != got.Name {
		t.Errorf("get by id: %+v, %v", g, err)
	}
	// The list shows the state as stored: still started.
	e.listUntil(t, map[string]string{"t": "soft"}, func(l []api.Sandbox) bool {
		return len(l) == 1 && l[0].State == api.StateStarted && l[0].DesiredState == api.DesiredDestroyed
	})
	again := e.create(t, api.CreateSandbox{Name: "soft"})
	if again.ID == sb.ID {
		t.Errorf("the name was not free")
	}
	e.waitState(t, sb.ID, api.StateDestroyed)
	e.listUntil(t, map[string]string{"t": "soft"}, func(l []api.Sandbox) bool { return len(l) == 0 })
}

// Creates of one name that come together make one sandbox: the others
// are answered 409 (the database's unique name, sandbox.service.ts
// create). A name looked up before it existed is still not found after
// (Daytona's lookup cache keeps the miss, and a create does not clear
// it) until the new sandbox first changes state (sandbox.repository.ts
// insert and update, and SANDBOX_LOOKUP_CACHE_TTL_MS, as of b5a5d9e78).
func TestCreateRaceOnAName(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{})
	e := newEnv(t, f)
	ctx := context.Background()
	f.HoldTransitions()
	t.Cleanup(f.ReleaseTransitions)
	if _, err := e.c.GetSandbox(ctx, "race"); api.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("get a name no sandbox has: %v, want 404", err)
	}
	const creates = 10
	made := make(chan api.Sandbox, creates)
	errs := make(chan error, creates)
	var wg sync.WaitGroup
	for range creates {
		wg.Go(func() {
			sb, err := e.c.CreateSandbox(ctx, api.CreateSandbox{Name: "race"})
			if err != nil {
				errs <- err
				return
			}
			made <- sb
		})
	}
	wg.Wait()
	close(made)
	close(errs)
	if len(made) != 1 {
		t.Fatalf("%d creates of one name made a sandbox, want 1", len(made))
	}
	created := <-made
	for err := range errs {
		if api.StatusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), "Sandbox with name race already exists") {
			t.Errorf("a create that lost the race: %v, want 409 saying the name exists", err)
		}
	}
	if _, err := e.c.GetSandbox(ctx, "race"); api.StatusOf(err) != http.StatusNotFound {
		t.Errorf("get by name while the miss is cached: %v, want 404", err)
	}
	if got, err := e.c.GetSandbox(ctx, created.ID); err != nil || got.Name != "race" {
		t.Errorf("get by id: %+v, %v", got, err)
	}
	f.ReleaseTransitions()
	e.waitState(t, created.ID, api.StateStarted)
	if got, err := e.c.GetSandbox(ctx, "race"); err != nil || got.ID != created.ID {
		t.Errorf("get by name once the sandbox changed: %+v, %v", got.ID, err)
	}

	// Without the cache, the name is found at once.
	nc := newEnv(t, Start(t, Options{LookupCacheTTL: -1}))
	if _, err := nc.c.GetSandbox(ctx, "race"); api.StatusOf(err) != http.StatusNotFound {
		t.Fatalf("get a name no sandbox has: %v, want 404", err)
	}
	if sb := nc.create(t, api.CreateSandbox{Name: "race"}); sb.Name != "race" {
		t.Fatalf("created %+v", sb)
	}
	if _, err := nc.c.GetSandbox(ctx, "race"); err != nil {
		t.Errorf("get by name without the cache: %v", err)
	}
}

// The list lags (it is served from a search index) and is sorted by last
// activity, latest first (sandbox.controller.ts listSandboxes, the
// OpenSearch adapter's default sort).
func TestListLags(t *testing.T) {
	t.Parallel()
	const lag = 2 * time.Second // long enough to see on a slow machine
	f := Start(t, Options{StartDelay: time.Millisecond, ListLag: lag})
	e := newEnv(t, f)
	ctx := context.Background()
	labels := map[string]string{"t": "lag"}
	begun := time.Now()
	a := e.create(t, api.CreateSandbox{Labels: labels})
	list, err := e.c.ListSandboxes(ctx, labels)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(begun) < lag && len(list) != 0 {
		t.Errorf("the list showed a sandbox created %v ago: %v", time.Since(begun), ids(list))
	}
	e.listUntil(t, labels, func(l []api.Sandbox) bool { return len(l) == 1 })
	if d := time.Since(begun); d < lag {
		t.Errorf("listed after %v, before the lag of %v", d, lag)
	}

	b := e.create(t, api.CreateSandbox{Labels: labels})
	e.listUntil(t, labels, func(l []api.Sandbox) bool { return slices.Equal(ids(l), []string{b.ID, a.ID}) })
	if st, _, body := e.raw(t, "POST", f.URL()+"/sandbox/"+a.ID+"/last-activity", nil, nil); st != http.StatusCreated {
		t.Fatalf("last activity: %d %s", st, body)
	}
	e.listUntil(t, labels, func(l []api.Sandbox) bool { return slices.Equal(ids(l), []string{a.ID, b.ID}) })

	e.waitState(t, b.ID, api.StateStarted)
	if err := e.c.DeleteSandbox(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, b.ID, api.StateDestroyed)
	deleted := time.Now()
	list, err = e.c.ListSandboxes(ctx, labels)
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(deleted) < lag/2 && !slices.Contains(ids(list), b.ID) {
		t.Errorf("the list forgot a destroyed sandbox at once: %v", ids(list))
	}
	e.listUntil(t, labels, func(l []api.Sandbox) bool { return slices.Equal(ids(l), []string{a.ID}) })
}

// Start, stop and delete answer the sandbox with the change asked for
// (desiredState), as SandboxDto shows it (sandbox.dto.ts
// getSandboxState), not where it ends; start holds its answer up to 30 s
// waiting for started (sandbox.controller.ts startSandbox), and refuses
// while a change is pending, as stop does.
func TestStartAndStopAnswers(t *testing.T) {
	t.Parallel()
	// Daytona's start answers after at most 30 s whatever the state; a
	// short wait shows that answer without waiting 30 s.
	f := Start(t, Options{StartDelay: 2 * time.Second, StartWait: 50 * time.Millisecond})
	e := newEnv(t, f)
	ctx := context.Background()
	sb, _ := e.started(t, api.CreateSandbox{})
	if got, err := e.c.StartSandbox(ctx, sb.ID); err != nil || got.State != api.StateStarted {
		t.Errorf("start a started sandbox: %s, %v", got.State, err)
	}
	got, err := e.c.StopSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StateStopping || got.DesiredState != api.DesiredStopped {
		t.Errorf("stop answered %s (desired %s), %v; want stopping, stopped", got.State, got.DesiredState, err)
	}
	if _, err := e.c.StartSandbox(ctx, sb.ID); api.StatusOf(err) != http.StatusConflict || !strings.Contains(err.Error(), "Sandbox state change in progress") {
		t.Errorf("start while stopping: %v, want 409", err)
	}
	e.waitState(t, sb.ID, api.StateStopped)
	if _, err := e.c.StopSandbox(ctx, sb.ID); api.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "Sandbox is not in a stoppable state") {
		t.Errorf("stop a stopped sandbox: %v, want 400", err)
	}
	got, err = e.c.StartSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StateStarting || got.DesiredState != api.DesiredStarted {
		t.Errorf("start answered %s (desired %s), %v; want starting, started", got.State, got.DesiredState, err)
	}
	if _, err := e.c.StopSandbox(ctx, sb.ID); api.StatusOf(err) != http.StatusConflict {
		t.Errorf("stop while starting: %v, want 409", err)
	}
	e.waitState(t, sb.ID, api.StateStarted)

	// With Daytona's own wait, the answer is the sandbox started.
	g := Start(t, Options{})
	ge := newEnv(t, g)
	gsb, _ := ge.started(t, api.CreateSandbox{})
	g.StopSandbox(gsb.ID)
	if got, err := ge.c.StartSandbox(ctx, gsb.ID); err != nil || got.State != api.StateStarted {
		t.Errorf("start with Daytona's wait answered %s, %v", got.State, err)
	}
}

// A paused sandbox that is not a VM cannot be started (422, "Resuming is
// not supported for this sandbox": sandbox.service.ts start), but it can
// be stopped (stop takes started or paused), and then started; a VM's
// start resumes it.
func TestPaused(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{SnapshotClasses: map[string]string{"vm": api.ClassLinuxVM}, Snapshots: map[string]string{"vm": "amelia-base:bookworm"}})
	e := newEnv(t, f)
	ctx := context.Background()
	sb, _ := e.started(t, api.CreateSandbox{})
	if sb.SandboxClass != api.ClassContainer {
		t.Errorf("class %q", sb.SandboxClass)
	}
	tok := e.token(t, sb.ID)
	f.PauseSandbox(sb.ID)
	if got, _ := e.c.GetSandbox(ctx, sb.ID); got.State != api.StatePaused || got.DesiredState != api.DesiredPaused {
		t.Fatalf("paused: %s (desired %s)", got.State, got.DesiredState)
	}
	refused(t, f, tok, "a token of a paused sandbox")
	_, err := e.c.StartSandbox(ctx, sb.ID)
	if api.StatusOf(err) != http.StatusUnprocessableEntity || !strings.Contains(err.Error(), "Resuming is not supported for this sandbox") {
		t.Errorf("start a paused container: %v, want 422", err)
	}
	got, err := e.c.StopSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StatePaused || got.DesiredState != api.DesiredStopped {
		t.Errorf("stop a paused container: %s (desired %s), %v", got.State, got.DesiredState, err)
	}
	e.waitState(t, sb.ID, api.StateStopped)
	if got, err := e.c.StartSandbox(ctx, sb.ID); err != nil || got.State != api.StateStarted {
		t.Errorf("start it once stopped: %s, %v", got.State, err)
	}

	vm, _ := e.started(t, api.CreateSandbox{Snapshot: "vm"})
	if vm.SandboxClass != api.ClassLinuxVM {
		t.Errorf("class of a VM snapshot's sandbox: %q", vm.SandboxClass)
	}
	f.PauseSandbox(vm.ID)
	if got, err := e.c.StartSandbox(ctx, vm.ID); err != nil || got.State != api.StateStarted {
		t.Errorf("start (resume) a paused VM: %s, %v", got.State, err)
	}
}

// Daytona's throttlers are named (app.module.ts): a 429 carries
// Retry-After-<name>, the name of the throttler the route is limited by,
// and no bare Retry-After.
func TestNamedThrottlers(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{})
	e := newEnv(t, f)
	for _, c := range []struct {
		method, path string
		body         any
		throttler    string
	}{
		{"POST", "/sandbox", api.CreateSandbox{}, "sandbox-create"},
		{"POST", "/sandbox/x/start", nil, "sandbox-lifecycle"},
		{"POST", "/sandbox/x/stop", nil, "sandbox-lifecycle"},
		{"DELETE", "/sandbox/x", nil, "sandbox-lifecycle"},
		{"GET", "/sandbox", nil, "authenticated"},
		{"POST", "/sandbox/x/ssh-access", nil, "authenticated"},
	} {
		f.Throttle(1, 1500*time.Millisecond)
		st, h, _ := e.raw(t, c.method, f.URL()+c.path, c.body, nil)
		var names []string
		for k := range h {
			if strings.HasPrefix(strings.ToLower(k), "retry-after") {
				names = append(names, k)
			}
		}
		if st != http.StatusTooManyRequests || !slices.Equal(names, []string{http.CanonicalHeaderKey("Retry-After-" + c.throttler)}) || h.Get("Retry-After-"+c.throttler) != "2" {
			t.Errorf("%s %s: %d with %v, want 429 with Retry-After-%s: 2", c.method, c.path, st, h, c.throttler)
		}
	}
}

// The four calls of Daytona's SSH gateway (apps/ssh-gateway main.go), as
// it makes them, with its own key.
func TestGatewayEndpoints(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{RunnerDomain: "runner.test"})
	e := newEnv(t, f)
	sb, _ := e.started(t, api.CreateSandbox{})
	tok := e.token(t, sb.ID)
	gw := map[string]string{"Authorization": "Bearer " + f.GatewayAPIKey()}

	st, _, b := e.raw(t, "GET", f.URL()+"/sandbox/ssh-access/validate?token="+url.QueryEscape(tok), nil, gw)
	if st != 200 || string(b) != `{"sandboxId":"`+sb.ID+`","valid":true}` {
		t.Errorf("validate: %d %s", st, b)
	}
	st, _, b = e.raw(t, "GET", f.URL()+"/sandbox/ssh-access/validate?token=nosuch", nil, gw)
	if st != 200 || string(b) != `{"sandboxId":null,"valid":false}` {
		t.Errorf("validate an unknown token: %d %s", st, b)
	}
	st, _, b = e.raw(t, "GET", f.URL()+"/runners/by-sandbox/"+sb.ID, nil, gw)
	var runner struct {
		ID     string `json:"id"`
		Domain string `json:"domain"`
	}
	if err := json.Unmarshal(b, &runner); err != nil || st != 200 || runner.Domain != "runner.test" || runner.ID == "" {
		t.Errorf("runner: %d %s", st, b)
	}
	st, _, b = e.raw(t, "GET", f.URL()+"/sandbox/"+sb.ID, nil, gw)
	var got api.Sandbox
	if err := json.Unmarshal(b, &got); err != nil || st != 200 || got.State != api.StateStarted {
		t.Errorf("get with the gateway's key: %d %s", st, b)
	}
	before := got.LastActivityAt
	if st, _, b := e.raw(t, "POST", f.URL()+"/sandbox/"+sb.ID+"/last-activity", nil, gw); st != http.StatusCreated || len(b) != 0 {
		t.Errorf("last activity: %d %q", st, b)
	}
	if got, _ := e.c.GetSandbox(context.Background(), sb.ID); got.LastActivityAt <= before {
		t.Errorf("lastActivityAt %s, was %s", got.LastActivityAt, before)
	}

	// The default runner is the fake's own host.
	d := Start(t, Options{})
	de := newEnv(t, d)
	dsb, _ := de.started(t, api.CreateSandbox{})
	_, _, b = de.raw(t, "GET", d.URL()+"/runners/by-sandbox/"+dsb.ID, nil, map[string]string{"Authorization": "Bearer " + d.GatewayAPIKey()})
	if err := json.Unmarshal(b, &runner); err != nil || runner.Domain != "127.0.0.1" {
		t.Errorf("default runner: %s", b)
	}
}

// validate asks, as the SSH gateway does, whether a token is valid.
func (e *testEnv) validate(t *testing.T, token string) api.SSHAccessValidation {
	t.Helper()
	st, _, b := e.raw(t, "GET", e.f.URL()+"/sandbox/ssh-access/validate?token="+url.QueryEscape(token), nil, map[string]string{"Authorization": "Bearer " + e.f.GatewayAPIKey()})
	var v api.SSHAccessValidation
	if err := json.Unmarshal(b, &v); err != nil || st != http.StatusOK {
		t.Fatalf("validate: %d %s", st, b)
	}
	return v
}

// loginWith connects to the gateway with token.
func (e *testEnv) loginWith(t *testing.T, token string) *ssh.Client {
	t.Helper()
	c, err := dial(e.f, token)
	if err != nil {
		t.Fatalf("dial the gateway: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
