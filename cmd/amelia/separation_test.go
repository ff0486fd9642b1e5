package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// attackScript is what an attacking agent runs in its checkout: it waits
// until it sees the nine other agents (one ps per scan; it stops at nine,
// or gives up after 300 s, never because one scan found fewer), then
// tries everything another run could want of them, and reports each
// attempt as "ATTEMPT <what> <target>: refused" or ": SUCCEEDED".
const attackScript = `me=$(id -u) self=$(pwd -P)
root=$(dirname "$(dirname "$self")")
agents() { ps -eo pid=,uid=,args= | grep -E '^ *[0-9]+ +[0-9]+ +[^ ]*amelia-worker[^ ]* agentic '; }
deadline=$(( $(date +%s) + 300 ))
while :; do
	others=$(( $(agents | wc -l) - 1 ))
	[ "$others" -ge 9 ] && break
	[ "$(date +%s)" -ge "$deadline" ] && break
	sleep 0.2
done
echo "SAW $others"
echo "UIDS $(agents | sed -E 's/^ *[0-9]+ +([0-9]+) .*/\1/' | sort -u | tr '\n' ' ')"
try() { what=$1; shift; if "$@" >/dev/null 2>&1; then echo "ATTEMPT $what: SUCCEEDED"; else echo "ATTEMPT $what: refused"; fi; }
agents | while read -r pid uid rest; do
	cwd=$(printf '%s\n' "$rest" | sed -n 's/.* --cwd \([^ ]*\).*/\1/p')
	[ "$cwd" = "$self" ] && continue
	run=$(printf '%s\n' "$rest" | sed -n 's/.* --prompt-file \([^ ]*\)\/[^/ ]*.*/\1/p')
	try "write-checkout $cwd" sh -c 'echo pwned >"$1/pwned-by-$2.txt"' sh "$cwd" "$me"
	try "list-checkout $cwd" ls "$cwd"
	try "read-run-dir $run" sh -c 'cat "$1/prompt.txt" || ls "$1"' sh "$run"
	try "signal-agent $pid" kill -CONT "$pid"
done
refused=0
for e in /proc/[0-9]*/environ; do
	pid=${e#/proc/}; pid=${pid%/environ}
	[ -e "/proc/$pid" ] || continue
	if ! env=$(tr '\0' '\n' 2>/dev/null <"$e"); then refused=$((refused + 1)); continue; fi
	tok=$(printf '%s\n' "$env" | sed -n 's/^AMELIA_PROXY_TOKEN=//p' | head -n 1)
	if [ -n "$tok" ] && [ "$tok" != "$AMELIA_PROXY_TOKEN" ]; then echo "ATTEMPT token-of $pid: SUCCEEDED"; fi
done
echo "ATTEMPT token-of $refused processes: refused"
try "write-repo-ref $root/repo" git --git-dir="$root/repo" update-ref "refs/heads/pwned-by-$me" "$(git rev-parse HEAD)"
try "write-repo-object $root/repo" sh -c 'echo pwned | git --git-dir="$1" hash-object -w --stdin' sh "$root/repo"
try "write-repo-file $root/repo" touch "$root/repo/pwned-by-$me"
echo ATTACK-DONE`

// executeFor is an execute call that may run for up to secs seconds.
func executeFor(command string, secs int) llmtest.ToolCall {
	args, _ := json.Marshal(map[string]any{"command": command, "timeout": secs})
	return llmtest.ToolCall{Name: "execute", Arguments: string(args)}
}

// separatedRun is one of the concurrent runs: amelia in the background,
// its output gathered as it comes.
type separatedRun struct {
	id     string
	gate   gate
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	// reported closes when the run's output shows the attack's report;
	// ended when amelia has exited, with its code in code.
	reported, ended chan struct{}
	code            int
}

func (r *separatedRun) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stdout.String()
}

func (r *separatedRun) errors() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// Ten runs at once in one docker container, two of them attackers whose
// agents, once they see the nine others, try to write every other
// checkout, read every other run directory, read another process's token
// from /proc/*/environ, write the shared repository and signal the other
// agents. Every attempt is refused, the agents run as ten different uids,
// and each of the eight victims brings back exactly its own file on its
// branch. Nothing holds the sandbox one run at a time: sandbox ls says
// its runs are separated.
func TestDockerRunsAreSeparated(t *testing.T) {
	cli := dockertest.Engine(t)
	victims := []string{"v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8"}
	attackers := []string{"a1", "a2"}
	runs := map[string]*separatedRun{}
	for _, id := range append(slices.Clone(victims), attackers...) {
		runs[id] = &separatedRun{id: id, gate: newGate(t), reported: make(chan struct{}), ended: make(chan struct{})}
	}
	// Each run's agent: a victim writes its file and waits at its gate; an
	// attacker attacks, then waits at its gate, so that every agent lives
	// until both attackers are done.
	script := func(_ int, req *llmtest.Request) llmtest.Turn {
		var run *separatedRun
		steps := 0
		for _, m := range req.Chat.Messages {
			if m.Role == "tool" {
				steps++
			}
			for id, r := range runs {
				if m.Role == "user" && strings.Contains(m.Text(), "run "+id+".") {
					run = r
				}
			}
		}
		if run == nil {
			return llmtest.Turn{Text: "no task found"}
		}
		switch {
		case steps == 0 && run.id[0] == 'v':
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall(run.id+".txt", run.id+"\n")}}
		case steps == 0:
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeFor(attackScript, 600)}}
		case steps == 1:
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeFor(run.gate.command(), 600)}}
		}
		return llmtest.Turn{Text: "done"}
	}
	h := newHostWith(t, dockerSandbox("open"), "", llmtest.Options{Script: script})
	dockertest.RemoveContainers(t, cli, "amelia.config="+h.configPath())
	if r := h.amelia(t, "sandbox", "up"); r.code != 0 {
		t.Fatalf("sandbox up: exit %d: %s", r.code, r.stderr)
	}

	for _, r := range runs {
		cmd := h.command("run", "--json", "--workflow", r.id, "This is run "+r.id+".")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = &lockedWriter{mu: &r.mu, w: &r.stderr}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		go func() {
			defer close(r.ended)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(nil, 1<<20)
			told := false
			for sc.Scan() {
				r.mu.Lock()
				r.stdout.Write(sc.Bytes())
				r.stdout.WriteByte('\n')
				r.mu.Unlock()
				if !told && strings.Contains(sc.Text(), `"type":"tool_result"`) && strings.Contains(sc.Text(), "ATTACK-DONE") {
					told = true
					close(r.reported)
				}
			}
			io.Copy(io.Discard, stdout)
			cmd.Wait()
			r.code = cmd.ProcessState.ExitCode()
		}()
	}
	for _, id := range attackers {
		select {
		case <-runs[id].reported:
		case <-runs[id].ended:
			t.Fatalf("attacker %s ended before it reported: exit %d\nstderr: %s\nstdout: %s", id, runs[id].code, runs[id].errors(), runs[id].output())
		}
	}
	// All ten agents are alive, each at its gate.
	ls := h.amelia(t, "sandbox", "ls", "--json")
	var rows []struct {
		Runs           string            `json:"runs"`
		WorkflowStates map[string]string `json:"workflow_states"`
	}
	if err := json.Unmarshal([]byte(ls.stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("sandbox ls --json: %v\n%s%s", err, ls.stdout, ls.stderr)
	}
	if rows[0].Runs != "separated" || len(rows[0].WorkflowStates) != len(runs) {
		t.Errorf("sandbox ls while the ten run: runs %q, workflows %v; want separated and all ten", rows[0].Runs, rows[0].WorkflowStates)
	}
	for id, st := range rows[0].WorkflowStates {
		if st != "running" {
			t.Errorf("sandbox ls: %s is %s, want running", id, st)
		}
	}
	for _, r := range runs {
		r.gate.open(t, h)
	}
	for _, r := range runs {
		<-r.ended
		if r.code != 0 {
			t.Errorf("run %s: exit %d\nstderr: %s", r.id, r.code, r.errors())
		}
	}

	for _, id := range attackers {
		report := toolOutput(t, runs[id].output(), "ATTACK-DONE")
		t.Logf("attacker %s reported:\n%s", id, report)
		checkAttackRefused(t, id, report)
	}
	for _, id := range victims {
		if got := h.git(t, "diff", "--name-only", "main", "amelia/"+id); got != id+".txt" {
			t.Errorf("amelia/%s changes %q, want %s.txt only", id, got, id)
		}
		if got := h.git(t, "show", "amelia/"+id+":"+id+".txt"); got != id {
			t.Errorf("amelia/%s:%s.txt = %q", id, id, got)
		}
	}
	for _, id := range attackers {
		if got := h.git(t, "branch", "--list", "amelia/"+id); got != "" {
			t.Errorf("the attacker %s brought back a branch: %s", id, got)
		}
	}
}

var (
	attemptLine = regexp.MustCompile(`(?m)^ATTEMPT (\S+) (.*): (refused|SUCCEEDED)$`)
	uidsLine    = regexp.MustCompile(`(?m)^UIDS (.*)$`)
	tokenLine   = regexp.MustCompile(`(?m)^ATTEMPT token-of (\d+) processes: refused$`)
)

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// checkAttackRefused checks an attacker's report: it saw the nine other
// agents, under ten different uids of runs; it tried each attack on each
// of them, and none succeeded.
func checkAttackRefused(t *testing.T, id, report string) {
	t.Helper()
	if !strings.Contains(report, "SAW 9\n") {
		t.Errorf("attacker %s did not see the nine other agents:\n%s", id, report)
	}
	m := uidsLine.FindStringSubmatch(report)
	if m == nil {
		t.Fatalf("attacker %s reported no uids:\n%s", id, report)
	}
	uids := strings.Fields(m[1])
	if len(uids) != 10 {
		t.Errorf("the ten agents ran as %d different uids (%v), want 10", len(uids), uids)
	}
	for _, u := range uids {
		if n, err := strconv.Atoi(u); err != nil || n < 60100 || n > 64999 {
			t.Errorf("an agent ran as uid %s, not one of the runs' (60100-64999)", u)
		}
	}
	tried := map[string]int{}
	for _, a := range attemptLine.FindAllStringSubmatch(report, -1) {
		tried[a[1]]++
		if a[3] != "refused" {
			t.Errorf("attacker %s: %s %s succeeded", id, a[1], a[2])
		}
	}
	want := map[string]int{
		"write-checkout": 9, "list-checkout": 9, "read-run-dir": 9, "signal-agent": 9,
		"token-of": 1, "write-repo-ref": 1, "write-repo-object": 1, "write-repo-file": 1,
	}
	for what, n := range want {
		if tried[what] < n {
			t.Errorf("attacker %s tried %s %d times, want at least %d:\n%s", id, what, tried[what], n, report)
		}
	}
	// At least the nine other agents' environments were asked for.
	if m := tokenLine.FindStringSubmatch(report); m == nil || atoi(m[1]) < 9 {
		t.Errorf("attacker %s was refused fewer than nine processes' environments:\n%s", id, report)
	}
}

// lockedWriter writes to w under mu.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// squatScript is what a squatting agent runs first: a directory anyone
// may write in /tmp, and a link to it at the checkout path of workflow
// late1, which has not run yet.
const squatScript = `w=$(dirname "$(pwd -P)") trap=/tmp/trap-$(id -u)
mkdir -m 777 "$trap" && ln -s "$trap" "$w/late1" && echo SQUATTED`

// raceScript keeps replacing what the squatter has at late1's path by a
// directory, a file and a link, until the gate g opens.
func raceScript(g gate) string {
	return `w=$(dirname "$(pwd -P)") trap=/tmp/trap-$(id -u)
while :; do
	rm -rf "$w/late1"; mkdir "$w/late1"; rm -rf "$w/late1"; echo squat >"$w/late1"; rm -f "$w/late1"; ln -s "$trap" "$w/late1"
done >/dev/null 2>&1 &
` + g.command() + `
kill $!`
}

// A run's agent cannot block a workflow yet to run: it puts a link at the
// checkout path of workflow late1, and while late1 starts keeps replacing
// it by a directory, a file and a link. sandbox ls counts none of them as
// a workflow; late1 runs all the same and brings back its own branch; the
// link's target stays empty; and once the squatter's run has ended (its
// uid released), nothing is left in the sandbox's worktrees/ and
// .amelia/runs/, nor the squatter's trap.
func TestDockerRunCannotBlockALaterWorkflow(t *testing.T) {
	cli := dockertest.Engine(t)
	g := newGate(t)
	script := func(_ int, req *llmtest.Request) llmtest.Turn {
		steps, late := 0, false
		for _, m := range req.Chat.Messages {
			if m.Role == "tool" {
				steps++
			}
			if m.Role == "user" && strings.Contains(m.Text(), "run late1.") {
				late = true
			}
		}
		switch {
		case late && steps == 0:
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("late1.txt", "late1\n")}}
		case !late && steps == 0:
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(squatScript)}}
		case !late && steps == 1:
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeFor(raceScript(g), 600)}}
		}
		return llmtest.Turn{Text: "done"}
	}
	h := newHostWith(t, dockerSandbox("open"), "", llmtest.Options{Script: script})
	dockertest.RemoveContainers(t, cli, "amelia.config="+h.configPath())

	squatter := h.startUntil(t, g.path, "run", "--json", "--workflow", "squat", "This is run squat.")
	ls := h.amelia(t, "sandbox", "ls", "--json")
	var rows []struct {
		Workflows []string `json:"workflows"`
	}
	if err := json.Unmarshal([]byte(ls.stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("sandbox ls --json: %v\n%s%s", err, ls.stdout, ls.stderr)
	}
	if !slices.Equal(rows[0].Workflows, []string{"squat"}) {
		t.Errorf("sandbox ls while late1's path is squatted: workflows %q, want squat alone", rows[0].Workflows)
	}

	late := h.amelia(t, "run", "--json", "--workflow", "late1", "This is run late1.")
	if late.code != 0 {
		t.Fatalf("run late1 with its path squatted: exit %d\nstderr: %s", late.code, late.stderr)
	}
	if got := h.git(t, "diff", "--name-only", "main", "amelia/late1"); got != "late1.txt" {
		t.Errorf("amelia/late1 changes %q, want late1.txt alone", got)
	}
	if r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `ls -A /tmp/trap-*/`); r.code != 0 || r.stdout != "" {
		t.Errorf("the trap the squatter's links led to: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}

	g.open(t, h)
	if code := squatter.wait(t, "its gate opened"); code != 0 {
		t.Fatalf("the squatter's run: exit %d\nstderr: %s", code, squatter.stderr.String())
	}
	r := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `find worktrees .amelia/runs -mindepth 1 -maxdepth 1 -printf '%u %p\n'; ls -d /tmp/trap-* 2>/dev/null; true`)
	if r.code != 0 || r.stdout != "" {
		t.Errorf("left in the sandbox once both runs ended: exit %d, %q %s", r.code, r.stdout, r.stderr)
	}
}
