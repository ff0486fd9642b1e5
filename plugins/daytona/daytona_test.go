package daytona_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/daytona"
	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

// The provider against the fake Daytona of daytonatest, whose sandboxes
// are Docker containers of the real engine and whose SSH gateway is a real
// SSH server: the provider's HTTP client, its SSH transport and the
// commands it runs are all real.

// keyEnv holds the fake's API key for the provider (the tests set it; the
// plugin subprocesses inherit it).
const keyEnv = "AMELIA_TEST_DAYTONA_KEY"

// workerDirEnv names the directory of the worker the tests built, for the
// plugin subprocesses.
const workerDirEnv = "AMELIA_WORKER_DIR"

func TestMain(m *testing.M) {
	if sdktest.LaunchedAsPlugin() {
		sdk.Serve(daytona.New(daytona.Options{Version: "test", WorkerDirs: []string{os.Getenv(workerDirEnv)}}))
		return
	}
	os.Exit(testbin.Main(m, func(dir string) error {
		if _, err := testbin.BuildSandboxWorker(dir); err != nil {
			return err
		}
		return os.Setenv(workerDirEnv, dir)
	}))
}

// start starts a fake Daytona whose sandboxes are containers, and returns
// it with a profile's daytona block for it (extra keys added).
func start(t testing.TB, opts daytonatest.Options, extra map[string]any) (*daytonatest.Fake, json.RawMessage) {
	t.Helper()
	opts.Docker = dockertest.Engine(t)
	return startWith(t, opts, extra)
}

// startWith is start on the backend opts names (the host's without
// Docker).
func startWith(t testing.TB, opts daytonatest.Options, extra map[string]any) (*daytonatest.Fake, json.RawMessage) {
	t.Helper()
	f := daytonatest.Start(t, opts)
	t.Setenv(keyEnv, f.APIKey())
	// The providers of a test (and their plugin subprocesses) are the
	// amelia processes of one host: they share its state directory.
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(f.KnownHostsLine()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := map[string]any{
		"api_url":         f.URL(),
		"api_key_env":     keyEnv,
		"known_hosts":     known,
		"host_key_policy": "strict",
	}
	for k, v := range extra {
		s[k] = v
	}
	raw, _ := json.Marshal(s)
	return f, raw
}

// newProvider is the provider in this process (the conformance kit runs
// it as a plugin).
func newProvider(t testing.TB) *daytona.Provider {
	p := daytona.New(daytona.Options{Version: "test", PollInterval: 100 * time.Millisecond, WorkerDirs: []string{os.Getenv(workerDirEnv)}})
	t.Cleanup(func() { p.Close() })
	return p
}

func spec(name string, cfg json.RawMessage, mode sdk.NetworkMode) sdk.Spec {
	return sdk.Spec{SandboxRef: sdk.SandboxRef{Name: name, Config: cfg}, Network: sdk.NetworkPolicy{Mode: mode}, Labels: map[string]string{"amelia.profile": name}}
}

// run runs a shell script in the sandbox and returns its stdout.
func run(t *testing.T, p sdk.Provider, ref sdk.SandboxRef, script string) (string, sdk.ExitStatus, error) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", script}}, sdk.ExecIO{Stdout: &out, Stderr: &errb})
	if err == nil && st.Code != 0 {
		t.Logf("exit %d, stderr: %s", st.Code, errb.String())
	}
	return out.String(), st, err
}

func TestConformance(t *testing.T) {
	_, cfg := start(t, daytonatest.Options{}, nil)
	const needsImage = "a setup is built FROM daytona.image, which these settings lack: TestConformancePreparer runs them with one"
	sdktest.Run(t, sdktest.Config{
		Command:  func() *exec.Cmd { return exec.Command(os.Args[0]) },
		Settings: cfg,
		Skip:     map[string]string{"PrepareKeepsTheSetup": needsImage, "FailedSetupKeepsNothing": needsImage},
	})
}

// The Preparer group, with a daytona.image for the setup's snapshot to
// be built on.
func TestConformancePreparer(t *testing.T) {
	_, cfg := start(t, daytonatest.Options{}, map[string]any{"image": image.TestBase})
	sdktest.Run(t, sdktest.Config{
		Command:  func() *exec.Cmd { return exec.Command(os.Args[0]) },
		Settings: cfg,
		Groups:   []sdktest.Group{sdktest.Preparer},
	})
}

// A profile's sandbox is reused while it lives, by a provider that did not
// create it, and started again when Daytona stopped it; its files survive.
func TestReuseAndRestart(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, nil)
	first, err := newProvider(t).EnsureRunning(t.Context(), spec("reuse", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	if !first.Created || first.Workdir != "/home/daytona/workspace" {
		t.Fatalf("first EnsureRunning: created %v, workdir %q", first.Created, first.Workdir)
	}
	p := newProvider(t) // another amelia process
	if out, _, err := run(t, p, first.Ref, "echo kept > kept.txt && pwd"); err != nil || out != "/home/daytona/workspace\n" {
		t.Fatalf("exec: %q, %v", out, err)
	}
	again, err := p.EnsureRunning(t.Context(), spec("reuse", cfg, sdk.NetworkOpen))
	if err != nil || again.Created || again.Ref.ID != first.Ref.ID {
		t.Fatalf("second EnsureRunning: %+v, %v (want the same sandbox, not created)", again, err)
	}

	f.StopSandbox(first.Ref.ID)
	if h, err := p.HealthCheck(t.Context(), first.Ref); err != nil || h.State != sdk.HealthStopped {
		t.Errorf("health of the stopped sandbox: %+v, %v", h, err)
	}
	_, _, err = run(t, p, first.Ref, "true")
	if !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "is stopped, not started") {
		t.Errorf("exec in the stopped sandbox: %v, want a conflict saying it is stopped", err)
	}
	starts := len(requests(f, "POST", "/api/sandbox/"+first.Ref.ID+"/start"))
	restarted, err := newProvider(t).EnsureRunning(t.Context(), spec("reuse", cfg, sdk.NetworkOpen))
	if err != nil || restarted.Created || restarted.Ref.ID != first.Ref.ID {
		t.Fatalf("EnsureRunning on the stopped sandbox: %+v, %v", restarted, err)
	}
	if got := len(requests(f, "POST", "/api/sandbox/"+first.Ref.ID+"/start")); got != starts+1 {
		t.Errorf("%d start requests, want 1", got-starts)
	}
	if sb, _ := f.Sandbox(first.Ref.ID); sb.State != api.StateStarted {
		t.Errorf("state after EnsureRunning: %s", sb.State)
	}
	if out, _, err := run(t, p, first.Ref, "cat kept.txt"); err != nil || out != "kept\n" {
		t.Errorf("the file written before the stop: %q, %v", out, err)
	}
	if h, err := p.HealthCheck(t.Context(), first.Ref); err != nil || h.State != sdk.HealthReady {
		t.Errorf("health: %+v, %v", h, err)
	}
}

// requests are the fake's requests with that method and path.
func requests(f *daytonatest.Fake, method, path string) []daytonatest.Request {
	var rs []daytonatest.Request
	for _, r := range f.Requests() {
		if r.Method == method && r.Path == path {
			rs = append(rs, r)
		}
	}
	return rs
}

// What a profile asks for reaches the API as the spec shapes it; a
// reused sandbox made for another network is refused, not reused.
func TestCreateRequest(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, map[string]any{
		"image": "amelia-base:bookworm", "cpu": 2, "memory": 2, "disk": 5, "auto_stop_interval": 20,
		"env": map[string]string{"TZ": "UTC"}, "labels": map[string]string{"team": "a"},
	})
	p := newProvider(t)
	sb, err := p.EnsureRunning(t.Context(), spec("create", cfg, sdk.NetworkNone))
	if err != nil {
		t.Fatal(err)
	}
	creates := requests(f, "POST", "/api/sandbox")
	if len(creates) != 1 {
		t.Fatalf("%d create requests", len(creates))
	}
	var got map[string]any
	if err := json.Unmarshal(creates[0].Body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"name":             "create",
		"env":              map[string]any{"TZ": "UTC", "AMELIA_SANDBOX": "create"},
		"labels":           map[string]any{"team": "a", "amelia.profile": "create", "amelia.sandbox": "create"},
		"networkBlockAll":  true,
		"cpu":              2.0,
		"memory":           2.0,
		"disk":             5.0,
		"autoStopInterval": 20.0,
		"buildInfo":        map[string]any{"dockerfileContent": "FROM amelia-base:bookworm"},
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("create request\n got %s\nwant %s", gj, wj)
	}
	// networkBlockAll: the container has no network but loopback.
	if out, _, err := run(t, p, sb.Ref, "ls /sys/class/net"); err != nil || out != "lo\n" {
		t.Errorf("network interfaces in the sandbox: %q, %v", out, err)
	}
	_, err = newProvider(t).EnsureRunning(t.Context(), spec("create", cfg, sdk.NetworkOpen))
	if !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "was created with networkBlockAll=true, and network open needs false") {
		t.Errorf("reuse for another network: %v", err)
	}
}

// A sandbox that ends in error or build_failed fails EnsureRunning with
// Daytona's reason, and is deleted, leaving nothing behind.
func TestFailedStart(t *testing.T) {
	for _, c := range []struct {
		name   string
		inject func(*daytonatest.Fake)
		extra  map[string]any
		kind   error
		want   string
	}{
		{
			name:   "error",
			inject: func(f *daytonatest.Fake) { f.FailNext(api.StateError, "no capacity in region us") },
			kind:   sdk.ErrUnavailable,
			want:   "failed (state error): no capacity in region us",
		},
		{
			name:  "build_failed",
			extra: map[string]any{"image": "registry.example/nope:1"},
			kind:  sdk.ErrInvalid,
			want:  "could not be built (state build_failed): ",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, cfg := start(t, daytonatest.Options{}, c.extra)
			if c.inject != nil {
				c.inject(f)
			}
			_, err := newProvider(t).EnsureRunning(t.Context(), spec("failing", cfg, sdk.NetworkOpen))
			if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("EnsureRunning: %v, want %v with %q", err, c.kind, c.want)
			}
			if c.name == "build_failed" && !strings.Contains(err.Error(), "registry.example/nope:1") {
				t.Errorf("the reason does not name the image: %v", err)
			}
			if left := f.Sandboxes(); len(left) != 0 {
				t.Errorf("sandboxes left behind: %+v", left)
			}
		})
	}
}

// The gateway token is renewed while a long command runs, so the
// connections made after it (here: after the gateway dropped them) log in
// with a live token at once; one that Daytona expired early is replaced
// when the gateway closes its login.
func TestTokenRenewal(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{TokenTTL: 2 * time.Second}, nil)
	p := newProvider(t)
	sb, err := p.EnsureRunning(t.Context(), spec("tokens", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	issued := f.Stats().TokensIssued
	// Outlives the token twice over.
	out, st, err := run(t, p, sb.Ref, "sleep 5; echo done")
	if err != nil || st.Code != 0 || out != "done\n" {
		t.Fatalf("long exec: %q, %+v, %v", out, st, err)
	}
	if got := f.Stats().TokensIssued - issued; got < 2 {
		t.Errorf("%d tokens issued during the long exec, want it renewed", got)
	}
	if f.Stats().TokensRevoked == 0 {
		t.Error("no superseded token was revoked")
	}
	f.DropConnections()
	if out, _, err := run(t, p, sb.Ref, "echo again"); err != nil || out != "again\n" {
		t.Fatalf("exec after the drop: %q, %v", out, err)
	}
	if s := f.Stats(); s.RefusedLogins != 0 {
		t.Errorf("%d logins refused, want none (the token was live)", s.RefusedLogins)
	}

	f.ExpireTokens()
	f.DropConnections()
	if out, _, err := run(t, p, sb.Ref, "echo expired"); err != nil || out != "expired\n" {
		t.Fatalf("exec after Daytona expired the token: %q, %v", out, err)
	}
	if s := f.Stats(); s.RefusedLogins != 1 {
		t.Errorf("%d logins refused, want the one with the expired token", s.RefusedLogins)
	}
}

// A burst of 429s is waited out, as the throttler's named Retry-After
// header (Retry-After-authenticated, as Daytona's API sends it) says.
func TestRateLimited(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, nil)
	p := newProvider(t)
	if _, err := p.EnsureRunning(t.Context(), spec("limited", cfg, sdk.NetworkOpen)); err != nil {
		t.Fatal(err)
	}
	before := len(requests(f, "GET", "/api/sandbox/limited"))
	f.Throttle(3, time.Second)
	begun := time.Now()
	sb, err := newProvider(t).EnsureRunning(t.Context(), spec("limited", cfg, sdk.NetworkOpen))
	if err != nil || sb.Created {
		t.Fatalf("EnsureRunning through a 429 burst: %+v, %v", sb, err)
	}
	if got := len(requests(f, "GET", "/api/sandbox/limited")) - before; got != 4 {
		t.Errorf("%d lookups by name, want 3 throttled and 1 answered", got)
	}
	// Backing off blindly would have taken under 2 s.
	if took := time.Since(begun); took < 3*time.Second {
		t.Errorf("EnsureRunning took %v through 3 answers of Retry-After-authenticated: 1", took)
	}
}

// The API's errors come back with Daytona's message and the right kind.
func TestAPIErrors(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, map[string]any{"snapshot": "no-such-snapshot"})
	_, err := newProvider(t).EnsureRunning(t.Context(), spec("errors", cfg, sdk.NetworkOpen))
	if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "daytona POST /api/sandbox: 400 Bad Request: ") || !strings.Contains(err.Error(), "no-such-snapshot") {
		t.Errorf("unknown snapshot: %v", err)
	}
	var withOrg map[string]any
	json.Unmarshal(cfg, &withOrg)
	withOrg["snapshot"] = daytonatest.DefaultSnapshot
	withOrg["organization_id"] = "00000000-0000-0000-0000-000000000000"
	other, _ := json.Marshal(withOrg)
	_, err = newProvider(t).EnsureRunning(t.Context(), spec("errors", other, sdk.NetworkOpen))
	if !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "403 Forbidden") {
		t.Errorf("another organization: %v", err)
	}
	withOrg["organization_id"] = f.Organization()
	ours, _ := json.Marshal(withOrg)
	before := len(f.Requests())
	if _, err := newProvider(t).EnsureRunning(t.Context(), spec("errors", ours, sdk.NetworkOpen)); err != nil {
		t.Errorf("the key's own organization: %v", err)
	}
	for _, r := range f.Requests()[before:] {
		if got := r.Header.Get("X-Daytona-Organization-ID"); got != f.Organization() {
			t.Errorf("%s %s: organization header %q, want %q", r.Method, r.Path, got, f.Organization())
		}
	}
	t.Setenv(keyEnv, "wrong-key")
	_, err = newProvider(t).EnsureRunning(t.Context(), spec("errors", cfg, sdk.NetworkOpen))
	if !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Errorf("wrong key: %v", err)
	}
	if strings.Contains(err.Error(), "wrong-key") || strings.Contains(err.Error(), f.APIKey()) {
		t.Errorf("the error shows a key: %v", err)
	}
}

// on_teardown: stop keeps the sandbox, stopped; the default deletes it,
// and revokes the gateway tokens.
func TestTeardown(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, map[string]any{"on_teardown": "stop"})
	p := newProvider(t)
	sb, err := p.EnsureRunning(t.Context(), spec("down", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, p, sb.Ref, "true"); err != nil {
		t.Fatal(err)
	}
	if err := p.Teardown(t.Context(), sb.Ref); err != nil {
		t.Fatal(err)
	}
	if got, ok := f.Sandbox(sb.Ref.ID); !ok || got.State != api.StateStopped {
		t.Errorf("after teardown with on_teardown stop: %v, %s", ok, got.State)
	}

	var del map[string]any
	json.Unmarshal(cfg, &del)
	delete(del, "on_teardown")
	cfg, _ = json.Marshal(del)
	sb, err = p.EnsureRunning(t.Context(), spec("down", cfg, sdk.NetworkOpen))
	if err != nil {
		t.Fatal(err)
	}
	revoked := f.Stats().TokensRevoked
	if _, _, err := run(t, p, sb.Ref, "true"); err != nil {
		t.Fatal(err)
	}
	if err := p.Teardown(t.Context(), sb.Ref); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.Sandbox(sb.Ref.ID); got.State != api.StateDestroyed {
		t.Errorf("the sandbox is %s after teardown, want destroyed", got.State)
	}
	if f.Stats().TokensRevoked == revoked {
		t.Error("teardown revoked no token")
	}
	if err := p.Teardown(t.Context(), sb.Ref); err != nil {
		t.Errorf("second teardown: %v", err)
	}
}

// A sandbox of the profile's name that is not Amelia's is refused and left
// alone.
func TestForeignSandboxOfTheSameName(t *testing.T) {
	f, cfg := start(t, daytonatest.Options{}, nil)
	client, err := api.New(api.Options{BaseURL: f.URL(), APIKey: f.APIKey()})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := client.CreateSandbox(t.Context(), api.CreateSandbox{Name: "taken", Labels: map[string]string{"owner": "someone"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = newProvider(t).EnsureRunning(t.Context(), spec("taken", cfg, sdk.NetworkOpen))
	if !errors.Is(err, sdk.ErrConflict) || !strings.Contains(err.Error(), "a Daytona sandbox named taken ("+foreign.ID+") exists and is not Amelia's") {
		t.Fatalf("EnsureRunning over a foreign sandbox: %v", err)
	}
	if got, _ := f.Sandbox(foreign.ID); got.State == api.StateDestroyed || got.State == api.StateDestroying || got.Labels["owner"] != "someone" {
		t.Errorf("the foreign sandbox was touched: %+v", got)
	}
	if len(f.Sandboxes()) != 1 {
		t.Errorf("%d sandboxes, want the foreign one alone", len(f.Sandboxes()))
	}
}
