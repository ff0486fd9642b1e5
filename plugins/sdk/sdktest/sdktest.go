// Package sdktest is the conformance kit for sandbox providers. A provider,
// Amelia's own or a third party's, calls Run from its tests:
//
//	func TestConformance(t *testing.T) {
//		sdktest.Run(t, sdktest.Config{
//			Command:  func() *exec.Cmd { return exec.Command(pluginBinary) },
//			Settings: json.RawMessage(`{"root": "/tmp/x"}`),
//		})
//	}
//
// The cases come in groups (Lifecycle, Exec, Cancel, FailClosed,
// Capabilities, Forwarder, Lister, Settings, Preparer), each a subtest named after
// it, with a subtest per case: `go test -run 'TestConformance/Cancel'`
// runs one group,
// Config.Groups a chosen few, and Config.Skip leaves out single cases, each
// with the reason, which the skip reports.
//
// Every case goes through the real gRPC shim: a provider given as a value is
// served on a gRPC server in the test process; one given as a command runs as
// a go-plugin subprocess exactly as Amelia runs it. Cases run processes with
// sh and coreutils inside the sandbox, and read /proc there; the Forwarder
// cases connect with bash (or python3) in the sandbox.
//
// The kit has self-tests: a reference provider passes every group, and
// broken variants of it each fail the case that checks the rule they break.
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
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
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
	// Labels go on every sandbox the kit starts, beside its own
	// amelia.sdktest ones, so that the caller's cleanup can find what a
	// failed case left behind, and only that.
	Labels map[string]string
	// Timeout bounds each case; default 2 minutes.
	Timeout time.Duration

	// Groups are the groups to run; empty means all of them. The others
	// are reported as skipped.
	Groups []Group
	// Skip names cases not to run (the case's name, as in
	// "CancelGraceThenKill"), each with the reason, which must not be
	// empty; a name that is no case is an error too. A skipped case is
	// reported as skipped with its reason.
	Skip map[string]string
	// PidsLimit is the process limit that Settings give the sandboxes, for
	// a provider that declares ResourceLimits; zero means they set none,
	// and the case checking it is skipped.
	PidsLimit int
}

// Group is a named group of the kit's cases.
type Group string

// The groups of cases.
const (
	// Lifecycle: Info; EnsureRunning is idempotent, and EnsureRunning of
	// one new sandbox from Callers connections at once (each a plugin
	// process of its own) succeeds for all of them, on one sandbox that
	// one of them created; HealthCheck answers within its bound; Teardown
	// twice is fine and leaves Exec and HealthCheck ErrNotFound;
	// EnsureRunning after Teardown makes a new sandbox without the old
	// one's files.
	Lifecycle Group = "Lifecycle"
	// Exec: a non-zero exit is a status, not an error; exit codes and
	// the two streams kept apart, env and working directory, 127 for an
	// unknown command, the signal that killed a command, streaming, stdin
	// and its EOF, large and binary output and input, concurrent execs;
	// a process an exec leaves in a session of its own outlives it, seen
	// by the next exec under the same pid.
	Exec Group = "Exec"
	// Cancel: a cancelled exec's whole process tree is stopped, SIGTERM
	// first, SIGKILL after the grace period, even while stdin is pending;
	// timeouts.
	Cancel Group = "Cancel"
	// FailClosed: what the provider did not declare is refused — a network
	// mode outside Capabilities.EgressModes and a TTY or root without
	// Capabilities.TTY or ExecAsRoot, with ErrUnsupported; settings with a
	// key it does not know, with ErrInvalid naming the key — and a user
	// asked for is honoured or refused, never ignored.
	FailClosed Group = "FailClosed"
	// Capabilities: what the provider declares works — a terminal for TTY,
	// uid 0 for ExecAsRoot, and for ResourceLimits the process limit of
	// Config.PidsLimit.
	Capabilities Group = "Capabilities"
	// Forwarder: the optional sdk.Forwarder connects a connection made in
	// the sandbox to the announced address through to the target on the
	// host, and stops when its context ends. ErrUnsupported is allowed.
	Forwarder Group = "Forwarder"
	// Lister: the optional sdk.Lister lists a sandbox by its labels, with
	// them, by a ref that reaches it, and no longer once it is torn down.
	Lister Group = "Lister"
	// Settings: the optional sdk.SettingsValidator agrees with
	// EnsureRunning — no problem with Config.Settings, and a problem at
	// its whole key path for an unknown key, nested ones included, which
	// EnsureRunning refuses too. ErrUnsupported skips the group.
	Settings Group = "Settings"
	// Preparer: the optional sdk.Preparer keeps a setup once (a second
	// Prepare is up to date), EnsureRunning with it makes a sandbox that
	// names it in Details["setup"] and holds its result once, and a
	// failing command is an error naming it and its exit status, with
	// nothing kept. ErrUnsupported skips the group.
	Preparer Group = "Preparer"
)

// AllGroups returns every group, in the order Run runs them.
func AllGroups() []Group {
	var groups []Group
	for _, g := range (&kit{}).table() {
		groups = append(groups, g.name)
	}
	return groups
}

// Run runs the conformance cases against the provider.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	RunT(testingT{t}, cfg)
}

// RunT is Run for any T.
func RunT(t T, cfg Config) {
	t.Helper()
	if (cfg.Provider == nil) == (cfg.Command == nil) {
		t.Fatalf("sdktest: set exactly one of Config.Provider and Config.Command")
	}
	if cfg.Network == "" {
		cfg.Network = sdk.NetworkOpen
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Minute
	}
	run := make([]byte, 6)
	_, _ = rand.Read(run)
	k := &kit{cfg: cfg, runID: hex.EncodeToString(run)}
	table := k.table()
	if err := checkConfig(cfg, table); err != nil {
		t.Fatalf("sdktest: %v", err)
	}
	k.p = connect(t, cfg)
	info, err := k.p.Info(k.ctx(t))
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	k.info = info
	// One sandbox serves the cases that do not destroy it.
	if slices.ContainsFunc(table, func(g group) bool { return g.name != Lister && k.selected(g.name) }) {
		k.sb = k.ensure(t, "shared")
	}
	for _, g := range table {
		t.Run(string(g.name), func(t T) {
			if !k.selected(g.name) {
				t.Skipf("group %s is not in Config.Groups", g.name)
			}
			for _, c := range g.cases {
				t.Run(c.name, func(t T) {
					if reason, ok := cfg.Skip[c.name]; ok {
						t.Skipf("SKIPPED by the provider's Config.Skip: %s", reason)
					}
					c.run(t)
				})
			}
		})
	}
}

// group is a group's cases, in the order they run.
type group struct {
	name  Group
	cases []kcase
}

type kcase struct {
	name string
	run  func(T)
}

// table is every case of the kit, by group.
func (k *kit) table() []group {
	return []group{
		{Lifecycle, []kcase{
			{"Info", k.infoCase},
			{"EnsureRunningIdempotent", k.ensureIdempotent},
			{"ConcurrentEnsureRunningConverges", k.concurrentEnsure},
			{"HealthCheckBounded", k.health},
			{"TeardownThenExecIsNotFound", k.teardown},
			{"EnsureAfterTeardown", k.ensureAfterTeardown},
		}},
		{Exec, []kcase{
			{"NonZeroExitIsAStatus", k.nonZeroExit},
			{"ExitCodeAndStreamsKeptApart", k.streamsApart},
			{"EnvAndWorkdir", k.envAndWorkdir},
			{"UnknownCommandExits127", k.unknownCommand},
			{"KilledBySignalIsNamed", k.killedBySignal},
			{"FirstLineBeforeExit", k.firstLineBeforeExit},
			{"StdinPassthroughAndEOF", k.stdin},
			{"NoStdinIsEOF", k.noStdin},
			{"LargeOutputIntact", k.largeOutput},
			{"LargeStderrIntact", k.largeStderr},
			{"LargeStdinRoundTrip", k.largeStdin},
			{"BinaryOutputWithoutNewline", k.binaryOutput},
			{"ConcurrentExecs", k.concurrent},
			{"DetachedOutlivesItsExec", k.detachedOutlivesExec},
		}},
		{Cancel, []kcase{
			{"CancelKillsProcessTree", k.cancelKillsTree},
			{"CancelSendsTermFirst", k.cancelTermFirst},
			{"CancelGraceThenKill", k.cancelGraceThenKill},
			{"CancelWhileStdinIsBlocked", k.cancelStdinBlocked},
			{"Timeout", k.timeout},
		}},
		{FailClosed, []kcase{
			{"UndeclaredNetworkModeRefused", k.undeclaredNetwork},
			{"UnknownSettingsKeyRefused", k.unknownSettingsKey},
			{"TTYRefusedWhenNotDeclared", k.ttyRefused},
			{"RootRefusedWhenNotDeclared", k.rootRefused},
			{"UserHonouredOrRefused", k.userHonouredOrRefused},
		}},
		{Capabilities, []kcase{
			{"TTYWhenDeclared", k.ttyWorks},
			{"RootWhenDeclared", k.rootWorks},
			{"PidsLimit", k.pidsLimit},
			{"RunUsers", k.runUsers},
		}},
		{Forwarder, []kcase{
			{"ForwardReachesTarget", k.forwardReaches},
			{"ForwardStopsWithContext", k.forwardStops},
		}},
		{Lister, []kcase{
			{"ListedWithLabels", k.listed},
			{"NotListedAfterTeardown", k.notListedAfterTeardown},
		}},
		{Settings, k.settingsCases()},
		{Preparer, []kcase{
			{"PrepareKeepsTheSetup", k.prepareKeeps},
			{"FailedSetupKeepsNothing", k.prepareFailureKeepsNothing},
		}},
	}
}

// checkConfig refuses a selection the kit could not honour as written: a
// group or a case to skip that does not exist (a typo would silently run
// or skip something else), or a skip without its reason.
func checkConfig(cfg Config, table []group) error {
	var problems []string
	groups := map[Group]bool{}
	cases := map[string]bool{}
	for _, g := range table {
		groups[g.name] = true
		for _, c := range g.cases {
			cases[c.name] = true
		}
	}
	for _, g := range cfg.Groups {
		if !groups[g] {
			problems = append(problems, fmt.Sprintf("Config.Groups: no group %q", g))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cfg.Skip)) {
		switch {
		case !cases[name]:
			problems = append(problems, fmt.Sprintf("Config.Skip: no case %q (name a case, as in \"CancelGraceThenKill\")", name))
		case strings.TrimSpace(cfg.Skip[name]) == "":
			problems = append(problems, fmt.Sprintf("Config.Skip: case %q has no reason; say why it does not apply", name))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

func (k *kit) selected(g Group) bool {
	return len(k.cfg.Groups) == 0 || slices.Contains(k.cfg.Groups, g)
}

type kit struct {
	cfg   Config
	p     conn
	info  sdk.Info
	sb    sdk.Sandbox // the shared sandbox
	runID string      // the amelia.sdktest-run label of this run's sandboxes
	// hung is set once a Cancel case saw a cancelled Exec not end with
	// an exit status; the later ones fail at once instead of waiting
	// again.
	hung atomic.Bool
}

// conn is the kit's connection to the provider, the host's gRPC client
// (a *pluginclient.Client, or a *pluginclient.Plugin for a plugin
// subprocess): it has every
// optional interface, and answers ErrUnsupported for one the provider has
// not.
type conn interface {
	sdk.Provider
	sdk.Lister
	sdk.Forwarder
	sdk.SettingsValidator
	sdk.Preparer
}

// connect puts the provider behind the real gRPC shim.
func connect(t T, cfg Config) conn {
	t.Helper()
	logs := &Buffer{}
	t.Cleanup(func() {
		if t.Failed() && logs.String() != "" {
			t.Logf("provider log:\n%s", logs.String())
		}
	})
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if cfg.Command != nil {
		p, err := pluginclient.Launch(cfg.Command(), pluginclient.LaunchOptions{Name: "sdktest", Logger: logger})
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
	stop := sdk.ServeListener(cfg.Provider, lis)
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		stop()
		t.Fatalf("dial provider: %v", err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		stop()
	})
	return pluginclient.NewClient(cc)
}

func (k *kit) ctx(t T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), k.cfg.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func (k *kit) spec(name string) sdk.Spec {
	labels := maps.Clone(k.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels["amelia.sdktest"], labels["amelia.sdktest-run"] = "true", k.runID
	return sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: name, Config: k.cfg.Settings},
		Network:    sdk.NetworkPolicy{Mode: k.cfg.Network},
		Labels:     labels,
	}
}

// ensure starts a fresh sandbox for the test and tears it down afterwards.
func (k *kit) ensure(t T, purpose string) sdk.Sandbox {
	t.Helper()
	name := freshName(purpose)
	sb, err := k.p.EnsureRunning(k.ctx(t), k.spec(name))
	if err != nil {
		t.Fatalf("EnsureRunning(%s): %v", name, err)
	}
	k.teardownAtEnd(t, sb.Ref)
	return sb
}

// freshName is a sandbox name no other sandbox has.
func freshName(purpose string) string {
	id := make([]byte, 4)
	_, _ = rand.Read(id)
	return "sdktest-" + purpose + "-" + hex.EncodeToString(id)
}

// teardownAtEnd tears the sandbox down when the test ends.
func (k *kit) teardownAtEnd(t T, ref sdk.SandboxRef) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.cfg.Timeout)
		defer cancel()
		if err := k.p.Teardown(ctx, ref); err != nil {
			t.Errorf("Teardown(%s): %v", ref.Name, err)
		}
	})
}

// in is req for the sandbox sb.
func (k *kit) in(sb sdk.Sandbox, req sdk.ExecRequest) sdk.ExecRequest {
	req.Sandbox = sb.Ref
	return req
}

// result is a finished exec.
type result struct {
	st             sdk.ExitStatus
	stdout, stderr []byte
	err            error // of an exec the caller waits for itself
}

// run execs argv in the shared sandbox with stdin and waits for it.
func (k *kit) run(ctx context.Context, t T, req sdk.ExecRequest, stdin io.Reader) result {
	t.Helper()
	if req.Sandbox.Name == "" {
		req.Sandbox = k.sb.Ref
	}
	var out, errb bytes.Buffer
	st, err := k.p.Exec(ctx, req, sdk.ExecIO{Stdin: stdin, Stdout: &out, Stderr: &errb})
	if err != nil {
		hint := ""
		if strings.Contains(err.Error(), "exit") {
			hint = " (if the command ran and exited, that is no error; " + ruleExitStatus + ")"
		}
		t.Fatalf("Exec(%q): %v (stderr so far: %q)%s", req.Argv, err, errb.String(), hint)
	}
	checkSignal(t, fmt.Sprintf("Exec(%q)", req.Argv), st)
	return result{st: st, stdout: out.Bytes(), stderr: errb.Bytes()}
}

func sh(script string) sdk.ExecRequest { return sdk.ExecRequest{Argv: []string{"sh", "-c", script}} }

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

// LaunchedAsPlugin reports whether this process was started as a provider
// plugin, by Run (for a Config.Command) or by amelia: go-plugin's handshake
// cookie is in its environment. A test binary that is also its own plugin
// (Command runs os.Args[0]) checks it in TestMain and serves instead of
// running the tests:
//
//	func TestMain(m *testing.M) {
//		if sdktest.LaunchedAsPlugin() {
//			sdk.Serve(myprovider.New())
//			return
//		}
//		os.Exit(m.Run())
//	}
func LaunchedAsPlugin() bool {
	return os.Getenv(providerwire.Handshake.MagicCookieKey) != ""
}
