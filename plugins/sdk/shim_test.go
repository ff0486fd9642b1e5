package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// failingProvider's Teardown fails with err.
type failingProvider struct {
	*stubProvider
	err error
}

func (f failingProvider) Teardown(context.Context, sdk.SandboxRef) error { return f.err }

func TestErrorsCrossTheBoundary(t *testing.T) {
	for _, kind := range []error{sdk.ErrNotFound, sdk.ErrInvalid, sdk.ErrUnavailable, sdk.ErrUnsupported, sdk.ErrPermission, sdk.ErrConflict, sdk.ErrTimeout, context.Canceled} {
		sent := fmt.Errorf("sandbox x: %w", kind)
		got := serve(t, failingProvider{&stubProvider{}, sent}, 0).Teardown(t.Context(), sdk.SandboxRef{Name: "a"})
		if !errors.Is(got, kind) || got.Error() != sent.Error() {
			t.Errorf("%v: came back as %q (matches: %v), want %q matching it", kind, got, errors.Is(got, kind), sent)
		}
	}
	plain := serve(t, failingProvider{&stubProvider{}, errors.New("disk on fire")}, 0).Teardown(t.Context(), sdk.SandboxRef{Name: "a"})
	if plain.Error() != "disk on fire" || errors.Is(plain, sdk.ErrUnavailable) {
		t.Errorf("an unclassified error came back as %q", plain)
	}
	e := sdk.Errorf(sdk.ErrNotFound, "no sandbox %q", "a")
	if got := serve(t, failingProvider{&stubProvider{}, e}, 0).Teardown(t.Context(), sdk.SandboxRef{Name: "a"}); !errors.Is(got, sdk.ErrNotFound) || e.Error() != `no sandbox "a"` {
		t.Errorf("Errorf: %v, came back as %v", e, got)
	}
}

// stubProvider answers every call; its health check can hang.
type stubProvider struct {
	hang    chan struct{}
	seen    []sdk.ExecRequest
	running sdk.Sandbox
	health  sdk.Health // ready when zero
}

func (s *stubProvider) Info(context.Context) (sdk.Info, error) { return sdk.Info{Name: "stub"}, nil }
func (s *stubProvider) EnsureRunning(_ context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	return s.running, nil
}
func (s *stubProvider) Exec(_ context.Context, req sdk.ExecRequest, _ sdk.ExecIO) (sdk.ExitStatus, error) {
	s.seen = append(s.seen, req)
	return sdk.ExitStatus{}, nil
}
func (s *stubProvider) Teardown(context.Context, sdk.SandboxRef) error { return nil }
func (s *stubProvider) HealthCheck(ctx context.Context, _ sdk.SandboxRef) (sdk.Health, error) {
	<-s.hang // ignores ctx, as a broken provider would
	if s.health.State != "" {
		return s.health, nil
	}
	return sdk.Health{State: sdk.HealthReady}, nil
}

// serve puts p behind the gRPC shim on a unix socket, its HealthCheck
// bounded by healthTimeout (0: HealthCheckTimeout), and returns the
// host's client of it.
func serve(t *testing.T, p sdk.Provider, healthTimeout time.Duration) *pluginclient.Client {
	t.Helper()
	return pluginclient.NewClient(dial(t, p, healthTimeout))
}

// dial serves p as serve does and connects to it.
func dial(t *testing.T, p sdk.Provider, healthTimeout time.Duration) *grpc.ClientConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var stop func()
	if healthTimeout > 0 {
		stop = sdk.ServeListenerBounded(p, lis, healthTimeout)
	} else {
		stop = sdk.ServeListener(p, lis)
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(); stop() })
	return cc
}

func TestHealthCheckIsBoundedEvenWhenTheProviderHangs(t *testing.T) {
	stub := &stubProvider{hang: make(chan struct{})}
	defer close(stub.hang)
	c := serve(t, stub, 100*time.Millisecond)
	_, err := c.HealthCheck(t.Context(), sdk.SandboxRef{Name: "a"})
	if !errors.Is(err, sdk.ErrTimeout) || !strings.Contains(err.Error(), "took longer than 100ms") {
		t.Errorf("err = %v, want sdk.ErrTimeout saying the bound", err)
	}
}

// A health check's answer reaches the host whole: why a sandbox never
// stops too.
func TestHealthCrossesTheWire(t *testing.T) {
	want := sdk.Health{State: sdk.HealthReady, Message: "pod ns/p on n1", NeverStops: "the workspace is not on a volume"}
	stub := &stubProvider{hang: make(chan struct{}), health: want}
	close(stub.hang)
	got, err := serve(t, stub, 0).HealthCheck(t.Context(), sdk.SandboxRef{Name: "a"})
	if err != nil || got != want {
		t.Errorf("HealthCheck = %+v, %v; want %+v", got, err, want)
	}
}

func TestInvalidRequestsNeverReachTheProvider(t *testing.T) {
	stub := &stubProvider{}
	c := serve(t, stub, 0)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"name with a path", func() error { return c.Teardown(ctx, sdk.SandboxRef{Name: "../etc"}) }},
		{"upper-case name", func() error { _, err := c.HealthCheck(ctx, sdk.SandboxRef{Name: "Dev"}); return err }},
		{"empty name", func() error {
			_, err := c.EnsureRunning(ctx, sdk.Spec{Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}})
			return err
		}},
		{"unknown network mode", func() error {
			_, err := c.EnsureRunning(ctx, sdk.Spec{SandboxRef: sdk.SandboxRef{Name: "a"}, Network: sdk.NetworkPolicy{Mode: "opn"}})
			return err
		}},
		{"empty argv", func() error {
			_, err := c.Exec(ctx, sdk.ExecRequest{Sandbox: sdk.SandboxRef{Name: "a"}}, sdk.ExecIO{})
			return err
		}},
		{"env name with =", func() error {
			_, err := c.Exec(ctx, sdk.ExecRequest{Sandbox: sdk.SandboxRef{Name: "a"}, Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}, sdk.ExecIO{})
			return err
		}},
		{"NUL in an argument", func() error {
			_, err := c.Exec(ctx, sdk.ExecRequest{Sandbox: sdk.SandboxRef{Name: "a"}, Argv: []string{"echo", "a\x00b"}}, sdk.ExecIO{})
			return err
		}},
	} {
		if err := tc.call(); !errors.Is(err, sdk.ErrInvalid) {
			t.Errorf("%s: err = %v, want sdk.ErrInvalid", tc.name, err)
		}
	}
	if len(stub.seen) != 0 {
		t.Errorf("the provider saw invalid execs: %+v", stub.seen)
	}
}

func TestExecRequestCrossesIntact(t *testing.T) {
	stub := &stubProvider{}
	c := serve(t, stub, 0)
	req := sdk.ExecRequest{
		Sandbox:     sdk.SandboxRef{Name: "a", ID: "id-1", Config: []byte(`{"root":"/x"}`)},
		Argv:        []string{"sh", "-c", "echo 'a b'"},
		Env:         map[string]string{"K": "v w"},
		Dir:         "sub",
		User:        "amelia",
		Size:        sdk.TermSize{Rows: 24, Cols: 80},
		CancelGrace: 1500 * time.Millisecond,
		Timeout:     time.Minute,
		Traffic:     sdk.TrafficMessages,
	}
	if _, err := c.Exec(t.Context(), req, sdk.ExecIO{}); err != nil {
		t.Fatal(err)
	}
	if len(stub.seen) != 1 || fmt.Sprint(stub.seen[0]) != fmt.Sprint(req) {
		t.Errorf("provider saw %+v, want %+v", stub.seen, req)
	}
}

func TestSandboxCrossesIntact(t *testing.T) {
	want := sdk.Sandbox{
		Ref:     sdk.SandboxRef{Name: "a", ID: "id-1", Config: []byte(`{"root":"/x"}`)},
		Created: true,
		Workdir: "/workspace",
		Details: map[string]string{"container": "c1"},
		Worker:  sdk.WorkerPlace{Dir: "/srv/bin", Preinstalled: []string{"/opt/amelia/bin/amelia-worker"}},
	}
	c := serve(t, &stubProvider{running: want}, 0)
	got, err := c.EnsureRunning(t.Context(), sdk.Spec{SandboxRef: sdk.SandboxRef{Name: "a"}, Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the host got %+v, want %+v", got, want)
	}
}

// stdinIgnorer runs execs that never read stdin and end when cancelled.
type stdinIgnorer struct{ *stubProvider }

func (stdinIgnorer) Exec(ctx context.Context, _ sdk.ExecRequest, _ sdk.ExecIO) (sdk.ExitStatus, error) {
	<-ctx.Done()
	return sdk.ExitStatus{Code: 143, Signal: "TERM"}, nil
}

// A host that ignores its stdin credit is refused rather than buffered.
func TestStdinBeyondCreditIsRefused(t *testing.T) {
	cc := dial(t, stdinIgnorer{&stubProvider{}}, 0)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // fail, never hang
	defer cancel()
	stream, err := pb.NewProviderClient(cc).Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := &pb.ExecStart{Sandbox: &pb.SandboxRef{Name: "a"}, Argv: []string{"cat"}, Stdin: true}
	if err := stream.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: start}}); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for range providerwire.StdinWindow/len(chunk) + 1 {
		if err := stream.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Stdin{Stdin: chunk}}); err != nil {
			break // the server already gave up
		}
	}
	for {
		_, err := stream.Recv()
		if err != nil {
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "credit") {
				t.Errorf("err = %v, want InvalidArgument about the stdin credit", err)
			}
			return
		}
	}
}

func TestValidName(t *testing.T) {
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"a", true}, {"0", true}, {"dev-1_x", true}, {strings.Repeat("a", 63), true},
		{"", false}, {"-a", false}, {"_a", false}, {"A", false}, {"a.b", false}, {"a b", false},
		{strings.Repeat("a", 64), false}, {"é", false},
	} {
		if got := sdk.ValidName(tt.s); got != tt.want {
			t.Errorf("sdk.ValidName(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

// validatingProvider checks its settings: it answers problems, or fails.
type validatingProvider struct {
	*stubProvider
	seen     []sdk.ValidateRequest
	problems []sdk.Problem
	err      error
}

func (v *validatingProvider) ValidateSettings(_ context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	v.seen = append(v.seen, req)
	return v.problems, v.err
}

func TestValidateSettingsCrossesTheBoundary(t *testing.T) {
	req := sdk.ValidateRequest{
		Config:  []byte(`{"resources":{"memroy":"4g"}}`),
		Network: sdk.NetworkPolicy{Mode: sdk.NetworkAllowlist, AllowedHosts: []string{"github.com"}},
	}
	for _, tc := range []struct {
		name     string
		provider sdk.Provider
		want     []sdk.Problem
		err      error // the kind it matches; nil: no error
	}{
		{
			name: "problems come back, each on one line",
			provider: &validatingProvider{stubProvider: &stubProvider{}, problems: []sdk.Problem{
				{Key: "resources.memroy", Message: "unknown key, did you mean memory? (known: cpus, memory, pids)"},
				{Key: "", Message: "two\nlines"},
			}},
			want: []sdk.Problem{
				{Key: "resources.memroy", Message: "unknown key, did you mean memory? (known: cpus, memory, pids)"},
				{Key: "", Message: "two lines"},
			},
		},
		{name: "good settings", provider: &validatingProvider{stubProvider: &stubProvider{}}, want: []sdk.Problem{}},
		{name: "the check itself failed", provider: &validatingProvider{stubProvider: &stubProvider{}, err: sdk.Errorf(sdk.ErrUnavailable, "no disk")}, err: sdk.ErrUnavailable},
		{name: "a provider that cannot check", provider: &stubProvider{}, err: sdk.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serve(t, tc.provider, 0).ValidateSettings(t.Context(), req)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Errorf("err = %v, want one matching %v", err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
			v := tc.provider.(*validatingProvider)
			if len(v.seen) != 1 || fmt.Sprint(v.seen[0]) != fmt.Sprint(req) {
				t.Errorf("the provider saw %+v, want %+v", v.seen, req)
			}
		})
	}
}

func TestValidateSettingsRefusesAnUnknownNetworkMode(t *testing.T) {
	v := &validatingProvider{stubProvider: &stubProvider{}}
	_, err := serve(t, v, 0).ValidateSettings(t.Context(), sdk.ValidateRequest{Network: sdk.NetworkPolicy{Mode: "opn"}})
	if !errors.Is(err, sdk.ErrInvalid) || len(v.seen) != 0 {
		t.Errorf("err = %v, provider saw %v; want sdk.ErrInvalid and nothing seen", err, v.seen)
	}
}

// Every field of Info crosses the wire both ways: a capability the
// conversion forgot would reach the host as false.
func TestInfoRoundTrip(t *testing.T) {
	t.Parallel()
	in := sdk.Info{
		Name: "p", Version: "1.2.3", APIVersions: []int{1}, Description: "a provider",
		Capabilities: sdk.Capabilities{
			EgressModes: []sdk.NetworkMode{sdk.NetworkOpen, sdk.NetworkNone},
			Isolated:    true, ExecAsRoot: true, ResourceLimits: true, TTY: true, RunUsers: true,
		},
	}
	if got := infoThroughTheWire(t, in); !reflect.DeepEqual(got, in) {
		t.Errorf("Info after the wire = %+v, want %+v", got, in)
	}
	// Each capability alone: none is carried by another's field.
	c := reflect.ValueOf(&in.Capabilities).Elem()
	for i := range c.NumField() {
		if c.Field(i).Kind() != reflect.Bool {
			continue
		}
		one := sdk.Info{Name: "p"}
		reflect.ValueOf(&one.Capabilities).Elem().Field(i).SetBool(true)
		if got := infoThroughTheWire(t, one); !reflect.DeepEqual(got.Capabilities, one.Capabilities) {
			t.Errorf("%s alone after the wire = %+v", c.Type().Field(i).Name, got.Capabilities)
		}
	}
}

// infoProvider's Info is info.
type infoProvider struct {
	*stubProvider
	info sdk.Info
}

func (p infoProvider) Info(context.Context) (sdk.Info, error) { return p.info, nil }

// infoThroughTheWire is in as the host gets it from a provider that
// answers it.
func infoThroughTheWire(t *testing.T, in sdk.Info) sdk.Info {
	t.Helper()
	got, err := serve(t, infoProvider{&stubProvider{}, in}, 0).Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return got
}
