package worker_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// detached starts `amelia-worker agentic` detached in a new run directory,
// with srv as the LLM, and returns the directory. Whatever the test leaves
// running there is stopped at its end.
func detached(t *testing.T, srv *llmtest.Server, cwd string, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	prompt := writeFile(t, t.TempDir(), "p.txt", "work")
	args := append([]string{"detach", "--dir", dir, "--grace", "2s"}, extra...)
	args = append(args, "--", workerBin, "agentic", "--prompt-file", prompt, "--cwd", cwd, "--model", "m")
	r := runWorker(t, proxyEnv(srv), nil, args...)
	if r.code != 0 {
		t.Fatalf("detach: exit %d: %s", r.code, r.stderr)
	}
	t.Cleanup(func() {
		// Exit 125 is a run whose supervisor the test killed.
		out, err := exec.Command(workerBin, "stop", "--dir", dir).CombinedOutput()
		if exitErr, ok := errors.AsType[*exec.ExitError](err); err != nil && (!ok || exitErr.ExitCode() != 125) {
			t.Errorf("stop the run: %v: %s", err, out)
		}
	})
	return dir
}

// follow runs `amelia-worker follow` and returns its stdout lines.
func follow(t *testing.T, dir string, args ...string) (lines []string, r result) {
	t.Helper()
	r = runWorker(t, nil, nil, append([]string{"follow", "--dir", dir}, args...)...)
	for l := range strings.Lines(string(r.stdout)) {
		lines = append(lines, l)
	}
	return lines, r
}

// The run goes on without whoever started it; follow streams it whole, and
// again from any line on, as a host that reconnects asks.
func TestDetachedRunFollowsFromAnyLine(t *testing.T) {
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("execute", `{"command": "echo one"}`)}},
		llmtest.Turn{Text: "done"},
	)
	dir := detached(t, srv, t.TempDir())
	all, r := follow(t, dir)
	if r.code != 0 {
		t.Fatalf("follow: exit %d: %s", r.code, r.stderr)
	}
	// tool_call, tool_result, result, usage
	if len(all) != 4 || !strings.Contains(all[2], `"type":"result"`) {
		t.Fatalf("follow gave %d lines, want the 4 of the run:\n%s", len(all), strings.Join(all, ""))
	}
	for skip := range len(all) + 1 {
		rest, r := follow(t, dir, "--skip", strconv.Itoa(skip))
		if r.code != 0 || strings.Join(rest, "") != strings.Join(all[skip:], "") {
			t.Errorf("follow --skip %d: exit %d, lines %q; want %q", skip, r.code, rest, all[skip:])
		}
	}
	if st := runWorker(t, nil, nil, "status", "--dir", dir); string(st.stdout) != `{"state":"ended","code":0}`+"\n" {
		t.Errorf("status = %s", st.stdout)
	}
}

// agentWithLeftovers starts a detached run whose tool call leaves a
// process that escaped its process group (setsid) and blocks in a second
// one; it returns the run's directory, the pid of the worker running the
// agent and that of the escaped process.
func agentWithLeftovers(t *testing.T) (dir string, agent, escaped int) {
	t.Helper()
	cwd := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(cwd, "ready"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("execute",
			`{"command": "setsid sleep 1103 </dev/null >/dev/null 2>&1 & echo $! > escaped; echo $PPID > ready; sleep 1104"}`)}},
		llmtest.Turn{Text: "done"},
	)
	dir = detached(t, srv, cwd)
	agent = pidFrom(t, filepath.Join(cwd, "ready")) // blocks until bash wrote it
	return dir, agent, pidFrom(t, filepath.Join(cwd, "escaped"))
}

// A worker killed with SIGKILL cannot clean up: the supervisor kills what
// it left, even what left its process group, and says how it ended.
func TestDetachedWorkerKilledTakesItsTreeAlong(t *testing.T) {
	dir, agent, escaped := agentWithLeftovers(t)
	if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	lines, r := follow(t, dir)
	if r.code != 128+int(syscall.SIGKILL) {
		t.Errorf("follow: exit %d, want %d (the worker's death by SIGKILL)", r.code, 128+int(syscall.SIGKILL))
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"type":"tool_call"`) {
		t.Errorf("follow gave %q, want the one tool call written before the kill", lines)
	}
	waitGone(t, escaped)
	if exit := readFile(t, filepath.Join(dir, "exit")); !strings.Contains(exit, `"signal":"SIGKILL"`) {
		t.Errorf("exit file = %s", exit)
	}
}

// stop is a cancel: the worker writes its interrupted result, and nothing
// it started outlives it.
func TestDetachedStopEndsEverything(t *testing.T) {
	dir, _, escaped := agentWithLeftovers(t)
	if r := runWorker(t, nil, nil, "stop", "--dir", dir); r.code != 0 {
		t.Fatalf("stop: exit %d: %s", r.code, r.stderr)
	}
	waitGone(t, escaped)
	lines, r := follow(t, dir)
	if r.code != 130 {
		t.Errorf("follow: exit %d, want 130 (interrupted)", r.code)
	}
	var res *protocol.AgenticMessage
	for _, l := range lines {
		if m, err := protocol.NewDecoder(strings.NewReader(l)).Decode(); err == nil && m.Type == protocol.Result {
			res = m
		}
	}
	if res == nil || !res.IsError || !strings.Contains(str(res.Content), "interrupted") {
		t.Errorf("no interrupted result in %q", lines)
	}
}

// A directory runs one command, ever; a held lock refuses the start; and
// follow tells a run that never was, or whose supervisor died, from one
// that is running.
func TestDetachRefusals(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Text: "done"})
	dir := detached(t, srv, t.TempDir())
	prompt := writeFile(t, t.TempDir(), "p.txt", "work")
	again := runWorker(t, proxyEnv(srv), nil, "detach", "--dir", dir, "--", workerBin, "agentic", "--prompt-file", prompt, "--cwd", "/", "--model", "m")
	if again.code != 3 || !bytes.Contains(again.stderr, []byte("already started")) {
		t.Errorf("second detach in one directory: exit %d, %s", again.code, again.stderr)
	}

	lock := filepath.Join(t.TempDir(), "lock")
	holder := exec.Command("flock", lock, "sh", "-c", "echo held; exec sleep 1105")
	// flock(1) runs the command as its child: the group goes at the end.
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatalf("start flock(1): %v", err)
	}
	t.Cleanup(func() { syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); holder.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("flock(1) said %q, %v", line, err)
	}
	busy := runWorker(t, proxyEnv(srv), nil, "detach", "--dir", filepath.Join(t.TempDir(), "r"), "--lock", lock, "--",
		workerBin, "agentic", "--prompt-file", prompt, "--cwd", "/", "--model", "m")
	if busy.code != 4 || !bytes.Contains(busy.stderr, []byte("in use by another run")) {
		t.Errorf("detach with the lock held: exit %d, %s", busy.code, busy.stderr)
	}

	if _, r := follow(t, t.TempDir()); r.code != 125 || !bytes.Contains(r.stderr, []byte("no run in")) {
		t.Errorf("follow of an empty directory: exit %d, %s", r.code, r.stderr)
	}

	lost, agent, escaped := agentWithLeftovers(t)
	t.Cleanup(func() {
		// Nobody supervises them any more: SIGTERM makes the worker end
		// its tool's group.
		syscall.Kill(agent, syscall.SIGTERM)
		syscall.Kill(escaped, syscall.SIGKILL)
		waitGone(t, agent)
	})
	supervisor := pidFrom(t, filepath.Join(lost, "pid"))
	syscall.Kill(supervisor, syscall.SIGKILL)
	waitGone(t, supervisor)
	if _, r := follow(t, lost); r.code != 125 || !bytes.Contains(r.stderr, []byte("gone without an exit status")) {
		t.Errorf("follow after the supervisor died: exit %d, %s", r.code, r.stderr)
	}
	if st := runWorker(t, nil, nil, "status", "--dir", lost); string(st.stdout) != `{"state":"lost"}`+"\n" {
		t.Errorf("status = %s", st.stdout)
	}
}

// --home and --tmpdir give the command a HOME and a TMPDIR of its own,
// made 0700.
func TestDetachPrivateHome(t *testing.T) {
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("execute", `{"command": "echo \"home=$HOME tmp=$TMPDIR\"; stat -c %a \"$HOME\" \"$TMPDIR\"; mktemp"}`)}},
		llmtest.Turn{Text: "done"},
	)
	base := t.TempDir()
	home, tmp := filepath.Join(base, "a", "home"), filepath.Join(base, "b", "tmp")
	dir := detached(t, srv, t.TempDir(), "--home", home, "--tmpdir", tmp)
	lines, r := follow(t, dir)
	if r.code != 0 || len(lines) < 2 {
		t.Fatalf("follow: exit %d, %q: %s", r.code, lines, r.stderr)
	}
	m, err := protocol.NewDecoder(strings.NewReader(lines[1])).Decode()
	if err != nil || m.Type != protocol.ToolResult {
		t.Fatalf("second line %q: %v", lines[1], err)
	}
	out := str(m.ToolOutput)
	for _, want := range []string{"home=" + home + " tmp=" + tmp, "700\n700\n", tmp + "/tmp."} {
		if !strings.Contains(out, want) {
			t.Errorf("the command's output %q does not hold %q", out, want)
		}
	}
}

// A run whose supervisor is gone is lost even when another process got
// its pid since (the sandbox restarted, and pids began again): the pid
// file names the supervisor's start time too. Following such a run still
// shows what it wrote.
func TestDetachedRunLostToAReusedPid(t *testing.T) {
	dir := t.TempDir()
	line := `{"type":"thinking","content":"before the restart","session_id":"s","is_error":false,"model":"m","usage":null}` + "\n"
	writeFile(t, dir, "messages.jsonl", line)
	// This test's own pid, alive, but started at another time.
	writeFile(t, dir, "pid", strconv.Itoa(os.Getpid())+" 1\n")
	if st := runWorker(t, nil, nil, "status", "--dir", dir); string(st.stdout) != `{"state":"lost"}`+"\n" {
		t.Errorf("status of a run whose pid another process has = %s", st.stdout)
	}
	lines, r := follow(t, dir)
	if r.code != 125 || len(lines) != 1 || lines[0] != line {
		t.Errorf("follow of the lost run: exit %d, lines %q, stderr %s; want its line, then 125", r.code, lines, r.stderr)
	}
	// The same file naming the pid alone, as older workers wrote it: the
	// process runs, so the run does.
	writeFile(t, dir, "pid", strconv.Itoa(os.Getpid())+"\n")
	if st := runWorker(t, nil, nil, "status", "--dir", dir); string(st.stdout) != `{"state":"running"}`+"\n" {
		t.Errorf("status of a run whose pid file is an older worker's = %s", st.stdout)
	}
}
