package daytonatest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// TestSpecConformance drives every endpoint the fake serves, happy paths
// through api.Client and the rest raw, and checks every exchange against
// Daytona's OpenAPI files (see conformance).
func TestSpecConformance(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{})
	e := newEnv(t, f)
	ctx := context.Background()
	auto := 30

	if list, err := e.c.ListSandboxes(ctx, nil); err != nil || len(list) != 0 {
		t.Fatalf("list of a new fake: %v, %v", list, err)
	}
	sb, _ := e.started(t, api.CreateSandbox{Name: "conf", Labels: map[string]string{"amelia.profile": "p"}, Env: map[string]string{"FOO": "bar"}, AutoStopInterval: &auto, NetworkBlockAll: true})
	built, _ := e.started(t, api.CreateSandbox{BuildInfo: &api.CreateBuildInfo{DockerfileContent: "FROM amelia-base:bookworm"}, CPU: 2, Memory: 2, Disk: 5})
	if built.BuildInfo == nil || built.BuildInfo.SnapshotRef == "" || built.CPU != 2 {
		t.Errorf("built sandbox: %+v", built)
	}
	e.listUntil(t, map[string]string{"amelia.profile": "p"}, func(l []api.Sandbox) bool { return slices.Equal(ids(l), []string{sb.ID}) })
	if got, err := e.c.GetSandbox(ctx, "conf"); err != nil || got.ID != sb.ID {
		t.Errorf("get by name: %v, %v", got.ID, err)
	}

	access, err := e.c.CreateSSHAccess(ctx, sb.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("ssh -p %s %s@127.0.0.1", strings.Split(f.GatewayAddr(), ":")[1], access.Token); access.SSHCommand != want {
		t.Errorf("sshCommand %q, want %q", access.SSHCommand, want)
	}
	if d := time.Until(access.ExpiresAt); d < 9*time.Minute || d > 10*time.Minute {
		t.Errorf("expiresAt in %v, want 10 minutes", d)
	}
	validate := func(tok string) api.SSHAccessValidation {
		t.Helper()
		st, _, b := e.raw(t, "GET", f.URL()+"/sandbox/ssh-access/validate?token="+url.QueryEscape(tok), nil, map[string]string{"Authorization": "Bearer " + f.GatewayAPIKey()})
		if st != 200 {
			t.Fatalf("validate: %d %s", st, b)
		}
		var v api.SSHAccessValidation
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := validate(access.Token); !v.Valid || v.SandboxID != sb.ID {
		t.Errorf("validate a fresh token: %+v", v)
	}
	gw := map[string]string{"Authorization": "Bearer " + f.GatewayAPIKey()}
	if st, _, b := e.raw(t, "GET", f.URL()+"/runners/by-sandbox/"+sb.ID, nil, gw); st != 200 {
		t.Errorf("runner by sandbox: %d %s", st, b)
	}
	if st, _, b := e.raw(t, "POST", f.URL()+"/sandbox/"+sb.ID+"/last-activity", nil, gw); st != 201 {
		t.Errorf("last activity: %d %s", st, b)
	}
	if err := e.c.RevokeSSHAccess(ctx, sb.ID, access.Token); err != nil {
		t.Fatal(err)
	}
	if v := validate(access.Token); v.Valid {
		t.Errorf("validate a revoked token: %+v", v)
	}
	if v := validate("nosuchtoken"); v.Valid {
		t.Errorf("validate an unknown token: %+v", v)
	}
	other := e.token(t, sb.ID)
	if st, _, b := e.raw(t, "DELETE", f.URL()+"/sandbox/"+sb.ID+"/ssh-access", nil, nil); st != 200 {
		t.Errorf("revoke all: %d %s", st, b)
	}
	if v := validate(other); v.Valid {
		t.Errorf("a token survived revoking all: %+v", v)
	}

	res, err := e.c.Execute(ctx, sb, api.ExecuteRequest{Command: "echo out; echo err >&2; exit 4"})
	if err != nil || res.ExitCode != 4 || !strings.Contains(res.Result, "out\n") || !strings.Contains(res.Result, "err\n") {
		t.Errorf("execute: %+v, %v", res, err)
	}
	if st, _, b := e.raw(t, "POST", sb.ToolboxProxyURL+"/"+sb.ID+"/process/execute", api.ExecuteRequest{Command: "sleep 5", Timeout: 1}, nil); st != http.StatusRequestTimeout {
		t.Errorf("execute past its timeout: %d %s", st, b)
	}
	if st, _, b := e.raw(t, "POST", sb.ToolboxProxyURL+"/nosuch/process/execute", api.ExecuteRequest{Command: "true"}, nil); st != http.StatusNotFound {
		t.Errorf("execute in no sandbox: %d %s", st, b)
	}

	if _, err := e.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, sb.ID, api.StateStopped)
	if _, err := e.c.StartSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, sb.ID, api.StateStarted)

	// Errors the spec leaves out: checked for statusCode and message.
	for _, c := range []struct {
		method, path string
		body         any
		header       map[string]string
		want         int
	}{
		{"GET", "/sandbox/nosuch", nil, nil, 404},
		{"POST", "/sandbox/nosuch/start", nil, nil, 404},
		{"POST", "/sandbox/nosuch/ssh-access", nil, nil, 404},
		{"GET", "/sandbox?labels=notjson", nil, nil, 400},
		{"GET", "/sandbox?limit=500", nil, nil, 400},
		{"GET", "/sandbox?cursor=%21%21", nil, nil, 400},
		{"POST", "/sandbox", api.CreateSandbox{Name: "conf"}, nil, 409},
		{"POST", "/sandbox", api.CreateSandbox{Snapshot: DefaultSnapshot, CPU: 2}, nil, 400},
		{"POST", "/sandbox", api.CreateSandbox{Snapshot: "nosuch:1"}, nil, 400},
		{"POST", "/sandbox", api.CreateSandbox{BuildInfo: &api.CreateBuildInfo{DockerfileContent: "FROM a\nRUN b"}}, nil, 400},
		{"GET", "/sandbox", nil, map[string]string{"Authorization": ""}, 401},
		{"GET", "/sandbox", nil, map[string]string{"Authorization": "Bearer wrong"}, 401},
		{"GET", "/sandbox", nil, map[string]string{"X-Daytona-Organization-ID": "other"}, 403},
		{"GET", "/sandbox/ssh-access/validate?token=x", nil, nil, 403},
		{"GET", "/runners/by-sandbox/" + sb.ID, nil, nil, 403},
		{"GET", "/runners/by-sandbox/nosuch", nil, map[string]string{"Authorization": "Bearer " + f.GatewayAPIKey()}, 404},
		{"GET", "/sandbox", nil, map[string]string{"Authorization": "Bearer " + f.GatewayAPIKey()}, 403},
		{"POST", "/sandbox/" + sb.ID + "/last-activity", map[string]string{"activityType": "ssh"}, nil, 201},
	} {
		if st, _, b := e.raw(t, c.method, f.URL()+c.path, c.body, c.header); st != c.want {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.path, st, b, c.want)
		}
	}

	for _, id := range []string{sb.ID, built.ID} {
		if err := e.c.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		e.waitState(t, id, api.StateDestroyed)
	}

	checked := e.conf.checked()
	for _, op := range []string{"listSandboxes", "createSandbox", "getSandbox", "startSandbox", "stopSandbox", "deleteSandbox", "createSshAccess", "revokeSshAccess", "validateSshAccess", "getRunnerBySandboxId", "updateLastActivity", "ExecuteCommand"} {
		if checked[op] == 0 {
			t.Errorf("operation %s was not exercised", op)
		}
	}
}

// TestStates follows sandboxes through their states and failures.
func TestStates(t *testing.T) {
	t.Parallel()
	f := Start(t, Options{})
	e := newEnv(t, f)
	ctx := context.Background()

	sb, seen := e.started(t, api.CreateSandbox{})
	if !slices.Equal(seen, []api.State{api.StateCreating, api.StatePullingSnapshot, api.StateStarted}) {
		t.Errorf("create from a snapshot went %v", seen)
	}
	if sb.Name != sb.ID || sb.Snapshot != DefaultSnapshot || sb.User != "daytona" || sb.Target != "us" || sb.CPU != 1 || sb.Memory != 1 || sb.Disk != 3 || sb.OrganizationID != f.Organization() || sb.DesiredState != "started" || sb.ToolboxProxyURL != strings.TrimSuffix(f.URL(), "/api")+"/toolbox" {
		t.Errorf("defaults: %+v", sb)
	}
	_, seen = e.started(t, api.CreateSandbox{BuildInfo: &api.CreateBuildInfo{DockerfileContent: "FROM anything:1\n"}})
	if !slices.Equal(seen, []api.State{api.StatePendingBuild, api.StateBuildingSnapshot, api.StateStarting, api.StateStarted}) {
		t.Errorf("create from a Dockerfile went %v", seen)
	}

	if _, err := e.c.StopSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, seen = e.waitState(t, sb.ID, api.StateStopped); !slices.Equal(seen, []api.State{api.StateStopping, api.StateStopped}) {
		t.Errorf("stop went %v", seen)
	}
	// Daytona's start holds its answer until the sandbox is started.
	if got, err := e.c.StartSandbox(ctx, sb.ID); err != nil || got.State != api.StateStarted {
		t.Fatalf("start: %v %v", got.State, err)
	}
	if got, err := e.c.StartSandbox(ctx, sb.ID); err != nil || got.State != api.StateStarted {
		t.Errorf("start a started sandbox: %v %v", got.State, err)
	}
	f.StopSandbox(sb.ID)
	if got, _ := f.Sandbox(sb.ID); got.State != api.StateStopped {
		t.Errorf("after StopSandbox: %s", got.State)
	}

	// Out of band, in the middle of creating: stopped once started.
	creating := e.create(t, api.CreateSandbox{})
	f.StopSandbox(creating.ID)
	if got, _ := f.Sandbox(creating.ID); got.State != api.StateStopped {
		t.Errorf("StopSandbox while creating: %s", got.State)
	}

	for _, st := range []api.State{api.StateError, api.StateBuildFailed} {
		f.FailNext(st, "injected "+string(st))
		failed := e.create(t, api.CreateSandbox{})
		if got, _ := e.waitState(t, failed.ID, st); got.ErrorReason != "injected "+string(st) {
			t.Errorf("%s: errorReason %q", st, got.ErrorReason)
		}
		_, err := e.c.StartSandbox(ctx, failed.ID)
		if api.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "Sandbox is in an errored state") {
			t.Errorf("start a sandbox in %s: %v", st, err)
		}
		if err := e.c.DeleteSandbox(ctx, failed.ID); err != nil {
			t.Fatal(err)
		}
	}

	if err := e.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, seen = e.waitState(t, sb.ID, api.StateDestroyed); !slices.Equal(seen, []api.State{api.StateDestroying, api.StateDestroyed}) {
		t.Errorf("delete went %v", seen)
	}
	if _, err := e.c.GetSandbox(ctx, sb.ID); api.StatusOf(err) != http.StatusNotFound || !strings.Contains(err.Error(), "Sandbox with ID or name "+sb.ID+" not found") {
		t.Errorf("get a deleted sandbox: %v", err)
	}
	if got, ok := f.Sandbox(sb.ID); !ok || got.State != api.StateDestroyed {
		t.Errorf("Fake.Sandbox of a deleted sandbox: %v %v", got.State, ok)
	}
	for _, s := range f.Sandboxes() {
		if s.ID == sb.ID {
			t.Errorf("Fake.Sandboxes lists a deleted sandbox")
		}
	}
}

// TestListAndErrors covers label filtering, pagination, names, resources,
// authentication and throttling.
func TestListAndErrors(t *testing.T) {
	t.Parallel()
	// Filters and pages, not the list's lag (TestListLags): no lag.
	f := Start(t, Options{StartDelay: time.Millisecond, ListLag: -1})
	e := newEnv(t, f)
	ctx := context.Background()
	x1 := e.create(t, api.CreateSandbox{Name: "x1", Labels: map[string]string{"k": "x", "n": "1"}})
	e.create(t, api.CreateSandbox{Name: "y", Labels: map[string]string{"k": "y"}})
	x2 := e.create(t, api.CreateSandbox{Name: "x2", Labels: map[string]string{"k": "x", "n": "2"}})

	page := func(q url.Values) (ids []string, next *string) {
		t.Helper()
		st, _, b := e.raw(t, "GET", f.URL()+"/sandbox?"+q.Encode(), nil, nil)
		if st != 200 {
			t.Fatalf("list %v: %d %s", q, st, b)
		}
		var p api.ListSandboxesResponse
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		for _, it := range p.Items {
			ids = append(ids, it.ID)
		}
		return ids, p.NextCursor
	}
	// Latest activity first: x2 was created last.
	ids, next := page(url.Values{"labels": {`{"k":"x"}`}, "limit": {"1"}})
	if !slices.Equal(ids, []string{x2.ID}) || next == nil {
		t.Fatalf("first page: %v %v", ids, next)
	}
	ids, next = page(url.Values{"labels": {`{"k":"x"}`}, "limit": {"1"}, "cursor": {*next}})
	if !slices.Equal(ids, []string{x1.ID}) || next != nil {
		t.Fatalf("second page: %v %v", ids, next)
	}
	if ids, _ = page(url.Values{"labels": {`{"k":"x","n":"2"}`}}); !slices.Equal(ids, []string{x2.ID}) {
		t.Errorf("two labels: %v", ids)
	}
	if ids, _ = page(url.Values{}); len(ids) != 3 {
		t.Errorf("no filter: %v", ids)
	}
	if st, _, b := e.raw(t, "GET", f.URL()+"/sandbox?labels=%7Bbad", nil, nil); st != 400 {
		t.Errorf("bad labels: %d %s", st, b)
	}
	if list, err := e.c.ListSandboxes(ctx, map[string]string{"k": "x"}); err != nil || len(list) != 2 {
		t.Errorf("client list: %d %v", len(list), err)
	}

	if _, err := e.c.CreateSandbox(ctx, api.CreateSandbox{Name: "x1"}); api.StatusOf(err) != http.StatusConflict {
		t.Errorf("duplicate name: %v", err)
	}
	if _, err := e.c.CreateSandbox(ctx, api.CreateSandbox{Snapshot: DefaultSnapshot, CPU: 2}); api.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "Cannot specify Sandbox resources when using a snapshot") {
		t.Errorf("snapshot with cpu: %v", err)
	}
	if _, err := e.c.CreateSandbox(ctx, api.CreateSandbox{Snapshot: "nosuch:2"}); api.StatusOf(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "nosuch:2") {
		t.Errorf("unknown snapshot: %v", err)
	}
	e.waitState(t, x1.ID, api.StateStarted)
	if err := e.c.DeleteSandbox(ctx, x1.ID); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, x1.ID, api.StateDestroyed)
	if _, err := e.c.CreateSandbox(ctx, api.CreateSandbox{Name: "x1"}); err != nil {
		t.Errorf("reuse the name of a deleted sandbox: %v", err)
	}

	for _, key := range []string{"", "wrong"} {
		c, _ := api.New(api.Options{BaseURL: f.URL(), APIKey: "k" + key, HTTPClient: e.http})
		if _, err := c.ListSandboxes(ctx, nil); api.StatusOf(err) != http.StatusUnauthorized {
			t.Errorf("key %q: %v", key, err)
		}
	}
	if st, _, _ := e.raw(t, "GET", f.URL()+"/sandbox", nil, map[string]string{"Authorization": ""}); st != 401 {
		t.Errorf("no key: %d", st)
	}

	f.Throttle(2, 300*time.Millisecond)
	st, h, b := e.raw(t, "GET", f.URL()+"/sandbox", nil, nil)
	if st != http.StatusTooManyRequests || h.Get("Retry-After-authenticated") != "1" || h.Get("Retry-After") != "" {
		t.Errorf("throttled: %d %v", st, h)
	}
	if m := errorMessage(t, b); m != "ThrottlerException: Too Many Requests" {
		t.Errorf("throttled message %q", m)
	}
	begun := time.Now()
	if _, err := e.c.ListSandboxes(ctx, nil); err != nil {
		t.Errorf("list through a 429: %v", err)
	}
	if time.Since(begun) < time.Second {
		t.Errorf("the client did not wait out Retry-After")
	}
	if st, _, _ := e.raw(t, "GET", f.URL()+"/sandbox", nil, nil); st != 200 {
		t.Errorf("after the throttle: %d", st)
	}

	reqs := f.Requests()
	if len(reqs) == 0 || reqs[0].Method != "POST" || reqs[0].Path != "/api/sandbox" || !strings.Contains(string(reqs[0].Body), `"x1"`) {
		t.Errorf("first request recorded: %+v", reqs[0])
	}
}

// TestBuild: a Dockerfile's FROM image must be local in Docker, else the
// sandbox ends build_failed; named snapshots map to images.
func TestBuild(t *testing.T) {
	t.Parallel()
	forEachBackend(t, Options{Snapshots: map[string]string{"custom": "amelia-base:bookworm"}}, func(t *testing.T, f *Fake) {
		e := newEnv(t, f)
		if sb, _ := e.started(t, api.CreateSandbox{Snapshot: "custom"}); sb.Snapshot != "custom" {
			t.Errorf("snapshot %q", sb.Snapshot)
		}
		sb, seen := e.started(t, api.CreateSandbox{BuildInfo: &api.CreateBuildInfo{DockerfileContent: "FROM amelia-base:bookworm"}})
		if seen[0] != api.StatePendingBuild || sb.BuildInfo == nil || sb.BuildInfo.DockerfileContent != "FROM amelia-base:bookworm" {
			t.Errorf("build: %v %+v", seen, sb.BuildInfo)
		}
		if f.opts.Docker == nil {
			return
		}
		bad := e.create(t, api.CreateSandbox{BuildInfo: &api.CreateBuildInfo{DockerfileContent: "FROM nosuch.invalid/img:1"}})
		if got, _ := e.waitState(t, bad.ID, api.StateBuildFailed); !strings.Contains(got.ErrorReason, "pull access denied for nosuch.invalid/img:1") {
			t.Errorf("errorReason %q", got.ErrorReason)
		}
	})
}
