// Package sdktest is the conformance kit for sandbox providers. A provider,
// Amelia's own or a third party's, calls Run from its tests:
//
//	func TestConformance(t *testing.T) {
//		sdktest.Run(t, sdktest.Config{Command: func() *exec.Cmd { return exec.Command(pluginBinary) }})
//	}
//
// Every case goes through the real gRPC shim: a provider given as a value is
// served on a gRPC server in the test process; one given as a command runs as
// a go-plugin subprocess exactly as Amelia runs it. Cases run processes with
// sh and coreutils inside the sandbox, and read /proc there.
package sdktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Config says which provider to test and how.
type Config struct {
	// Provider is served in-process through the gRPC shim. Set it or Command.
	Provider sdk.Provider
	// Command returns the (unstarted) plugin command; the kit launches it as
	// a go-plugin subprocess.
	Command func() *exec.Cmd
	// Settings is the provider settings block (a JSON object) of the test
	// sandboxes, as a profile would give it.
	Settings json.RawMessage
	// Network is the sandboxes' network mode; default open.
	Network sdk.NetworkMode
	// Timeout bounds each case; default 2 minutes.
	Timeout time.Duration
}

// Run runs the conformance cases against the provider.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if (cfg.Provider == nil) == (cfg.Command == nil) {
		t.Fatal("sdktest: set exactly one of Config.Provider and Config.Command")
	}
	if cfg.Network == "" {
		cfg.Network = sdk.NetworkOpen
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	run := make([]byte, 6)
	_, _ = rand.Read(run)
	k := &kit{cfg: cfg, p: connect(t, cfg), runID: hex.EncodeToString(run)}

	t.Run("Info", k.info)
	// One sandbox serves the cases that do not destroy it.
	k.sb = k.ensure(t, "shared")
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"EnsureRunningIdempotent", k.ensureIdempotent},
		{"ExitCodeAndStreamsKeptApart", k.streamsApart},
		{"EnvAndWorkdir", k.envAndWorkdir},
		{"UnknownCommandExits127", k.unknownCommand},
		{"FirstLineBeforeExit", k.firstLineBeforeExit},
		{"StdinPassthroughAndEOF", k.stdin},
		{"NoStdinIsEOF", k.noStdin},
		{"LargeOutputIntact", k.largeOutput},
		{"LargeStderrIntact", k.largeStderr},
		{"LargeStdinRoundTrip", k.largeStdin},
		{"BinaryOutputWithoutNewline", k.binaryOutput},
		{"CancelKillsProcessTree", k.cancelKillsTree},
		{"CancelSendsTermFirst", k.cancelTermFirst},
		{"CancelGraceThenKill", k.cancelGraceThenKill},
		{"CancelWhileStdinIsBlocked", k.cancelStdinBlocked},
		{"Timeout", k.timeout},
		{"ConcurrentExecs", k.concurrent},
		{"HealthCheckBounded", k.health},
	} {
		t.Run(c.name, c.run)
	}
	t.Run("TeardownThenExecIsNotFound", k.teardown)
	t.Run("ListFindsSandboxesByLabel", k.list)
}

type kit struct {
	cfg   Config
	p     sdk.Provider
	sb    sdk.Sandbox
	runID string // the amelia.sdktest-run label of this run's sandboxes
}

// connect puts the provider behind the real gRPC shim.
func connect(t *testing.T, cfg Config) sdk.Provider {
	t.Helper()
	logs := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("provider log:\n%s", logs.String())
		}
	})
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Command != nil {
		p, err := sdk.Launch(cfg.Command(), sdk.LaunchOptions{Name: "sdktest", Logger: logger})
		if err != nil {
			t.Fatalf("launch provider plugin: %v", err)
		}
		t.Cleanup(p.Close)
		return p
	}
	sock := filepath.Join(t.TempDir(), "provider.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	gs := grpc.NewServer()
	srv := sdk.NewServer(cfg.Provider)
	sdk.RegisterServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial provider: %v", err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		gs.Stop()
		srv.Shutdown(time.Second)
	})
	return sdk.NewClient(cc)
}

func (k *kit) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), k.cfg.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func (k *kit) spec(name string) sdk.Spec {
	return sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: name, Config: k.cfg.Settings},
		Network:    sdk.NetworkPolicy{Mode: k.cfg.Network},
		Labels:     map[string]string{"amelia.sdktest": "true", "amelia.sdktest-run": k.runID},
	}
}

// ensure starts a fresh sandbox for the test and tears it down afterwards.
func (k *kit) ensure(t *testing.T, purpose string) sdk.Sandbox {
	t.Helper()
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	name := "sdktest-" + purpose + "-" + hex.EncodeToString(id)
	sb, err := k.p.EnsureRunning(k.ctx(t), k.spec(name))
	if err != nil {
		t.Fatalf("EnsureRunning(%s): %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.cfg.Timeout)
		defer cancel()
		if err := k.p.Teardown(ctx, sb.Ref); err != nil {
			t.Errorf("Teardown(%s): %v", name, err)
		}
	})
	return sb
}

// result is a finished exec.
type result struct {
	st             sdk.ExitStatus
	stdout, stderr []byte
}

// run execs argv in the shared sandbox with stdin and waits for it.
func (k *kit) run(ctx context.Context, t *testing.T, req sdk.ExecRequest, stdin io.Reader) result {
	t.Helper()
	if req.Sandbox.Name == "" {
		req.Sandbox = k.sb.Ref
	}
	var out, errb bytes.Buffer
	st, err := k.p.Exec(ctx, req, sdk.ExecIO{Stdin: stdin, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("Exec(%q): %v (stderr so far: %q)", req.Argv, err, errb.String())
	}
	return result{st, out.Bytes(), errb.Bytes()}
}

func sh(script string) sdk.ExecRequest { return sdk.ExecRequest{Argv: []string{"sh", "-c", script}} }

func (k *kit) info(t *testing.T) {
	info, err := k.p.Info(k.ctx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Name == "" {
		t.Error("Info.Name is empty")
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

func (k *kit) ensureIdempotent(t *testing.T) {
	sb := k.ensure(t, "idem")
	if !sb.Created {
		t.Error("first EnsureRunning of a new sandbox: Created = false, want true")
	}
	if !strings.HasPrefix(sb.Workdir, "/") {
		t.Errorf("Workdir = %q, want an absolute path", sb.Workdir)
	}
	again, err := k.p.EnsureRunning(k.ctx(t), k.spec(sb.Ref.Name))
	if err != nil {
		t.Fatalf("second EnsureRunning: %v", err)
	}
	if again.Created {
		t.Error("second EnsureRunning: Created = true, want false (the sandbox was reused)")
	}
	if again.Ref.ID != sb.Ref.ID || again.Workdir != sb.Workdir {
		t.Errorf("second EnsureRunning gave %+v / %q, first gave %+v / %q", again.Ref.ID, again.Workdir, sb.Ref.ID, sb.Workdir)
	}
}

func (k *kit) streamsApart(t *testing.T) {
	r := k.run(k.ctx(t), t, sh("echo out; echo err >&2; echo out2; exit 43"), nil)
	if r.st.Code != 43 || r.st.Signal != "" || r.st.Canceled {
		t.Errorf("exit = %+v, want code 43", r.st)
	}
	if string(r.stdout) != "out\nout2\n" {
		t.Errorf("stdout = %q, want %q", r.stdout, "out\nout2\n")
	}
	if string(r.stderr) != "err\n" {
		t.Errorf("stderr = %q, want %q", r.stderr, "err\n")
	}
	if r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"true"}}, nil); r.st != (sdk.ExitStatus{}) {
		t.Errorf("true: exit = %+v, want code 0", r.st)
	}
}

func (k *kit) envAndWorkdir(t *testing.T) {
	req := sh(`printf '%s|%s' "$AMELIA_SDKTEST" "$(pwd -P)"`)
	req.Env = map[string]string{"AMELIA_SDKTEST": "a b'c"}
	r := k.run(k.ctx(t), t, req, nil)
	got := strings.SplitN(string(r.stdout), "|", 2)
	if len(got) != 2 || got[0] != "a b'c" {
		t.Fatalf("env: stdout = %q, want the variable's value %q first", r.stdout, "a b'c")
	}
	wd := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"sh", "-c", "cd " + shellQuote(k.sb.Workdir) + " && pwd -P"}}, nil)
	if got[1] != strings.TrimSpace(string(wd.stdout)) {
		t.Errorf("default working directory = %q, want the workdir %q", got[1], k.sb.Workdir)
	}
	k.run(k.ctx(t), t, sh("mkdir -p sub"), nil)
	req = sdk.ExecRequest{Argv: []string{"sh", "-c", "pwd -P"}, Dir: k.sb.Workdir + "/sub"}
	if r := k.run(k.ctx(t), t, req, nil); !strings.HasSuffix(strings.TrimSpace(string(r.stdout)), "/sub") {
		t.Errorf("Dir %q: pwd = %q", req.Dir, r.stdout)
	}
}

func (k *kit) unknownCommand(t *testing.T) {
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"amelia-sdktest-no-such-command"}}, nil)
	if r.st.Code != 127 {
		t.Errorf("unknown command: exit = %+v, want code 127 (as a shell reports it)", r.st)
	}
}

func (k *kit) firstLineBeforeExit(t *testing.T) {
	ctx := k.ctx(t)
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan result, 1)
	go func() {
		var errb bytes.Buffer
		st, err := k.p.Exec(ctx, sdk.ExecRequest{Sandbox: k.sb.Ref, Argv: []string{"sh", "-c", "echo first; read x; echo second $x"}},
			sdk.ExecIO{Stdin: stdinR, Stdout: outW, Stderr: &errb})
		outW.CloseWithError(err)
		done <- result{st: st}
	}()
	lines := newLineReader(outR)
	// The process is blocked on stdin until after this line is read, so the
	// line can only arrive here if output streams while the process runs.
	if line, err := lines.next(ctx); err != nil || line != "first" {
		t.Fatalf("first line = %q, %v; want \"first\" before the process exits", line, err)
	}
	_, _ = io.WriteString(stdinW, "go\n")
	_ = stdinW.Close()
	if line, err := lines.next(ctx); err != nil || line != "second go" {
		t.Fatalf("second line = %q, %v; want \"second go\"", line, err)
	}
	if r := <-done; r.st.Code != 0 {
		t.Errorf("exit = %+v, want 0", r.st)
	}
}

func (k *kit) stdin(t *testing.T) {
	in := "hello\x00world\nno newline at the end"
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"cat"}}, strings.NewReader(in))
	if string(r.stdout) != in || r.st.Code != 0 {
		t.Errorf("cat: stdout = %q exit %+v, want %q exit 0", r.stdout, r.st, in)
	}
}

func (k *kit) noStdin(t *testing.T) {
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"cat"}}, nil)
	if len(r.stdout) != 0 || r.st.Code != 0 {
		t.Errorf("cat without stdin: stdout = %q exit %+v, want nothing and 0", r.stdout, r.st)
	}
}

const eightMiB = 8 << 20

func (k *kit) largeOutput(t *testing.T) {
	r := k.run(k.ctx(t), t, sh("head -c 8388608 /dev/zero | tr '\\000' x"), nil)
	if len(r.stdout) != eightMiB || bytes.Count(r.stdout, []byte("x")) != eightMiB {
		t.Errorf("got %d bytes of output (%d of them 'x'), want %d x's", len(r.stdout), bytes.Count(r.stdout, []byte("x")), eightMiB)
	}
}

// Five MiB of stderr, between lines of stdout, comes back whole: a
// transport that drops stderr, or stops reading it while the command
// still writes (an SSH hop that never reads extended data hangs once its
// window of about 2 MiB is full), fails here.
func (k *kit) largeStderr(t *testing.T) {
	r := k.run(k.ctx(t), t, sh(`i=0; while [ $i -lt 80 ]; do head -c 65536 /dev/zero | tr '\000' e >&2; echo $i; i=$((i+1)); done`), nil)
	var lines strings.Builder
	for i := range 80 {
		fmt.Fprintf(&lines, "%d\n", i)
	}
	if len(r.stderr) != 5<<20 || bytes.Count(r.stderr, []byte("e")) != 5<<20 || string(r.stdout) != lines.String() || r.st.Code != 0 {
		t.Errorf("got %d bytes of stderr (%d of them 'e'), %d of stdout, exit %+v; want %d e's and the 80 lines", len(r.stderr), bytes.Count(r.stderr, []byte("e")), len(r.stdout), r.st, 5<<20)
	}
}

func (k *kit) largeStdin(t *testing.T) {
	in := make([]byte, eightMiB+123)
	_, _ = rand.Read(in)
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"cat"}}, bytes.NewReader(in))
	if !bytes.Equal(r.stdout, in) {
		t.Errorf("8 MiB of random bytes through cat: got %d bytes back, equal=%v", len(r.stdout), bytes.Equal(r.stdout, in))
	}
}

func (k *kit) binaryOutput(t *testing.T) {
	r := k.run(k.ctx(t), t, sh(`printf 'a\000b\377\r\nc'; printf 'e\001' >&2`), nil)
	if want := "a\x00b\xff\r\nc"; string(r.stdout) != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	if want := "e\x01"; string(r.stderr) != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
}

// startBlocking starts script in the background of the test; it must print
// lines the caller reads with the returned reader before cancelling.
func (k *kit) startBlocking(t *testing.T, req sdk.ExecRequest) (*lineReader, context.CancelFunc, <-chan result) {
	t.Helper()
	req.Sandbox = k.sb.Ref
	ctx, cancel := context.WithCancel(k.ctx(t))
	t.Cleanup(cancel)
	outR, outW := io.Pipe()
	done := make(chan result, 1)
	go func() {
		var errb bytes.Buffer
		st, err := k.p.Exec(ctx, req, sdk.ExecIO{Stdout: outW, Stderr: &errb})
		if err != nil {
			t.Errorf("Exec(%q) after cancel: %v (want an exit status, not an error; stderr %q)", req.Argv, err, errb.String())
		}
		_ = outW.Close()
		done <- result{st: st}
	}()
	return newLineReader(outR), cancel, done
}

func (k *kit) cancelKillsTree(t *testing.T) {
	marker := fmt.Sprintf("cancel-marker-%d", time.Now().UnixNano())
	// The outer shell, a child shell and its sleep form a tree; the child
	// would write the marker if it outlived the cancel.
	lines, cancel, done := k.startBlocking(t, sh(`echo $$; sh -c 'echo $$; sleep 600; echo survived > `+marker+`' & wait`))
	ctx := k.ctx(t)
	var pids []string
	for range 2 {
		line, err := lines.next(ctx)
		if err != nil {
			t.Fatalf("read pid: %v", err)
		}
		pids = append(pids, line)
	}
	cancel()
	r := <-done
	if !r.st.Canceled {
		t.Errorf("exit = %+v, want Canceled", r.st)
	}
	// Gone or a zombie (dead, not yet reaped) counts as killed.
	check := `for p in ` + strings.Join(pids, " ") + `; do
	  if kill -0 $p 2>/dev/null && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; then echo "alive $p: $(cat /proc/$p/cmdline | tr '\000' ' ')"; fi
	done; test -e ` + marker + ` && echo marker written; true`
	if r := k.run(k.ctx(t), t, sh(check), nil); len(r.stdout) != 0 {
		t.Errorf("after cancel, processes of the exec are still running:\n%s", r.stdout)
	}
}

func (k *kit) cancelTermFirst(t *testing.T) {
	marker := fmt.Sprintf("term-marker-%d", time.Now().UnixNano())
	req := sh(`trap 'echo term > ` + marker + `; exit 0' TERM; echo ready; while :; do sleep 0.1; done`)
	req.CancelGrace = time.Minute
	lines, cancel, done := k.startBlocking(t, req)
	if line, err := lines.next(k.ctx(t)); err != nil || line != "ready" {
		t.Fatalf("first line = %q, %v; want ready", line, err)
	}
	cancel()
	r := <-done
	if !r.st.Canceled || r.st.Code != 0 {
		t.Errorf("exit = %+v, want Canceled with code 0 (the TERM trap's exit)", r.st)
	}
	if out := k.run(k.ctx(t), t, sh("cat "+marker), nil); string(out.stdout) != "term\n" {
		t.Errorf("the TERM trap did not run before the process ended: marker = %q", out.stdout)
	}
}

func (k *kit) cancelGraceThenKill(t *testing.T) {
	const grace = 1500 * time.Millisecond
	req := sh(`trap '' TERM; echo ready; while :; do sleep 0.1; done`)
	req.CancelGrace = grace
	lines, cancel, done := k.startBlocking(t, req)
	if line, err := lines.next(k.ctx(t)); err != nil || line != "ready" {
		t.Fatalf("first line = %q, %v; want ready", line, err)
	}
	cancelled := time.Now()
	cancel()
	r := <-done
	// The process ignores TERM, so only SIGKILL ends it, and that must not
	// come before the grace period is over.
	if elapsed := time.Since(cancelled); elapsed < grace {
		t.Errorf("a process ignoring SIGTERM ended %v after cancel, before the %v grace period", elapsed, grace)
	}
	if !r.st.Canceled || r.st.Signal != "KILL" && r.st.Code != 137 {
		t.Errorf("exit = %+v, want Canceled and killed by KILL", r.st)
	}
}

// endless is stdin that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// A process that never reads its endless stdin fills every buffer on the way
// and the stream's flow-control window; cancelling must still stop it.
func (k *kit) cancelStdinBlocked(t *testing.T) {
	ctx, cancel := context.WithCancel(k.ctx(t))
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := k.p.Exec(ctx, sdk.ExecRequest{Sandbox: k.sb.Ref, Argv: []string{"sh", "-c", "echo $$; exec sleep 600"}, CancelGrace: time.Second},
			sdk.ExecIO{Stdin: endless{}, Stdout: outW})
		_ = outW.Close()
		done <- err
	}()
	pid, err := newLineReader(outR).next(ctx)
	if err != nil {
		t.Fatalf("read pid: %v", err)
	}
	cancel()
	// An exit status (Canceled) or an error matching context.Canceled are
	// both fine; the process must be gone either way.
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Exec after cancel: %v", err)
	}
	check := `p=` + pid + `; while kill -0 $p 2>/dev/null && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; do sleep 0.05; done; echo gone`
	ctx2, cancel2 := context.WithTimeout(k.ctx(t), 15*time.Second)
	defer cancel2()
	if r := k.run(ctx2, t, sh(check), nil); string(r.stdout) != "gone\n" {
		t.Errorf("the process that ignored its stdin is still running after cancel: %q", r.stdout)
	}
}

func (k *kit) timeout(t *testing.T) {
	req := sh("sleep 600")
	req.Timeout = 300 * time.Millisecond
	req.CancelGrace = time.Second
	r := k.run(k.ctx(t), t, req, nil)
	if !r.st.TimedOut || r.st.Code == 0 {
		t.Errorf("exit = %+v, want TimedOut with a non-zero code", r.st)
	}
}

func (k *kit) concurrent(t *testing.T) {
	const n, lines = 16, 300
	ctx := k.ctx(t)
	var wg sync.WaitGroup
	results := make([]result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var out, errb bytes.Buffer
			script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "exec-%d line-$i"; i=$((i+1)); done; echo "err-%d" >&2; exit %d`, lines, i, i, i)
			st, err := k.p.Exec(ctx, sdk.ExecRequest{Sandbox: k.sb.Ref, Argv: []string{"sh", "-c", script}}, sdk.ExecIO{Stdout: &out, Stderr: &errb})
			results[i], errs[i] = result{st, out.Bytes(), errb.Bytes()}, err
		})
	}
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil {
			t.Errorf("exec %d: %v", i, errs[i])
			continue
		}
		var want strings.Builder
		for j := range lines {
			fmt.Fprintf(&want, "exec-%d line-%d\n", i, j)
		}
		if string(r.stdout) != want.String() {
			t.Errorf("exec %d: stdout is not exactly its own %d lines (got %d bytes)", i, lines, len(r.stdout))
		}
		if string(r.stderr) != fmt.Sprintf("err-%d\n", i) || r.st.Code != i {
			t.Errorf("exec %d: stderr %q exit %+v", i, r.stderr, r.st)
		}
	}
}

func (k *kit) health(t *testing.T) {
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

func (k *kit) teardown(t *testing.T) {
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

// list checks the optional Lister: a provider without one answers
// ErrUnsupported and the case ends there, saying so. One with it lists the
// sandboxes carrying the labels asked for, with their labels, by refs that
// reach them, and stops listing a sandbox once it is torn down.
func (k *kit) list(t *testing.T) {
	ctx := k.ctx(t)
	l, ok := k.p.(sdk.Lister)
	if !ok {
		t.Fatalf("the kit's provider client %T has no List", k.p)
	}
	mine := map[string]string{"amelia.sdktest-run": k.runID}
	if _, err := l.List(ctx, sdk.ListRequest{Config: k.cfg.Settings, Labels: mine}); errors.Is(err, sdk.ErrUnsupported) {
		t.Logf("the provider does not implement sdk.Lister (List: %v); nothing more to check", err)
		return
	}
	sb := k.ensure(t, "list")
	found, err := l.List(ctx, sdk.ListRequest{Config: k.cfg.Settings, Labels: mine})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	var got *sdk.Listed
	for i, f := range found {
		if f.Labels["amelia.sdktest-run"] != k.runID {
			t.Errorf("List(labels %v) gave %s with labels %v", mine, f.Ref.Name, f.Labels)
		}
		if f.Ref.Name == sb.Ref.Name {
			got = &found[i]
		}
	}
	if got == nil {
		t.Fatalf("List(labels %v) = %v, want it to include %s", mine, found, sb.Ref.Name)
	}
	if got.Labels["amelia.sdktest"] != "true" {
		t.Errorf("listed labels %v, want the ones EnsureRunning was given", got.Labels)
	}
	if got.State != sdk.HealthReady {
		t.Errorf("listed state of a running sandbox %q, want ready", got.State)
	}
	if h, err := k.p.HealthCheck(ctx, got.Ref); err != nil || h.State != sdk.HealthReady {
		t.Errorf("HealthCheck by the listed ref: %+v, %v; want ready", h, err)
	}
	other, err := l.List(ctx, sdk.ListRequest{Config: k.cfg.Settings, Labels: map[string]string{"amelia.sdktest-run": "not-" + k.runID}})
	if err != nil || len(other) != 0 {
		t.Errorf("List with a label no sandbox carries = %v, %v; want none", other, err)
	}
	if err := k.p.Teardown(ctx, sb.Ref); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	found, err = l.List(ctx, sdk.ListRequest{Config: k.cfg.Settings, Labels: mine})
	if err != nil {
		t.Fatalf("List after Teardown: %v", err)
	}
	for _, f := range found {
		if f.Ref.Name == sb.Ref.Name {
			t.Errorf("List after Teardown still lists %s", sb.Ref.Name)
		}
	}
}

// lineReader reads lines from a stream with a context deadline.
type lineReader struct {
	ch chan lineOrErr
}

type lineOrErr struct {
	line string
	err  error
}

func newLineReader(r io.Reader) *lineReader {
	lr := &lineReader{ch: make(chan lineOrErr, 1024)} // never blocks the exec in these cases
	go func() {
		var buf []byte
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			buf = append(buf, b[:n]...)
			for {
				i := bytes.IndexByte(buf, '\n')
				if i < 0 {
					break
				}
				lr.ch <- lineOrErr{line: string(buf[:i])}
				buf = buf[i+1:]
			}
			if err != nil {
				lr.ch <- lineOrErr{err: fmt.Errorf("output ended (%w) after %q", err, buf)}
				close(lr.ch)
				return
			}
		}
	}()
	return lr
}

func (lr *lineReader) next(ctx context.Context) (string, error) {
	select {
	case l, ok := <-lr.ch:
		if !ok {
			return "", io.EOF
		}
		return l.line, l.err
	case <-ctx.Done():
		return "", fmt.Errorf("no line before the deadline: %w", ctx.Err())
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
