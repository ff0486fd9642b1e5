package sdk

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

func TestErrorsCrossTheBoundary(t *testing.T) {
	for _, kind := range []error{ErrNotFound, ErrInvalid, ErrUnavailable, ErrUnsupported, ErrPermission, ErrConflict, ErrTimeout, context.Canceled} {
		sent := fmt.Errorf("sandbox x: %w", kind)
		got := fromStatus(toStatus(sent))
		if !errors.Is(got, kind) || got.Error() != sent.Error() {
			t.Errorf("%v: came back as %q (matches: %v), want %q matching it", kind, got, errors.Is(got, kind), sent)
		}
	}
	plain := fromStatus(toStatus(errors.New("disk on fire")))
	if plain.Error() != "disk on fire" || errors.Is(plain, ErrUnavailable) {
		t.Errorf("an unclassified error came back as %q", plain)
	}
	if e := Errorf(ErrNotFound, "no sandbox %q", "a"); !errors.Is(fromStatus(toStatus(e)), ErrNotFound) || e.Error() != `no sandbox "a"` {
		t.Errorf("Errorf: %v", e)
	}
}

// stubProvider answers every call; its health check can hang.
type stubProvider struct {
	hang    chan struct{}
	seen    []ExecRequest
	running Sandbox
}

func (s *stubProvider) Info(context.Context) (Info, error) { return Info{Name: "stub"}, nil }
func (s *stubProvider) EnsureRunning(_ context.Context, spec Spec) (Sandbox, error) {
	return s.running, nil
}
func (s *stubProvider) Exec(_ context.Context, req ExecRequest, _ ExecIO) (ExitStatus, error) {
	s.seen = append(s.seen, req)
	return ExitStatus{}, nil
}
func (s *stubProvider) Teardown(context.Context, SandboxRef) error { return nil }
func (s *stubProvider) HealthCheck(ctx context.Context, _ SandboxRef) (Health, error) {
	<-s.hang // ignores ctx, as a broken provider would
	return Health{State: HealthReady}, nil
}

// serve puts p behind the gRPC shim on a unix socket.
func serve(t *testing.T, p Provider, configure func(*Server)) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(p)
	if configure != nil {
		configure(srv)
	}
	gs := grpc.NewServer()
	RegisterServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(); gs.Stop() })
	return NewClient(cc)
}

func TestHealthCheckIsBoundedEvenWhenTheProviderHangs(t *testing.T) {
	stub := &stubProvider{hang: make(chan struct{})}
	defer close(stub.hang)
	c := serve(t, stub, func(s *Server) { s.healthTimeout = 100 * time.Millisecond })
	_, err := c.HealthCheck(t.Context(), SandboxRef{Name: "a"})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "took longer than 100ms") {
		t.Errorf("err = %v, want ErrTimeout saying the bound", err)
	}
}

func TestInvalidRequestsNeverReachTheProvider(t *testing.T) {
	stub := &stubProvider{}
	c := serve(t, stub, nil)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"name with a path", func() error { return c.Teardown(ctx, SandboxRef{Name: "../etc"}) }},
		{"upper-case name", func() error { _, err := c.HealthCheck(ctx, SandboxRef{Name: "Dev"}); return err }},
		{"empty name", func() error {
			_, err := c.EnsureRunning(ctx, Spec{Network: NetworkPolicy{Mode: NetworkOpen}})
			return err
		}},
		{"unknown network mode", func() error {
			_, err := c.EnsureRunning(ctx, Spec{SandboxRef: SandboxRef{Name: "a"}, Network: NetworkPolicy{Mode: "opn"}})
			return err
		}},
		{"empty argv", func() error {
			_, err := c.Exec(ctx, ExecRequest{Sandbox: SandboxRef{Name: "a"}}, ExecIO{})
			return err
		}},
		{"env name with =", func() error {
			_, err := c.Exec(ctx, ExecRequest{Sandbox: SandboxRef{Name: "a"}, Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}, ExecIO{})
			return err
		}},
		{"NUL in an argument", func() error {
			_, err := c.Exec(ctx, ExecRequest{Sandbox: SandboxRef{Name: "a"}, Argv: []string{"echo", "a\x00b"}}, ExecIO{})
			return err
		}},
	} {
		if err := tc.call(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", tc.name, err)
		}
	}
	if len(stub.seen) != 0 {
		t.Errorf("the provider saw invalid execs: %+v", stub.seen)
	}
}

func TestExecRequestCrossesIntact(t *testing.T) {
	stub := &stubProvider{}
	c := serve(t, stub, nil)
	req := ExecRequest{
		Sandbox:     SandboxRef{Name: "a", ID: "id-1", Config: []byte(`{"root":"/x"}`)},
		Argv:        []string{"sh", "-c", "echo 'a b'"},
		Env:         map[string]string{"K": "v w"},
		Dir:         "sub",
		User:        "amelia",
		Size:        TermSize{Rows: 24, Cols: 80},
		CancelGrace: 1500 * time.Millisecond,
		Timeout:     time.Minute,
		Traffic:     TrafficMessages,
	}
	if _, err := c.Exec(t.Context(), req, ExecIO{}); err != nil {
		t.Fatal(err)
	}
	if len(stub.seen) != 1 || fmt.Sprint(stub.seen[0]) != fmt.Sprint(req) {
		t.Errorf("provider saw %+v, want %+v", stub.seen, req)
	}
}

func TestSandboxCrossesIntact(t *testing.T) {
	want := Sandbox{
		Ref:     SandboxRef{Name: "a", ID: "id-1", Config: []byte(`{"root":"/x"}`)},
		Created: true,
		Workdir: "/workspace",
		Details: map[string]string{"container": "c1"},
		Worker:  WorkerPlace{Dir: "/srv/bin", Preinstalled: []string{"/opt/amelia/bin/amelia-worker"}},
	}
	c := serve(t, &stubProvider{running: want}, nil)
	got, err := c.EnsureRunning(t.Context(), Spec{SandboxRef: SandboxRef{Name: "a"}, Network: NetworkPolicy{Mode: NetworkOpen}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the host got %+v, want %+v", got, want)
	}
}

// stdinIgnorer runs execs that never read stdin and end when cancelled.
type stdinIgnorer struct{ *stubProvider }

func (stdinIgnorer) Exec(ctx context.Context, _ ExecRequest, _ ExecIO) (ExitStatus, error) {
	<-ctx.Done()
	return ExitStatus{Code: 143, Signal: "TERM"}, nil
}

// A host that ignores its stdin credit is refused rather than buffered.
func TestStdinBeyondCreditIsRefused(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	RegisterServer(gs, NewServer(stdinIgnorer{&stubProvider{}}))
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close(); gs.Stop() })

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
	for range StdinWindow/len(chunk) + 1 {
		if err := stream.Send(&pb.ExecRequest{Msg: &pb.ExecRequest_Stdin{Stdin: chunk}}); err != nil {
			break // the server already gave up
		}
	}
	for {
		_, err := stream.Recv()
		if err != nil {
			if !errors.Is(fromStatus(err), ErrInvalid) || !strings.Contains(err.Error(), "credit") {
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
		if got := ValidName(tt.s); got != tt.want {
			t.Errorf("ValidName(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

// validatingProvider checks its settings: it answers problems, or fails.
type validatingProvider struct {
	*stubProvider
	seen     []ValidateRequest
	problems []Problem
	err      error
}

func (v *validatingProvider) ValidateSettings(_ context.Context, req ValidateRequest) ([]Problem, error) {
	v.seen = append(v.seen, req)
	return v.problems, v.err
}

func TestValidateSettingsCrossesTheBoundary(t *testing.T) {
	req := ValidateRequest{
		Config:  []byte(`{"resources":{"memroy":"4g"}}`),
		Network: NetworkPolicy{Mode: NetworkAllowlist, AllowedHosts: []string{"github.com"}},
	}
	for _, tc := range []struct {
		name     string
		provider Provider
		want     []Problem
		err      error // the kind it matches; nil: no error
	}{
		{
			name: "problems come back, each on one line",
			provider: &validatingProvider{stubProvider: &stubProvider{}, problems: []Problem{
				{Key: "resources.memroy", Message: "unknown key, did you mean memory? (known: cpus, memory, pids)"},
				{Key: "", Message: "two\nlines"},
			}},
			want: []Problem{
				{Key: "resources.memroy", Message: "unknown key, did you mean memory? (known: cpus, memory, pids)"},
				{Key: "", Message: "two lines"},
			},
		},
		{name: "good settings", provider: &validatingProvider{stubProvider: &stubProvider{}}, want: []Problem{}},
		{name: "the check itself failed", provider: &validatingProvider{stubProvider: &stubProvider{}, err: Errorf(ErrUnavailable, "no disk")}, err: ErrUnavailable},
		{name: "a provider that cannot check", provider: &stubProvider{}, err: ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := serve(t, tc.provider, nil).ValidateSettings(t.Context(), req)
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
	_, err := serve(t, v, nil).ValidateSettings(t.Context(), ValidateRequest{Network: NetworkPolicy{Mode: "opn"}})
	if !errors.Is(err, ErrInvalid) || len(v.seen) != 0 {
		t.Errorf("err = %v, provider saw %v; want ErrInvalid and nothing seen", err, v.seen)
	}
}
