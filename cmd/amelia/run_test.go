package main_test

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/internal/gittest"
	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
)

// End-to-end tests of `amelia run`: the real amelia and amelia-worker
// binaries, the local provider behind the real plugin, the proxy and the
// tunnel, and the scripted LLM server as the upstream, reached only through
// proxy and tunnel.

// ameliaBin is amelia, built by TestMain with its worker beside it.
var ameliaBin, binDir string

func TestMain(m *testing.M) {
	// k8stest.Main runs the tests, and stops the Kubernetes cluster a
	// test started; in the cluster's supervisor (this binary run again)
	// it runs the cluster instead, after a build the cache makes quick.
	os.Exit(testbin.Main(runFunc(func() int { return k8stest.Main(m) }), func(dir string) (err error) {
		binDir = dir
		ameliaBin, err = testbin.BuildAmelia(dir)
		return err
	}))
}

// runFunc runs the tests.
type runFunc func() int

func (f runFunc) Run() int { return f() }

// The host's key: only the scripted LLM server may see it.
const upstreamKey = "sk-e2e-run-upstream-key-51c0de"

// host is a user's machine for one test: a home, a config whose profile
// points at the scripted LLM server, a local sandbox root, and a git
// checkout with one commit on main.
type host struct {
	home, root, repo string
	tmp              string // amelia's TMPDIR, where its shared plugins live
	up               *llmtest.Server
	env              []string
}

func newHost(t testing.TB, opts llmtest.Options, turns ...llmtest.Turn) *host {
	t.Helper()
	root := t.TempDir()
	return newHostWith(t, fmt.Sprintf("{provider: local, local: {root: %q}}", root), root, opts, turns...)
}

// newHostWith is newHost with the e2e profile's sandbox block (YAML flow
// style) given; root is the local provider's root, if it is one.
func newHostWith(t testing.TB, sandbox, root string, opts llmtest.Options, turns ...llmtest.Turn) *host {
	t.Helper()
	// A run with network allowlist or none first checks from inside the
	// sandbox that nothing answers a direct connection; the worker's own
	// targets for that are public addresses, which no test may contact.
	var sb struct {
		Network string   `yaml:"network"`
		Targets []string `yaml:"egress_check_targets"`
	}
	if err := yaml.Unmarshal([]byte(sandbox), &sb); err != nil {
		t.Fatalf("the e2e sandbox block %s: %v", sandbox, err)
	}
	if sb.Network != "" && sb.Network != "open" && len(sb.Targets) == 0 {
		t.Fatalf("the e2e sandbox block has network %s but no egress_check_targets: aim the egress check at a listener the test owns (reachtest.Listen)", sb.Network)
	}
	h := &host{home: t.TempDir(), root: root, repo: t.TempDir()}
	h.up = llmtest.NewWithOptions(t, opts, turns...)
	cfg := h.configPath()
	if err := os.MkdirAll(filepath.Dir(cfg), 0o700); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`default_profile: e2e
profiles:
  e2e:
    model: test-model
    llm: {base_url: %q, api_key_env: AMELIA_E2E_KEY}
    sandbox: %s
`, h.up.URL()+"/v1", sandbox)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	// amelia's temporary files (its plugins' sockets among them, which a
	// plugin killed with its host leaves behind) go in a directory of the
	// test's, short enough for a socket's path.
	tmp, err := os.MkdirTemp("", "amh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	// The runs' shared provider plugins outlive them: stopped, then the
	// directory goes.
	t.Cleanup(func() { sharedtest.Stop(t, tmp) })
	h.tmp = tmp
	h.env = []string{
		"HOME=" + h.home, "PATH=" + os.Getenv("PATH"), "AMELIA_E2E_KEY=" + upstreamKey,
		"GORACE=atexit_sleep_ms=0", "GIT_CONFIG_NOSYSTEM=1", "TMPDIR=" + tmp,
	}
	h.git(t, "init", "-q", "-b", "main")
	h.git(t, "config", "user.name", "Dev")
	h.git(t, "config", "user.email", "dev@example.com")
	writeFile(t, filepath.Join(h.repo, "README.md"), "# project\n")
	h.git(t, "add", "README.md")
	h.git(t, "commit", "-q", "-m", "initial")
	return h
}

// configPath is the host's amelia config file.
func (h *host) configPath() string { return filepath.Join(h.home, ".config", "amelia", "config.yaml") }

// addProfileYAML appends lines (indented as keys of the profile) to the
// e2e profile of the host's config.
func (h *host) addProfileYAML(t testing.TB, lines string) {
	t.Helper()
	f, err := os.OpenFile(h.configPath(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(lines); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// git runs git in the host repo and returns its trimmed output.
func (h *host) git(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", h.repo}, args...)...)
	cmd.Env = h.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// result is how an amelia run ended.
type result struct {
	code           int
	stdout, stderr string
}

// command is amelia with args, in the host repo, with the host's
// environment.
func (h *host) command(args ...string) *exec.Cmd {
	cmd := exec.Command(ameliaBin, args...)
	cmd.Dir = h.repo
	cmd.Env = h.env
	return cmd
}

// amelia runs amelia to its end.
func (h *host) amelia(t testing.TB, args ...string) result {
	t.Helper()
	cmd := h.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run amelia: %v", err)
	}
	logCrashedPlugins(t, errb.String())
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// crashedPlugin finds the log a shared plugin that stopped unexpectedly
// left, as amelia names it.
var crashedPlugin = regexp.MustCompile(`stopped unexpectedly \(shared plugin, pid \d+; its log: ([^)\s]+)\)`)

// logCrashedPlugins puts into the test's log the end of the log of each
// shared plugin stderr says stopped unexpectedly: it lives in the test's
// TMPDIR, which goes with the test, and says why (a panic, a data race).
func logCrashedPlugins(t testing.TB, stderr string) {
	t.Helper()
	for _, m := range crashedPlugin.FindAllStringSubmatch(stderr, -1) {
		b, err := os.ReadFile(m[1])
		if err != nil {
			t.Logf("the crashed plugin's log %s: %v", m[1], err)
			continue
		}
		if len(b) > 16<<10 {
			b = b[len(b)-16<<10:]
		}
		t.Logf("the end of the crashed plugin's log %s:\n%s", m[1], b)
	}
}

// event is one line of `amelia run --json`.
type event struct {
	Type       string          `json:"type"`
	Content    *string         `json:"content"`
	ToolName   *string         `json:"tool_name"`
	ToolOutput *string         `json:"tool_output"`
	IsError    bool            `json:"is_error"`
	Raw        json.RawMessage `json:"-"`
}

// events parses every line of out; a line that is not JSON fails the test.
func events(t *testing.T, out string) []event {
	t.Helper()
	var evs []event
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("--json line %d is not JSON: %v: %q", n, err, sc.Text())
		}
		ev.Raw = append(json.RawMessage(nil), sc.Bytes()...)
		evs = append(evs, ev)
	}
	return evs
}

// toolOutput is the output of the last tool_result event of a --json run
// that holds marker, or "" when none does.
func toolOutput(t *testing.T, stdout, marker string) string {
	t.Helper()
	var out string
	for _, ev := range events(t, stdout) {
		if ev.Type == "tool_result" && ev.ToolOutput != nil && strings.Contains(*ev.ToolOutput, marker) {
			out = *ev.ToolOutput
		}
	}
	return out
}

func writeCall(path, content string) llmtest.ToolCall {
	args, _ := json.Marshal(map[string]string{"file_path": path, "content": content})
	return llmtest.ToolCall{Name: "write_file", Arguments: string(args)}
}

func executeCall(command string) llmtest.ToolCall {
	args, _ := json.Marshal(map[string]string{"command": command})
	return llmtest.ToolCall{Name: "execute", Arguments: string(args)}
}

// assertNoSecret fails if secret is in any file under the dirs.
func assertNoSecret(t *testing.T, secret string, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(path)
			if err == nil && bytes.Contains(b, []byte(secret)) {
				t.Errorf("a host secret (%.8s...) is in %s", secret, path)
			}
			return nil
		})
	}
}

// callDirs are the directories of the driver's one-shot calls on this
// machine (the local provider's sandboxes share its /tmp).
func callDirs() []string {
	var dirs []string
	for _, mode := range []string{"agentic", "generate", "session"} {
		m, _ := filepath.Glob(driver.FilePrefix + mode + "-*")
		dirs = append(dirs, m...)
	}
	return dirs
}

// A run that creates and edits files ends with amelia/<id> in the host repo
// holding exactly those changes; nothing else in the repo moves, every
// --json line parses, and the key is nowhere inside the sandbox.
func TestRunBringsBackTheBranch(t *testing.T) {
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("hello.txt", "hello from the agent\n")}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("README.md", "# project\n\nEdited by the agent.\n")}},
		// What the sandbox can see: its environment and every process's
		// arguments.
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(`env; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`)}},
		llmtest.Turn{Text: "Added hello.txt and edited the README.", Usage: &llmtest.Usage{PromptTokens: 100, CompletionTokens: 20}},
	)
	head := h.git(t, "rev-parse", "HEAD")
	r := h.amelia(t, "run", "--json", "--workflow", "add-hello", "Add a hello file.\nAnd edit the README.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	evs := events(t, r.stdout)
	var types []string
	var envSeen bool
	for _, ev := range evs {
		types = append(types, ev.Type)
		if ev.ToolOutput != nil && strings.Contains(*ev.ToolOutput, "AMELIA_PROXY_TOKEN=") {
			envSeen = true
		}
	}
	if !envSeen {
		t.Errorf("no tool output shows the sandbox's environment; events: %v", types)
	}
	if strings.Contains(r.stdout, upstreamKey) || strings.Contains(r.stderr, upstreamKey) {
		t.Error("the upstream key appears in amelia's output (the sandbox's environment or process arguments)")
	}
	for _, want := range []string{"phase", "tool_call", "tool_result", "result", "summary"} {
		if !strings.Contains(strings.Join(types, " "), want) {
			t.Errorf("no %q event in --json output: %v", want, types)
		}
	}

	if got := h.git(t, "diff", "--name-status", "main", "amelia/add-hello"); got != "M\tREADME.md\nA\thello.txt" {
		t.Errorf("the branch's changes:\n%s\nwant README.md modified and hello.txt added", got)
	}
	if got := h.git(t, "show", "amelia/add-hello:hello.txt"); got != "hello from the agent" {
		t.Errorf("hello.txt on the branch: %q", got)
	}
	if got := h.git(t, "rev-parse", "amelia/add-hello^"); got != head {
		t.Errorf("the branch's parent is %s, want main's %s", got, head)
	}
	if got := h.git(t, "symbolic-ref", "--short", "HEAD"); got != "main" {
		t.Errorf("the checked-out branch is now %s", got)
	}
	if got := h.git(t, "rev-parse", "main"); got != head {
		t.Error("main moved")
	}
	if got := h.git(t, "status", "--porcelain"); got != "" {
		t.Errorf("the checkout changed:\n%s", got)
	}
	if got := h.git(t, "for-each-ref", "--format=%(refname)"); got != "refs/heads/amelia/add-hello\nrefs/heads/main" {
		t.Errorf("refs in the host repo:\n%s", got)
	}

	for i, req := range h.up.Requests() {
		if got := req.Header.Get("Authorization"); got != "Bearer "+upstreamKey {
			t.Errorf("LLM request %d: Authorization %q, want the host's key", i, got)
		}
	}
	assertNoSecret(t, upstreamKey, append(callDirs(), h.root)...)
	// Cleanup: no worktree and no prompt file left.
	if m, _ := filepath.Glob(filepath.Join(h.root, "*", "workspace", "worktrees", "*")); len(m) != 0 {
		t.Errorf("worktrees left in the sandbox: %v", m)
	}
	if m, _ := filepath.Glob(driver.FilePrefix + "agentic-add-hello-*"); len(m) != 0 {
		t.Errorf("prompt files are still there: %v", m)
	}
}

// Refused before anything starts: no sandbox is created.
func TestRunRefusesBeforeStarting(t *testing.T) {
	h := newHost(t, llmtest.Options{})
	h.git(t, "branch", "amelia/taken")
	h.git(t, "branch", "amelia/y/z")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"path in the id", []string{"--workflow", "../x", "do it"}, "workflow"},
		{"dots in the id", []string{"--workflow", "a..b", "do it"}, `".."`},
		{"lock suffix", []string{"--workflow", "x.lock", "do it"}, ".lock"},
		{"leading dash", []string{"--workflow", "-x", "do it"}, "workflow"},
		{"too long", []string{"--workflow", strings.Repeat("a", 64), "do it"}, "64 characters"},
		{"branch exists", []string{"--workflow", "taken", "do it"}, "amelia/taken already exists"},
		{"branch in the way", []string{"--workflow", "y", "do it"}, "'refs/heads/amelia/y/z' exists"},
		{"prompt not UTF-8", []string{"--workflow", "ok", "fix caf\xe9"}, "not UTF-8 (byte 0xe9 at offset 7)"},
		{"unknown base", []string{"--workflow", "ok", "--base", "nosuch", "do it"}, "nosuch"},
		{"URL without --push", []string{"--repo", "https://host.example/r.git", "do it"}, "--push"},
		{"URL the git route cannot serve", []string{"--repo", "https://me@host.example/r.git", "--push", "do it"}, "plain URL"},
		{"encoded URL", []string{"--repo", "https://host.example/a%2Fb.git", "--push", "do it"}, "plain URL"},
		{"empty prompt", []string{"--workflow", "ok", "  "}, "no task"},
		{"prompt file and arguments", []string{"--prompt-file", "task.md", "do it"}, "not both"},
		{"no such repo", []string{"--workflow", "ok", "--repo", "/no/such/dir", "do it"}, "/no/such/dir: no such directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.amelia(t, append([]string{"run", "--json"}, c.args...)...)
			if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
				t.Errorf("exit %d, stderr %q: want a one-line refusal mentioning %q", r.code, r.stderr, c.want)
			}
		})
	}
	writeFile(t, filepath.Join(h.repo, "wip.txt"), "not committed\n")
	r := h.amelia(t, "run", "--workflow", "dirty", "do it")
	if r.code == 0 || !strings.Contains(r.stderr, "uncommitted changes") || !strings.Contains(r.stderr, "wip.txt") || !strings.Contains(r.stderr, "--include-dirty") {
		t.Errorf("dirty checkout: exit %d, stderr %q", r.code, r.stderr)
	}
	// A new repository, nothing committed: no --base was given, so none is
	// blamed.
	empty := t.TempDir()
	gittest.Git(t, empty, "init", "-q", "-b", "master")
	r = h.amelia(t, "run", "--workflow", "empty", "--repo", empty, "do it")
	if r.code == 0 || !strings.Contains(r.stderr, "has no commits yet") || strings.Contains(r.stderr, "--base:") {
		t.Errorf("empty repository: exit %d, stderr %q", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(h.root); len(entries) != 0 {
		t.Errorf("a refused run created a sandbox: %v", entries)
	}
}

// Two runs on one profile at once, which the profile allows
// (sandbox.concurrent_runs): each gets its own branch and output.
func TestConcurrentRuns(t *testing.T) {
	h := newHost(t, llmtest.Options{Script: func(i int, req *llmtest.Request) llmtest.Turn {
		// Each run writes a file named after its workflow (from the
		// prompt), then finishes.
		last := req.Chat.Messages[len(req.Chat.Messages)-1]
		if last.Role == "tool" {
			return llmtest.Turn{Text: "done"}
		}
		for _, m := range req.Chat.Messages {
			for _, id := range []string{"one", "two"} {
				if m.Role == "user" && strings.Contains(m.Text(), "write "+id) {
					return llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall(id+".txt", id+"\n")}}
				}
			}
		}
		return llmtest.Turn{Text: "no task found"}
	}})
	h.env = append(h.env, "AMELIA_PROFILES__E2E__SANDBOX__CONCURRENT_RUNS=true")
	ids := []string{"one", "two"}
	results := make([]result, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { results[i] = h.amelia(t, "run", "--json", "--workflow", id, "write "+id) })
	}
	wg.Wait()
	for i, r := range results {
		id := ids[i]
		if r.code != 0 {
			t.Errorf("run %s: exit %d, stderr %s", id, r.code, r.stderr)
			continue
		}
		other := map[string]string{"one": "two", "two": "one"}[id]
		if strings.Contains(r.stdout, other+".txt") {
			t.Errorf("run %s's output mentions %s.txt", id, other)
		}
		if got := h.git(t, "diff", "--name-only", "main", "amelia/"+id); got != id+".txt" {
			t.Errorf("amelia/%s changes %q, want %s.txt only", id, got, id)
		}
	}
}

// Without sandbox.concurrent_runs, a second run on a profile whose
// sandbox a run holds is refused before its agent starts, told which run
// holds it and how to share; once the first ends, the sandbox is free.
func TestRunsDoNotShareASandbox(t *testing.T) {
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall("sleep 297.5")}},
		llmtest.Turn{Text: "stopped"},
		llmtest.Turn{Text: "Nothing to do."},
	)
	t.Cleanup(func() { exec.Command("pkill", "-f", "sleep 297.5").Run() })
	first := h.startUntil(t, "sleep 297.5", "run", "--json", "--workflow", "holder", "sleep a long time")
	r := h.amelia(t, "run", "--workflow", "second", "do it")
	if r.code != 1 || !strings.Contains(r.stderr, "in use by another run (workflow holder,") || !strings.Contains(r.stderr, "sandbox.concurrent_runs: true") {
		t.Errorf("a second run while the first holds the sandbox: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := len(h.up.Requests()); n != 1 {
		t.Errorf("the LLM got %d requests, want the first run's one only", n)
	}
	if err := first.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t, "Ctrl-C"); code != 130 {
		t.Errorf("the first run: exit %d after Ctrl-C; stderr: %s", code, first.stderr.String())
	}
	if r := h.amelia(t, "run", "--workflow", "third", "do it"); r.code != 0 {
		t.Errorf("a run after the first ended: exit %d, stderr %q", r.code, r.stderr)
	}
}

// running is amelia in the background.
type running struct {
	cmd    *exec.Cmd
	stdout io.Reader
	stderr bytes.Buffer
}

// startUntil starts amelia with args (which must include --json) and
// returns once the agent's first tool call whose line holds marker has
// been shown.
func (h *host) startUntil(t *testing.T, marker string, args ...string) *running {
	t.Helper()
	r := &running{cmd: h.command(args...)}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.stdout = stdout
	r.cmd.Stderr = &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), `"type":"tool_call"`) && strings.Contains(sc.Text(), marker) {
			return r
		}
	}
	r.cmd.Wait()
	t.Fatalf("amelia ended before the agent's first tool call; stderr: %s", r.stderr.String())
	return nil
}

// wait reads the rest of amelia's output and returns its exit code once it
// has ended, failing the test if that takes over a minute after what
// (the event it should end on).
func (r *running) wait(t *testing.T, what string) int {
	t.Helper()
	waited := make(chan error, 1)
	go func() {
		io.Copy(io.Discard, r.stdout)
		waited <- r.cmd.Wait()
	}()
	select {
	case <-waited:
	case <-time.After(60 * time.Second):
		t.Fatalf("amelia did not end within 60s of %s", what)
	}
	return r.cmd.ProcessState.ExitCode()
}

// Ctrl-C mid-run: exit 130, no worker process left, and the agent's work
// so far kept in the sandbox, where amelia results gets it.
func TestRunInterrupted(t *testing.T) {
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("wip.txt", "half done\n")}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall("sleep 299.5")}},
		llmtest.Turn{Text: "interrupted"},
	)
	r := h.startUntil(t, "sleep 299.5", "run", "--json", "--workflow", "stop-me", "sleep a long time")
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, "Ctrl-C"); code != 130 {
		t.Errorf("exit %d after Ctrl-C, want 130; stderr: %s", code, r.stderr.String())
	}
	if out, _ := exec.Command("pgrep", "-f", "sleep 299.5").Output(); len(out) != 0 {
		t.Errorf("the agent's command is still running after Ctrl-C: pids %s", out)
	}
	// Before amelia results, whose retired checkout a detached sweeper
	// of the sandbox's removes in the background.
	if out, _ := exec.Command("pgrep", "-f", filepath.Join(h.root)).Output(); len(out) != 0 {
		t.Errorf("processes of the sandbox still running after Ctrl-C: pids %s", out)
	}
	h.bringsBackKept(t, "stop-me", r.stderr.String(), "wip.txt", "half done")
}

// bringsBackKept checks what a run of wf that failed after its agent wrote
// file leaves: its stderr (or output) names the command that brings the
// work back; the worktree is still in the sandbox; a rerun of wf is
// refused with that command; `amelia stop` will not remove the sandbox;
// and amelia results creates amelia/<wf> in the host repo holding file,
// then removes the worktree.
func (h *host) bringsBackKept(t *testing.T, wf, output, file, content string) {
	t.Helper()
	recover := "amelia results --profile e2e " + wf
	if !strings.Contains(output, recover) {
		t.Errorf("the failed run's output does not say how to get the work back (%q):\n%s", recover, output)
	}
	// The sandbox's files are on this machine (local, ssh) or in a
	// container, where sandbox ls below finds the worktree.
	worktrees := filepath.Join(h.root, "*", "workspace", "worktrees", wf)
	if m, _ := filepath.Glob(worktrees); h.root != "" && len(m) != 1 {
		t.Fatalf("the worktree of %s is not kept in the sandbox: %v", wf, m)
	}
	if r := h.amelia(t, "run", "--workflow", wf, "again"); r.code != 2 || !strings.Contains(r.stderr, recover) {
		t.Errorf("a rerun of %s: exit %d, stderr %q; want a refusal naming %q", wf, r.code, r.stderr, recover)
	}
	if r := h.amelia(t, "stop"); r.code != 1 || !strings.Contains(r.stderr, wf+" (kept)") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("amelia stop with kept work: exit %d, stderr %q; want a refusal", r.code, r.stderr)
	}
	if r := h.amelia(t, "sandbox", "ls"); !strings.Contains(r.stdout, wf+"(kept)") {
		t.Errorf("sandbox ls does not show %s as kept:\n%s%s", wf, r.stdout, r.stderr)
	}
	r := h.amelia(t, "results", wf)
	if r.code != 0 || !strings.Contains(r.stdout, "branch amelia/"+wf) {
		t.Fatalf("amelia results %s: exit %d\nstdout: %s\nstderr: %s", wf, r.code, r.stdout, r.stderr)
	}
	if got := h.git(t, "show", "amelia/"+wf+":"+file); got != content {
		t.Errorf("%s on the brought-back branch: %q, want %q", file, got, content)
	}
	if m, _ := filepath.Glob(worktrees); len(m) != 0 {
		t.Errorf("the worktree is still there after amelia results: %v", m)
	}
	if r := h.amelia(t, "results", wf); r.code == 0 || !strings.Contains(r.stderr, "no work of workflow "+wf) {
		t.Errorf("a second amelia results: exit %d, stderr %q", r.code, r.stderr)
	}
}

// fakeWorker writes a worker that serves the tunnel, the workspace's
// steps and the run's supervision with the real worker and does script
// for everything else, and returns its directory, for
// AMELIA_WORKER_DIR.
func fakeWorker(t *testing.T, script string) string {
	dir := t.TempDir()
	real := filepath.Join(binDir, "amelia-worker-linux-"+runtime.GOARCH)
	body := fmt.Sprintf("#!/bin/sh\ncase \"$1\" in tunnel|git-credential|version|detach|supervise|follow|stop|status|step|sweep|mux|exec) exec %q \"$@\";; esac\n%s\n", real, script)
	writeFile(t, filepath.Join(dir, "amelia-worker-linux-"+runtime.GOARCH), body)
	if err := os.Chmod(filepath.Join(dir, "amelia-worker-linux-"+runtime.GOARCH), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A worker that prints garbage, and one that dies without a result: a
// clear error and a non-zero exit, and nothing left behind.
func TestRunWorkerFailures(t *testing.T) {
	for _, c := range []struct {
		name, script, want string
	}{
		{"garbage", `echo 'this is not JSON'; sleep 30`, "line 1"},
		{"no result", `echo "boom: the agent crashed" >&2; exit 3`, "worker did not emit a result message"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHost(t, llmtest.Options{})
			h.env = append(h.env, "AMELIA_WORKER_DIR="+fakeWorker(t, c.script))
			r := h.amelia(t, "run", "--workflow", "broken", "do it")
			if r.code == 0 || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d, stderr %q: want a failure mentioning %q", r.code, r.stderr, c.want)
			}
			if h.git(t, "branch", "--list", "amelia/*") != "" {
				t.Error("a failed run left a branch in the host repo")
			}
			if m, _ := filepath.Glob(filepath.Join(h.root, "*", "workspace", "worktrees", "*")); len(m) != 0 {
				t.Errorf("worktrees left: %v", m)
			}
		})
	}
}

// gate is a command the agent runs that waits until the test opens the
// gate: a FIFO in the sandbox's /tmp (the host's, for local and ssh).
type gate struct{ path string }

func newGate(t *testing.T) gate {
	b := make([]byte, 6)
	rand.Read(b)
	g := gate{path: "/tmp/amelia-gate-" + hex.EncodeToString(b)}
	t.Cleanup(func() { os.Remove(g.path) })
	return g
}

// command waits at the gate. Opened before the FIFO was made, the gate is
// a plain file, which cat reads at once. The FIFO is the agent's, which
// may run as a uid of its own: anyone may write it.
func (g gate) command() string { return "mkfifo -m 666 " + g.path + " 2>/dev/null; cat " + g.path }

// openGate opens the gate $1 as whoever runs it: a FIFO another uid made
// in the sticky /tmp is written without O_CREAT (fs.protected_fifos
// refuses that); no FIFO yet, a readable plain file takes its place, put
// there by a link that fails should the FIFO appear meanwhile.
const openGate = `p=$1
if [ ! -p "$p" ]; then
	f=$(mktemp "$p.XXXXXX"); echo go >"$f"; chmod 644 "$f"
	if ln "$f" "$p" 2>/dev/null; then rm -f "$f"; exit 0; fi
	rm -f "$f"
fi
echo go | dd of="$p" conv=nocreat,notrunc status=none`

// open lets the agent through, from a command of the test's own in the
// sandbox.
func (g gate) open(t *testing.T, h *host) {
	t.Helper()
	if r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", openGate, "sh", g.path); r.code != 0 {
		t.Fatalf("open the gate: exit %d: %s", r.code, r.stderr)
	}
}

// gatedTurns is an agent that writes before.txt, waits at g, writes
// after.txt and says done: what a fault hits in the middle of.
func gatedTurns(g gate) []llmtest.Turn {
	return []llmtest.Turn{
		{ToolCalls: []llmtest.ToolCall{writeCall("before.txt", "before the fault\n")}},
		{ToolCalls: []llmtest.ToolCall{executeCall(g.command())}},
		{ToolCalls: []llmtest.ToolCall{writeCall("after.txt", "after the fault\n")}},
		{Text: "done despite the fault"},
	}
}

// deliveredDespite checks that a run of wf hit by a fault while its agent
// waited at the gate delivered all of its work, and that rest (what it
// showed after the fault) holds the agent's one later tool call, once.
func (h *host) deliveredDespite(t *testing.T, wf, rest string) {
	t.Helper()
	if n := strings.Count(rest, `"type":"tool_call"`); n != 1 || !strings.Contains(rest, "done despite the fault") {
		t.Errorf("%d tool calls shown after the fault, want the one the agent made then, and its result:\n%s", n, rest)
	}
	for file, want := range map[string]string{"before.txt": "before the fault", "after.txt": "after the fault"} {
		if got := h.git(t, "show", "amelia/"+wf+":"+file); got != want {
			t.Errorf("amelia/%s:%s = %q, want %q", wf, file, got, want)
		}
	}
}

// survivesFault runs wf, does fault while the agent waits at g, opens the
// gate, and checks that the run carries on and delivers; the run's stderr
// must say what happened (want).
func (h *host) survivesFault(t *testing.T, g gate, wf, want string, fault func(r *running)) {
	t.Helper()
	r := h.startUntil(t, g.path, "run", "--json", "--workflow", wf, "survive a fault")
	fault(r)
	g.open(t, h)
	rest, _ := io.ReadAll(r.stdout)
	if code := r.wait(t, "the run's end"); code != 0 {
		t.Fatalf("exit %d after the fault, want the run to carry on; stderr: %s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), want) {
		t.Errorf("stderr does not say %q: %s", want, r.stderr.String())
	}
	// What the fault cut (the exec that keeps the sandbox awake among
	// them) was made whole again: the cleanups find nothing broken.
	if strings.Contains(r.stderr.String(), "cleanup failed") {
		t.Errorf("a cleanup failed after the fault: %s", r.stderr.String())
	}
	h.deliveredDespite(t, wf, string(rest))
}

// interruptedKillsAll sends Ctrl-C to a run of wf while its agent waits
// at g: amelia exits 130, nothing the agent started still runs in the
// sandbox, and the work so far is kept.
func (h *host) interruptedKillsAll(t *testing.T, g gate, wf string) {
	t.Helper()
	r := h.startUntil(t, g.path, "run", "--json", "--workflow", wf, "be interrupted")
	if err := r.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(t, "Ctrl-C"); code != 130 {
		t.Errorf("exit %d after Ctrl-C, want 130; stderr: %s", code, r.stderr.String())
	}
	h.gateClosed(t, g, "Ctrl-C")
	h.bringsBackKept(t, wf, r.stderr.String(), "before.txt", "before the fault")
}

// gateClosed fails the test if anything in the sandbox still waits at g
// after what.
func (h *host) gateClosed(t *testing.T, g gate, what string) {
	t.Helper()
	// [c]: the pattern does not match the command line that holds it.
	ps := h.amelia(t, "sandbox", "exec", "--", "sh", "-c",
		`for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c "[c]at `+g.path+`"`)
	if strings.TrimSpace(ps.stdout) != "0" {
		t.Errorf("the agent's command still runs in the sandbox after %s: %q %s", what, ps.stdout, ps.stderr)
	}
}

// The host dies, then its agent ends (here: stopped from inside the
// sandbox) before anyone attaches: sandbox ls says how it ended, and
// amelia results brings back its work and removes its run directory.
func TestResultsAfterTheHostDied(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{}, gatedTurns(g)...)
	h.orphan(t, g, "orphan")
	runs := filepath.Join(h.root, "*", "workspace", ".amelia", "runs", "orphan-*")
	dirs, _ := filepath.Glob(runs)
	if len(dirs) != 1 {
		t.Fatalf("run directories of orphan: %v, want one", dirs)
	}
	// The local sandbox is this machine: its worker is the one built here.
	worker := filepath.Join(binDir, "amelia-worker-linux-"+runtime.GOARCH)
	if out, err := exec.Command(worker, "stop", "--dir", dirs[0]).CombinedOutput(); err != nil {
		t.Fatalf("stop the agent: %v: %s", err, out)
	}
	if ls := h.amelia(t, "sandbox", "ls", "--json"); !strings.Contains(ls.stdout, `"orphan": "failed"`) {
		t.Errorf("sandbox ls does not show the stopped orphan as failed: %s\n%s", ls.stdout, ls.stderr)
	}
	res := h.amelia(t, "results", "orphan")
	if res.code != 0 || !strings.Contains(res.stdout, "branch amelia/orphan") {
		t.Fatalf("amelia results: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if got := h.git(t, "show", "amelia/orphan:before.txt"); got != "before the fault" {
		t.Errorf("before.txt on the brought-back branch: %q", got)
	}
	if left, _ := filepath.Glob(runs); len(left) != 0 {
		t.Errorf("run directory left after amelia results: %v", left)
	}
}

// amelia stop refuses to remove a sandbox whose agent runs on after its
// host died, and with --force removes it with everything running there:
// the agent has left its exec's process group, and the provider's
// teardown still finds it.
func TestStopForceEndsAnOrphanedAgent(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{}, gatedTurns(g)...)
	h.orphan(t, g, "orphan")
	if st := h.amelia(t, "stop"); st.code != 1 || !strings.Contains(st.stderr, "orphan (running)") {
		t.Errorf("amelia stop with a running agent: exit %d, stderr %q", st.code, st.stderr)
	}
	if st := h.amelia(t, "stop", "--force"); st.code != 0 {
		t.Fatalf("amelia stop --force: exit %d, stderr %q", st.code, st.stderr)
	}
	h.gateClosed(t, g, "amelia stop --force")
}

// killPlugin kills amelia's provider plugin: the one its host's runs
// share.
func killPlugin(t *testing.T, h *host) {
	t.Helper()
	plugins := sharedtest.Plugins(h.tmp)
	if len(plugins) != 1 {
		t.Fatalf("find the shared provider plugin in %s: %v, want one", h.tmp, plugins)
	}
	if err := syscall.Kill(plugins[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

// The provider plugin crashes mid-run: the agent goes on in the sandbox,
// amelia starts the plugin again, reopens the tunnel at the address the
// worker knows, resumes following after the last line it showed, and the
// run delivers all of the agent's work, each message shown once.
func TestRunSurvivesPluginCrash(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{}, gatedTurns(g)...)
	h.survivesFault(t, g, "crash", "starting it again", func(*running) { killPlugin(t, h) })
}

// orphan starts a run of wf and kills its host process (kill -9: no
// cleanup at all) while the agent waits at g.
func (h *host) orphan(t *testing.T, g gate, wf string) {
	t.Helper()
	r := h.startUntil(t, g.path, "run", "--json", "--workflow", wf, "outlive the host")
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.cmd.Wait()
}

// attachAfterHostDied kills the host process of a run of wf mid-run (kill
// -9: no cleanup at all): the agent goes on in the sandbox, waiting out
// the dead proxy; sandbox ls says it runs, logs shows what it said, a
// rerun of its id and results are refused with the way to it, and attach
// takes it over from its first message to its branch.
func (h *host) attachAfterHostDied(t *testing.T, g gate, wf string) {
	t.Helper()
	h.orphan(t, g, wf)
	h.takeOver(t, g, wf)
}

// takeOver is attachAfterHostDied once the host of wf's run died.
func (h *host) takeOver(t *testing.T, g gate, wf string) {
	t.Helper()
	if ls := h.amelia(t, "sandbox", "ls", "--json"); !strings.Contains(ls.stdout, `"`+wf+`": "running"`) {
		t.Errorf("sandbox ls does not show %s running: %s\n%s", wf, ls.stdout, ls.stderr)
	}
	logs := h.amelia(t, "logs", "--json", wf)
	if logs.code != 0 || !strings.Contains(logs.stdout, "before.txt") || !strings.Contains(logs.stdout, g.path) {
		t.Errorf("logs: exit %d, stdout %q, stderr %q; want the two tool calls so far", logs.code, logs.stdout, logs.stderr)
	}
	if again := h.amelia(t, "run", "--workflow", wf, "again"); again.code == 0 || !strings.Contains(again.stderr, "amelia attach --profile e2e "+wf) {
		t.Errorf("a rerun of the running id: exit %d, stderr %q", again.code, again.stderr)
	}
	if res := h.amelia(t, "results", wf); res.code == 0 || !strings.Contains(res.stderr, "still running") {
		t.Errorf("results of a running agent: exit %d, stderr %q", res.code, res.stderr)
	}

	at := h.command("attach", "--json", wf)
	var out, errb bytes.Buffer
	at.Stdout, at.Stderr = &out, &errb
	if err := at.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { at.Process.Kill() })
	g.open(t, h) // the agent's next call waits for a proxy: attach's
	if err := at.Wait(); err != nil {
		t.Fatalf("attach: %v; stderr: %s", err, errb.String())
	}
	// From its start: the two tool calls before the kill, one after.
	if n := strings.Count(out.String(), `"type":"tool_call"`); n != 3 {
		t.Errorf("attach showed %d tool calls, want the run's 3 from its start:\n%s", n, out.String())
	}
	_, after, _ := strings.Cut(out.String(), g.path)
	h.deliveredDespite(t, wf, after)
	if res := h.amelia(t, "results", wf); res.code == 0 || !strings.Contains(res.stderr, "no work of workflow "+wf) {
		t.Errorf("the run is still recorded after attach delivered it: exit %d, %s", res.code, res.stderr)
	}
}

func TestAttachAfterTheHostDied(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{}, gatedTurns(g)...)
	h.attachAfterHostDied(t, g, "orphan")
}

// An agent that changes nothing: a successful run, no branch, and the
// summary says so. Its workflow id is as long as one may be.
func TestRunWithoutChanges(t *testing.T) {
	h := newHost(t, llmtest.Options{}, llmtest.Turn{Text: "Nothing needs changing."})
	r := h.amelia(t, "run", "--json", "--workflow", "noop-"+strings.Repeat("x", 58), "is anything wrong?")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	evs := events(t, r.stdout)
	last := evs[len(evs)-1]
	var summary struct {
		Status string  `json:"status"`
		Branch *string `json:"branch"`
	}
	if err := json.Unmarshal(last.Raw, &summary); err != nil || last.Type != "summary" || summary.Status != "done" || summary.Branch != nil {
		t.Errorf("last event %s, want a done summary without a branch", last.Raw)
	}
	if got := h.git(t, "branch", "--list", "amelia/*"); got != "" {
		t.Errorf("branches: %q", got)
	}
}

// The model refuses a request mid-run (as a context-length error does):
// the worker reports a failed result, the run fails with its reason, and
// what the agent wrote before is kept for amelia results.
func TestRunAgentFails(t *testing.T) {
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("wip.txt", "written before the 400\n")}},
		llmtest.Turn{Status: 400, Error: "maximum context length exceeded"})
	r := h.amelia(t, "run", "--workflow", "refused", "do it")
	if r.code != 1 || !strings.Contains(r.stderr, "the agent failed") || !strings.Contains(r.stderr, "maximum context length") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	if got := h.git(t, "branch", "--list", "amelia/*"); got != "" {
		t.Errorf("branches: %q", got)
	}
	h.bringsBackKept(t, "refused", r.stderr, "wip.txt", "written before the 400")
	// The id is free again.
	if r := h.amelia(t, "run", "--workflow", "refused", "do it"); strings.Contains(r.stderr, "amelia results") {
		t.Errorf("a run of the id after amelia results was refused: %s", r.stderr)
	}
}

// The model refuses the first request: nothing was written, so nothing
// is kept, and the worktree goes.
func TestRunAgentFailsAtOnce(t *testing.T) {
	h := newHost(t, llmtest.Options{}, llmtest.Turn{Status: 400, Error: "model not available"})
	r := h.amelia(t, "run", "--workflow", "refused", "do it")
	if r.code != 1 || !strings.Contains(r.stderr, "model not available") || strings.Contains(r.stderr, "amelia results") {
		t.Errorf("exit %d, stderr %q", r.code, r.stderr)
	}
	if m, _ := filepath.Glob(filepath.Join(h.root, "*", "workspace", "worktrees", "*")); len(m) != 0 {
		t.Errorf("worktrees left: %v", m)
	}
}
