package main_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// gatedScript is gatedTurns(g) as a script file for --model scripted:FILE.
func gatedScript(t *testing.T, g gate) string {
	t.Helper()
	type call struct {
		Name      string            `json:"name"`
		Arguments map[string]string `json:"arguments"`
	}
	turns, err := json.Marshal([]map[string]any{
		{"tool_calls": []call{{"write_file", map[string]string{"file_path": "before.txt", "content": "before the fault\n"}}}},
		{"tool_calls": []call{{"execute", map[string]string{"command": g.command()}}}},
		{"tool_calls": []call{{"write_file", map[string]string{"file_path": "after.txt", "content": "after the fault\n"}}}},
		{"text": "done despite the fault"},
	})
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "script.json")
	writeFile(t, script, string(turns))
	return script
}

// attach finishes the run of wf from dir: it starts amelia attach --json,
// lets the agent through g, and returns what attach showed after the gate
// once it has ended well.
func (h *host) attach(t *testing.T, g gate, dir, wf string) (after, stderr string) {
	t.Helper()
	return h.attachPausing(t, g, dir, wf, nil)
}

// attachPausing is attach with the host held up: with paused, attach is
// stopped (SIGSTOP) once it has shown the agent's last words ("done
// despite the fault") until paused returns, wherever it is then in
// following the agent's end and bringing the work back.
func (h *host) attachPausing(t *testing.T, g gate, dir, wf string, paused func()) (after, stderr string) {
	t.Helper()
	at := h.command("attach", "--json", wf)
	at.Dir = dir
	stdout, err := at.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	at.Stderr = &errb
	if err := at.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { at.Process.Kill() })
	g.open(t, h)
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if paused != nil && strings.Contains(sc.Text(), "done despite the fault") {
			if err := at.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			paused()
			if err := at.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			paused = nil
		}
	}
	if err := sc.Err(); err != nil {
		io.Copy(io.Discard, stdout)
		t.Errorf("read attach's output: %v", err)
	}
	if err := at.Wait(); err != nil {
		t.Fatalf("attach: %v; stderr: %s", err, errb.String())
	}
	if strings.Contains(errb.String(), "cleanup failed") {
		t.Errorf("a cleanup of attach failed: %s", errb.String())
	}
	if paused != nil {
		t.Errorf("attach never showed the agent's last words:\n%s", out.String())
	}
	if n := strings.Count(out.String(), `"type":"tool_call"`); n != 3 {
		t.Errorf("attach showed %d tool calls, want the run's 3 from its start:\n%s", n, out.String())
	}
	_, after, _ = strings.Cut(out.String(), g.path)
	return after, errb.String()
}

// A scripted run on docker whose host died is taken over by amelia attach
// without a key, from another directory: the run recorded its model, the
// script is played again from where the agent is, and the branch comes
// back whole. The profile's upstream is never asked.
func TestDockerAttachScriptedRun(t *testing.T) {
	cli := dockertest.Engine(t)
	g := newGate(t)
	h := newDockerHost(t, cli, dockerSandbox("open"))
	h.withoutKey()
	profile := h.addDockerProfile(t, "attach")
	// Given relative to the checkout, where the run starts.
	script, err := filepath.Rel(h.repo, gatedScript(t, g))
	if err != nil {
		t.Fatal(err)
	}

	const wf = "scripted-orphan"
	r := h.startUntil(t, g.path, "run", "--json", "-p", profile, "--model", "scripted:"+script, "--workflow", wf, "outlive the host")
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.cmd.Wait()

	after, stderr := h.attach(t, g, t.TempDir(), wf)
	if !strings.Contains(stderr, "scripted one on this machine") {
		t.Errorf("attach does not say the model is scripted: %s", stderr)
	}
	h.deliveredDespite(t, wf, after)
	if n := len(h.up.Requests()); n != 0 {
		t.Errorf("the profile's upstream got %d requests", n)
	}
}

// Without the profile's key, attach refuses an agent still running (its
// next model call would need the key), leaving it be; once the agent has
// ended, attach ends its run without the key, its work kept for amelia
// results.
func TestAttachWithoutTheKey(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{}, gatedTurns(g)...)
	const wf = "keyless"
	h.orphan(t, g, wf)
	h.withoutKey()

	r := h.amelia(t, "attach", "--json", wf)
	if r.code != 2 || !strings.Contains(r.stderr, "the agent of "+wf+" is still running") || !strings.Contains(r.stderr, "AMELIA_E2E_KEY is not set") {
		t.Errorf("attach of a running agent without the key: exit %d, stderr %q; want 2, saying the key is needed", r.code, r.stderr)
	}
	if ls := h.amelia(t, "sandbox", "ls", "--json"); !strings.Contains(ls.stdout, `"`+wf+`": "running"`) {
		t.Errorf("sandbox ls does not show %s running after the refused attach: %s\n%s", wf, ls.stdout, ls.stderr)
	}

	// The agent ends: stopped from inside the sandbox (this machine).
	dirs, _ := filepath.Glob(filepath.Join(h.root, "*", "workspace", ".amelia", "runs", wf+"-*"))
	if len(dirs) != 1 {
		t.Fatalf("run directories of %s: %v, want one", wf, dirs)
	}
	worker := filepath.Join(binDir, "amelia-worker-linux-"+runtime.GOARCH)
	if out, err := exec.Command(worker, "stop", "--dir", dirs[0]).CombinedOutput(); err != nil {
		t.Fatalf("stop the agent: %v: %s", err, out)
	}
	r = h.amelia(t, "attach", "--json", wf)
	if r.code != 1 || strings.Contains(r.stderr, "not set") || !strings.Contains(r.stderr, "the agent failed") {
		t.Errorf("attach of an ended agent without the key: exit %d, stderr %q; want 1, the agent's failure, no key asked", r.code, r.stderr)
	}
	h.bringsBackKept(t, wf, r.stderr, "before.txt", "before the fault")
}
