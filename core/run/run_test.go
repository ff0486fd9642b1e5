package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/runstore"
	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/internal/gittest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// These tests run the whole of Run in this process, over the local
// provider served in process through the sandbox.Opener seam, the real
// worker, a real git repository and a scripted model: what they check is
// the order of the phases and what the cleanups leave, on success,
// failure and cancel.

// recorder is a runview.View that keeps what it is shown.
type recorder struct {
	mu      sync.Mutex
	events  []string
	errs    map[string]error // the error each phase ended with
	summary *runview.Summary
	// onMessage, when set, sees each message of the agent.
	onMessage func(*protocol.AgenticMessage)
}

func (r *recorder) PhaseStart(name string) { r.add("start " + name) }

func (r *recorder) PhaseEnd(name string, _ time.Duration, err error) {
	r.mu.Lock()
	if r.errs == nil {
		r.errs = map[string]error{}
	}
	r.errs[name] = err
	r.mu.Unlock()
	if err != nil {
		r.add("fail " + name)
		return
	}
	r.add("end " + name)
}

func (r *recorder) Message(m *protocol.AgenticMessage) {
	if r.onMessage != nil {
		r.onMessage(m)
	}
}

func (r *recorder) Summary(s runview.Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.summary = &s
}

func (r *recorder) Close() error { return nil }

func (r *recorder) add(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// started is the phases in the order they started.
func (r *recorder) started() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for _, e := range r.events {
		if name, ok := strings.CutPrefix(e, "start "); ok {
			names = append(names, name)
		}
	}
	return names
}

// failed is the phase that failed, or "".
func (r *recorder) failed() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if name, ok := strings.CutPrefix(e, "fail "); ok {
			return name
		}
	}
	return ""
}

// failing fails every exec whose command line holds match, with err, and
// EnsureRunning when match is "EnsureRunning".
type failing struct {
	sdk.Provider
	match string
	err   error
}

func (f failing) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	if f.match == "EnsureRunning" {
		return sdk.Sandbox{}, f.err
	}
	return f.Provider.EnsureRunning(ctx, spec)
}

func (f failing) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if strings.Contains(strings.Join(req.Argv, " "), f.match) {
		return sdk.ExitStatus{}, f.err
	}
	return f.Provider.Exec(ctx, req, eio)
}

// fixture is a host, a repository and a scripted model for one run.
type fixture struct {
	host   Host
	req    Request
	open   *sandboxtest.Opener
	up     *llmtest.Server
	repo   string
	runs   *runstore.Store
	sbRoot string
}

const upstreamKey = "sk-run-test-key"

func newFixture(t *testing.T, opts llmtest.Options, turns ...llmtest.Turn) *fixture {
	t.Helper()
	f := &fixture{repo: t.TempDir(), sbRoot: t.TempDir()}
	f.up = llmtest.NewWithOptions(t, opts, turns...)
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	yaml := fmt.Sprintf(`default_profile: t
profiles:
  t:
    model: test-model
    llm: {base_url: %q, api_key_env: RUN_TEST_KEY}
    sandbox: {provider: local, local: {root: %q}}
`, f.up.URL()+"/v1", f.sbRoot)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"RUN_TEST_KEY": upstreamKey}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := config.Load(config.Options{Path: cfgPath, LookupEnv: lookup})
	if err != nil {
		t.Fatal(err)
	}
	prof, err := cfg.Profile("")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"config", "user.name", "Dev"},
		{"config", "user.email", "dev@example.com"},
		{"commit", "-q", "--allow-empty", "-m", "initial"},
	} {
		gittest.Git(t, f.repo, args...)
	}
	f.open = &sandboxtest.Opener{Roots: map[string]string{"local": f.sbRoot}}
	f.runs = runstore.New(t.TempDir())
	f.host = Host{
		Sandboxes: f.open,
		Workers:   &driver.Installer{Binary: workerBin},
		AuditDir:  t.TempDir(),
		LookupEnv: lookup,
		Environ:   os.Environ(),
		Runs:      f.runs,
	}
	f.req = Request{Profile: prof, Repo: f.repo, Workflow: "wf", Prompt: "add hello.txt"}
	return f
}

// worktrees lists what is left in the sandbox's worktrees directory.
func (f *fixture) worktrees(t *testing.T) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(f.sbRoot, "*", "*", "worktrees", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return matches
}

func writeHello() llmtest.Turn {
	return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{Name: "write_file", Arguments: `{"file_path":"hello.txt","content":"hello\n"}`}}}
}

// allPhases are a local repository's: only the clone and push of a URL
// need a tunnel of their own (PhaseTunnel), and the agent's is its
// supervisor's.
var allPhases = []string{PhaseCheck, PhaseProxy, PhasePlugin, PhaseSandbox, PhaseWorker, PhaseWorkspace, PhaseAgent, PhaseResults, PhaseCleanup}

func TestRunPhasesInOrder(t *testing.T) {
	f := newFixture(t, llmtest.Options{}, writeHello(), llmtest.Turn{Text: "done"})
	view := &recorder{}
	res, err := Run(t.Context(), f.host, f.req, view)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := view.started(); !slices.Equal(got, allPhases) {
		t.Errorf("phases %v, want %v", got, allPhases)
	}
	if p := view.failed(); p != "" {
		t.Errorf("phase %s failed", p)
	}
	if res.Branch != "amelia/wf" || res.Kept != nil {
		t.Errorf("result %+v, want branch amelia/wf and nothing kept", res)
	}
	if got := gittest.Git(t, f.repo, "show", "amelia/wf:hello.txt"); got != "hello" {
		t.Errorf("hello.txt on the branch: %q", got)
	}
	if view.summary == nil || view.summary.Err != nil || view.summary.Branch != "amelia/wf" {
		t.Fatalf("summary %+v", view.summary)
	}
	checkCleanup(t, view.summary, []string{"worktree", "tunnel", "proxy", "plugin"}, f.sandboxLeft())
	if wt := f.worktrees(t); len(wt) != 0 {
		t.Errorf("worktrees left in the sandbox: %v", wt)
	}
	if o, c := f.open.Opened.Load(), f.open.Closed.Load(); o != 1 || c != 1 {
		t.Errorf("providers opened %d, closed %d; want 1 and 1", o, c)
	}
	if n := f.open.Validated.Load(); n != 1 {
		t.Errorf("the provider checked the profile %d times, want once (in the check phase)", n)
	}
	if recs, err := f.runs.Of("t"); err != nil || len(recs) != 0 {
		t.Errorf("run records %+v, %v; want none for a delivered run", recs, err)
	}
}

// A key the profile names but the host's environment does not hold is
// refused in the check phase, as everything is that would fail before
// the sandbox is touched: no proxy starts, no sandbox.
func TestRunRefusesAMissingKey(t *testing.T) {
	f := newFixture(t, llmtest.Options{})
	f.host.LookupEnv = func(string) (string, bool) { return "", false }
	view := &recorder{}
	_, err := Run(t.Context(), f.host, f.req, view)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "RUN_TEST_KEY is not set") {
		t.Fatalf("Run: %v, want a refusal naming the key", err)
	}
	if p, started := view.failed(), view.started(); p != PhaseCheck || !slices.Equal(started, []string{PhaseCheck, PhaseCleanup}) {
		t.Errorf("failed phase %q, phases %v; want check to fail, then cleanup", p, started)
	}
	if entries, _ := os.ReadDir(f.sbRoot); len(entries) != 0 {
		t.Errorf("a refused run created a sandbox: %v", entries)
	}
}

// The gemini agent on a profile without llm.gemini would reach no model
// (the proxy does not translate Gemini's API): the run is refused in the
// check phase, in one line saying what to add, before anything starts.
func TestRunRefusesGeminiWithoutItsUpstream(t *testing.T) {
	f := newFixture(t, llmtest.Options{})
	p, err := f.req.Profile.WithAgent("gemini", "")
	if err != nil {
		t.Fatal(err)
	}
	f.req.Profile = p
	view := &recorder{}
	_, err = Run(t.Context(), f.host, f.req, view)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "add one to the profile (llm: {gemini:") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Run: %v, want a one-line refusal saying to add llm.gemini", err)
	}
	if p, started := view.failed(), view.started(); p != PhaseCheck || !slices.Equal(started, []string{PhaseCheck, PhaseCleanup}) {
		t.Errorf("failed phase %q, phases %v; want check to fail, then cleanup", p, started)
	}
	if entries, _ := os.ReadDir(f.sbRoot); len(entries) != 0 {
		t.Errorf("a refused run created a sandbox: %v", entries)
	}
}

// A profile its provider finds wrong — settings it would refuse, a
// network policy it cannot enforce — is refused in the check phase, every
// problem at its key in the config file, before anything starts.
func TestRunRefusesWhatTheProviderFindsWrong(t *testing.T) {
	f := newFixture(t, llmtest.Options{})
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	yaml := fmt.Sprintf("profiles:\n  t:\n    sandbox: {provider: local, network: none, local: {root: %q, rooot: /tmp}}\n", f.sbRoot)
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Options{Path: cfgPath, LookupEnv: f.host.LookupEnv})
	if err != nil {
		t.Fatal(err)
	}
	f.req.Profile = cfg.Profiles["t"]
	view := &recorder{}
	_, err = Run(t.Context(), f.host, f.req, view)
	var ve *config.ValidationError
	if !errors.As(err, &ve) || ve.File != cfgPath {
		t.Fatalf("Run: %v, want the config's problems", err)
	}
	if !errors.Is(err, ErrRefused) {
		t.Errorf("Run: %v, want it refused (nothing started)", err)
	}
	want := []string{
		`profiles.t.sandbox.network: provider local cannot enforce "none" (it can enforce: open); pick another provider or network mode`,
		`profiles.t.sandbox.local.rooot: unknown key, did you mean root? (known: root)`,
	}
	var got []string
	for _, p := range ve.Problems {
		got = append(got, p.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p, started := view.failed(), view.started(); p != PhaseCheck || !slices.Equal(started, []string{PhaseCheck, PhaseCleanup}) {
		t.Errorf("failed phase %q, phases %v; want check to fail, then cleanup", p, started)
	}
	if o, c := f.open.Opened.Load(), f.open.Closed.Load(); o != 1 || c != 1 {
		t.Errorf("providers opened %d, closed %d; want 1 and 1", o, c)
	}
	if entries, err := os.ReadDir(f.sbRoot); err != nil || len(entries) != 0 {
		t.Errorf("the sandbox root holds %v (%v); want nothing started", entries, err)
	}
}

// A failure before the agent starts ends the run at that phase, with its
// cleanups: the provider closed, no worktree, nothing recorded.
func TestRunFailureBeforeTheAgentCleansUp(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name, match, phase string
	}{
		{"sandbox", "EnsureRunning", PhaseSandbox},
		{"worker", "uname -m", PhaseWorker},
		{"workspace", "step checkout", PhaseWorkspace},
		{"agent", "detach", PhaseAgent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, llmtest.Options{}, writeHello(), llmtest.Turn{Text: "done"})
			f.open.Wrap = func(_ string, p sdk.Provider) sdk.Provider { return failing{p, tc.match, boom} }
			view := &recorder{}
			res, err := Run(t.Context(), f.host, f.req, view)
			if !errors.Is(err, boom) {
				t.Fatalf("Run: %v, want the provider's error", err)
			}
			if got := view.failed(); got != tc.phase {
				t.Errorf("failed phase %q, want %q (events %v)", got, tc.phase, view.events)
			}
			want := allPhases[:slices.Index(allPhases, tc.phase)+1]
			if got := view.started(); !slices.Equal(got[:min(len(got), len(want))], want) || !slices.Contains(got, PhaseCleanup) {
				t.Errorf("phases %v, want %v then cleanup", got, want)
			}
			if res.Kept != nil {
				t.Errorf("kept %+v: the agent never ran", res.Kept)
			}
			if errors.Is(err, context.Canceled) || errors.Is(view.errs[tc.phase], context.Canceled) {
				t.Errorf("a failure shows as an interruption: %v, phase %v", err, view.errs[tc.phase])
			}
			// The agent's tunnel opens once the agent runs.
			cleaned := []string{"proxy", "plugin"}
			if tc.phase == PhaseAgent {
				cleaned = []string{"worktree", "proxy", "plugin"}
			}
			var left []string
			if tc.phase != PhaseSandbox {
				left = f.sandboxLeft()
			}
			checkCleanup(t, view.summary, cleaned, left)
			if wt := f.worktrees(t); len(wt) != 0 {
				t.Errorf("worktrees left in the sandbox: %v", wt)
			}
			if o, c := f.open.Opened.Load(), f.open.Closed.Load(); o != c {
				t.Errorf("providers opened %d, closed %d", o, c)
			}
			if recs, err := f.runs.Of("t"); err != nil || len(recs) != 0 {
				t.Errorf("run records %+v, %v; want none", recs, err)
			}
		})
	}
}

// sandboxLeft is what a run of f that brought its sandbox up leaves: the
// sandbox, by its name and provider.
func (f *fixture) sandboxLeft() []string {
	return []string{"sandbox " + f.sandboxName() + " on provider local (running; amelia stop --profile t removes it)"}
}

// sandboxName is the name of the sandbox of f's profile.
func (f *fixture) sandboxName() string { return sandbox.Name(f.req.Profile, sandbox.Owner()) }

// checkCleanup checks what the summary says the cleanups removed and the
// run left.
func checkCleanup(t *testing.T, s *runview.Summary, cleaned, left []string) {
	t.Helper()
	if s == nil {
		t.Fatal("no summary")
	}
	if !slices.Equal(s.Cleaned, cleaned) {
		t.Errorf("summary says cleaned %q, want %q", s.Cleaned, cleaned)
	}
	if !slices.Equal(s.Left, left) {
		t.Errorf("summary says left %q, want %q", s.Left, left)
	}
}

// A cancel while the agent works (Ctrl-C: the context's cause is the
// signal) is an interruption, not a failure: the agent phase and the run
// end with errors matching context.Canceled, the agent is stopped, and its
// work is kept: committed on its branch in the sandbox, the worktree left,
// the run recorded as kept. The summary says what was cleaned up and what
// is left.
func TestRunCancelledKeepsTheWork(t *testing.T) {
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	hold := make(chan struct{})
	f := newFixture(t, llmtest.Options{Script: func(i int, _ *llmtest.Request) llmtest.Turn {
		if i == 0 {
			return writeHello()
		}
		// The first tool ran; the model thinks until the test has
		// cancelled the run, as signal.NotifyContext does.
		cancel(errors.New("interrupt signal received"))
		<-hold
		return llmtest.Turn{Text: "too late"}
	}})
	// Before the server's own cleanup, which waits for its handlers.
	t.Cleanup(func() { close(hold) })
	view := &recorder{}
	res, err := Run(ctx, f.host, f.req, view)
	if !errors.Is(err, context.Canceled) || err.Error() != "agent: context canceled" {
		t.Fatalf("Run: %v, want agent: context canceled", err)
	}
	if perr := view.errs[PhaseAgent]; !errors.Is(perr, context.Canceled) {
		t.Errorf("the agent phase ended with %v, want context.Canceled", perr)
	}
	if view.summary == nil || !errors.Is(view.summary.Err, context.Canceled) {
		t.Fatalf("summary %+v, want its error to match context.Canceled", view.summary)
	}
	checkCleanup(t, view.summary, []string{"tunnel", "proxy", "plugin"}, f.sandboxLeft())
	if k := view.summary.Kept; k == nil || k.Recover != "amelia results --profile t wf" {
		t.Errorf("summary kept %+v, want the recover command", k)
	}
	if !res.AgentStopped || res.AgentRunning {
		t.Errorf("result says agent stopped %v, running %v; want stopped", res.AgentStopped, res.AgentRunning)
	}
	if res.Kept == nil || res.Kept.Branch != "amelia/wf" {
		t.Fatalf("kept %+v, want the work on amelia/wf", res.Kept)
	}
	if got := view.started(); got[len(got)-1] != PhaseCleanup {
		t.Errorf("phases %v, want cleanup last", got)
	}
	wt := res.Kept.Worktree
	if b, err := os.ReadFile(filepath.Join(wt, "hello.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("the kept worktree's hello.txt: %q, %v", b, err)
	}
	if got := gittest.Git(t, wt, "show", "amelia/wf:hello.txt"); got != "hello" {
		t.Errorf("hello.txt committed on the sandbox's branch: %q", got)
	}
	recs, err := f.runs.Of("t")
	if err != nil || len(recs) != 1 || recs[0].State != runstore.Kept {
		t.Errorf("run records %+v, %v; want one, kept", recs, err)
	}
	if o, c := f.open.Opened.Load(), f.open.Closed.Load(); o != c {
		t.Errorf("providers opened %d, closed %d", o, c)
	}
}

// cancelling calls cancel when an exec whose command line holds match
// starts, so that the exec runs under a cancelled context.
type cancelling struct {
	sdk.Provider
	match  string
	cancel context.CancelFunc
}

func (c cancelling) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if strings.Contains(strings.Join(req.Argv, " "), c.match) {
		c.cancel()
	}
	return c.Provider.Exec(ctx, req, eio)
}

// leftovers are the processes still running from the sandbox root (the
// worker's path is under it), once the trash's sweepers, which a run
// leaves to end by themselves when the trash is gone, have ended.
func leftovers(t *testing.T, root string) []string {
	t.Helper()
	for {
		procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		var sweepers []int
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err != nil || !strings.Contains(string(b), root) {
				continue
			}
			if argv := strings.Split(string(b), "\x00"); len(argv) > 1 && argv[1] == "sweep" {
				pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
				sweepers = append(sweepers, pid)
				continue
			}
			left = append(left, strings.ReplaceAll(string(b), "\x00", " "))
		}
		if len(sweepers) == 0 {
			return left
		}
		for _, pid := range sweepers {
			waitExit(pid)
		}
	}
}

// waitExit waits for process pid to exit (already gone: at once).
func waitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	for {
		_, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, -1)
		if err != unix.EINTR {
			return
		}
	}
}

// A cancel that comes while the agent is being started leaves no agent
// running that the run does not know of: the start runs to its end, and
// the cancel then stops the agent as it would a running one.
func TestRunCancelledWhileTheAgentStarts(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skipf("no /proc to look for leftover processes in: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	f := newFixture(t, llmtest.Options{}, writeHello(), llmtest.Turn{Text: "done"})
	f.open.Wrap = func(_ string, p sdk.Provider) sdk.Provider { return cancelling{p, " detach ", cancel} }
	view := &recorder{}
	res, err := Run(ctx, f.host, f.req, view)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if left := leftovers(t, f.sbRoot); len(left) != 0 {
		t.Errorf("processes left running: %q", left)
	}
	wt := f.worktrees(t)
	if res.Kept == nil && len(wt) != 0 {
		t.Errorf("nothing kept, but worktrees are left: %v", wt)
	}
	if res.Kept != nil && !slices.Contains(wt, res.Kept.Worktree) {
		t.Errorf("kept %s, which is gone (left: %v)", res.Kept.Worktree, wt)
	}
}

// What the worktree's cleanup did is in the summary: left with
// --keep-worktree, and left, saying so, when its removal failed.
func TestRunSummarySaysWhatBecameOfTheWorktree(t *testing.T) {
	t.Run("keep-worktree", func(t *testing.T) {
		f := newFixture(t, llmtest.Options{}, writeHello(), llmtest.Turn{Text: "done"})
		f.req.KeepWorktree = true
		view := &recorder{}
		if _, err := Run(t.Context(), f.host, f.req, view); err != nil {
			t.Fatalf("Run: %v", err)
		}
		wt := f.worktrees(t)
		if len(wt) != 1 {
			t.Fatalf("worktrees %v, want the one kept", wt)
		}
		left := append([]string{"worktree " + wt[0] + " in sandbox " + f.sandboxName() + " (--keep-worktree)"}, f.sandboxLeft()...)
		checkCleanup(t, view.summary, []string{"tunnel", "proxy", "plugin"}, left)
	})
	t.Run("removal fails", func(t *testing.T) {
		f := newFixture(t, llmtest.Options{}, writeHello(), llmtest.Turn{Text: "done"})
		f.open.Wrap = func(_ string, p sdk.Provider) sdk.Provider {
			return failing{p, "step retire", errors.New("boom")}
		}
		view := &recorder{}
		if _, err := Run(t.Context(), f.host, f.req, view); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if view.failed() != PhaseCleanup {
			t.Errorf("failed phase %q, want cleanup", view.failed())
		}
		wt := f.worktrees(t)
		if len(wt) != 1 {
			t.Fatalf("worktrees %v, want the one that could not be removed", wt)
		}
		left := append([]string{"worktree " + wt[0] + " in sandbox " + f.sandboxName() + " (its removal failed)"}, f.sandboxLeft()...)
		checkCleanup(t, view.summary, []string{"tunnel", "proxy", "plugin"}, left)
	})
}

// trail is a recorder that notes, as each phase starts and as the agent's
// messages come, the state the run's record is in.
type trail struct {
	recorder
	runs   *runstore.Store
	states []string
}

func (v *trail) note(when string) {
	state := "none"
	if rec, err := v.runs.Get("t", "wf"); err == nil {
		state = string(rec.State)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n := len(v.states); n == 0 || !strings.HasSuffix(v.states[n-1], " "+state) || !strings.HasPrefix(when, "message") {
		v.states = append(v.states, when+" "+state)
	}
}

func (v *trail) PhaseStart(name string) {
	v.note(name)
	v.recorder.PhaseStart(name)
}

func (v *trail) Message(m *protocol.AgenticMessage) { v.note("message") }

// A run writes its state to its record at each step, so that whatever
// becomes of its host the record says what the sandbox may hold; a
// delivered run's record goes once nothing of it is left there.
func TestRunRecordsEachStep(t *testing.T) {
	f := newFixture(t, llmtest.Options{}, writeHello(), llmtest.Turn{Text: "done"})
	view := &trail{runs: f.runs}
	if _, err := Run(t.Context(), f.host, f.req, view); err != nil {
		t.Fatalf("Run: %v", err)
	}
	view.note("after")
	want := []string{
		"check none", "proxy checked", "plugin checked", "sandbox checked", "worker sandbox-up",
		"workspace sandbox-up", "agent sandbox-up", "message running", "results ended", "cleanup delivered", "after none",
	}
	if !slices.Equal(view.states, want) {
		t.Errorf("the record's state at each step:\n got %q\nwant %q", view.states, want)
	}
}

// Two runs of one workflow: the second is refused in its check, before
// it touches the sandbox, and the first's record is left as it was:
// whether the first was recorded before the second's check began, or
// while it ran (a race both won the check of; only one records itself).
func TestRunRefusesAWorkflowInProgress(t *testing.T) {
	for _, tc := range []struct {
		name   string
		during bool
		phases []string
	}{
		{"before", false, []string{PhaseCheck}},
		{"during the check", true, []string{PhaseCheck, PhaseCleanup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, llmtest.Options{})
			other := runstore.Record{Workflow: "wf", Profile: "t", State: runstore.SandboxUp, Sandbox: "elsewhere", RunID: "other"}
			record := func() {
				if err := f.runs.Create(other); err != nil {
					t.Error(err)
				}
			}
			if tc.during {
				// The provider starts once the workflow was checked.
				f.open.Wrap = func(_ string, p sdk.Provider) sdk.Provider { record(); return p }
			} else {
				record()
			}
			view := &recorder{}
			_, err := Run(t.Context(), f.host, f.req, view)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "workflow wf is being prepared in sandbox elsewhere by another run") {
				t.Fatalf("Run: %v, want a refusal naming the other run", err)
			}
			if got := view.started(); !slices.Equal(got, tc.phases) {
				t.Errorf("phases %v, want %v", got, tc.phases)
			}
			if rec, err := f.runs.Get("t", "wf"); err != nil || rec != other {
				t.Errorf("the other run's record became %+v, %v", rec, err)
			}
		})
	}
}
