package main_test

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
)

// Runs of one profile share a provider plugin process (pluginclient.Share), which
// lives in amelia's TMPDIR, one per host of these tests.

// pluginProcesses are all provider plugins, shared or not, started with
// TMPDIR tmp.
func pluginProcesses(tmp string) []int {
	return sharedtest.Processes(func(cmdline, environ []byte) bool {
		return bytes.Contains(cmdline, []byte("\x00plugin\x00serve\x00")) && bytes.Contains(environ, []byte("\x00TMPDIR="+tmp+"\x00"))
	})
}

// sharedPid is the pid of the shared plugin a --debug command of amelia
// used, from its log.
func sharedPid(t *testing.T, r result) int {
	t.Helper()
	m := regexp.MustCompile(`msg="provider plugin shared" plugin=\S+ pid=(\d+)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("amelia used no shared plugin: exit %d\n%s", r.code, r.stderr)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// Two runs of one profile at once use one plugin process between them,
// which outlives them; each brings back its own branch.
func TestRunsOfAProfileShareOnePlugin(t *testing.T) {
	g := newGate(t)
	h := newHost(t, llmtest.Options{Script: func(_ int, req *llmtest.Request) llmtest.Turn {
		tools := 0
		for _, m := range req.Chat.Messages {
			if m.Role == "tool" {
				tools++
			}
		}
		id := ""
		for _, m := range req.Chat.Messages {
			if rest, ok := strings.CutPrefix(m.Text(), "share "); ok && m.Role == "user" {
				id = rest
			}
		}
		switch tools {
		case 0:
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(g.command())}}
		case 1:
			return llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall(id+".txt", id+"\n")}}
		}
		return llmtest.Turn{Text: "done"}
	}})
	h.env = append(h.env, "AMELIA_PROFILES__E2E__SANDBOX__CONCURRENT_RUNS=true")
	ids := []string{"one", "two"}
	runs := make([]*running, len(ids))
	for i, id := range ids {
		runs[i] = h.startUntil(t, g.path, "run", "--json", "--workflow", id, "share "+id)
	}
	// Both wait at the gate: their plugin is one process, no run's own.
	if got := pluginProcesses(h.tmp); len(got) != 1 {
		t.Errorf("provider plugin processes while two runs are at the gate: %v, want one", got)
	}
	shared := sharedtest.Plugins(h.tmp)
	if len(shared) != 1 {
		t.Fatalf("shared provider plugins: %v, want one", shared)
	}
	g.open(t, h)
	for i, r := range runs {
		if code := r.wait(t, "the gate opened"); code != 0 {
			t.Errorf("run %s: exit %d; stderr: %s", ids[i], code, r.stderr.String())
		}
	}
	for _, id := range ids {
		if got := h.git(t, "diff", "--name-only", "main", "amelia/"+id); got != id+".txt" {
			t.Errorf("amelia/%s changes %q, want %s.txt only", id, got, id)
		}
	}
	if got := sharedtest.Plugins(h.tmp); !slices.Equal(got, shared) {
		t.Errorf("shared provider plugins after the runs: %v, want %v still", got, shared)
	}
}

// Profiles never share a plugin; one with sandbox.shared_plugin: false
// starts its own for each command.
func TestProfilesKeepTheirPluginsApart(t *testing.T) {
	h := newHost(t, llmtest.Options{})
	for name, extra := range map[string]string{"other": "", "own": "shared_plugin: false, "} {
		h.addProfileYAML(t, fmt.Sprintf("  %s:\n    model: test-model\n    llm: {base_url: %q, api_key_env: AMELIA_E2E_KEY}\n    sandbox: {provider: local, %slocal: {root: %q}}\n",
			name, h.up.URL()+"/v1", extra, h.root))
	}
	run := func(profile string) result {
		t.Helper()
		r := h.amelia(t, "--debug", "--profile", profile, "sandbox", "exec", "--", "true")
		if r.code != 0 {
			t.Fatalf("sandbox exec on %s: exit %d: %s", profile, r.code, r.stderr)
		}
		return r
	}
	first := sharedPid(t, run("e2e"))
	if again := sharedPid(t, run("e2e")); again != first {
		t.Errorf("the second command of a profile used plugin %d, not the first's %d", again, first)
	}
	if other := sharedPid(t, run("other")); other == first {
		t.Errorf("profiles e2e and other share plugin %d", other)
	}
	own := run("own")
	if strings.Contains(own.stderr, `msg="provider plugin shared"`) || !strings.Contains(own.stderr, "shared=false") {
		t.Errorf("the profile with shared_plugin: false did not start a plugin of its own:\n%s", own.stderr)
	}
	if got := sharedtest.Plugins(h.tmp); len(got) != 2 {
		t.Errorf("shared provider plugins: %v, want e2e's and other's", got)
	}
}

// A shared plugin that was killed is replaced by the next command; one
// with no run for its idle time (here none) exits by itself.
func TestSharedPluginKilledOrIdle(t *testing.T) {
	h := newHost(t, llmtest.Options{})
	sandboxExec := func() result {
		t.Helper()
		r := h.amelia(t, "--debug", "sandbox", "exec", "--", "true")
		if r.code != 0 {
			t.Fatalf("sandbox exec: exit %d: %s", r.code, r.stderr)
		}
		return r
	}
	killed := sharedPid(t, sandboxExec())
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sharedtest.WaitGone(t, killed, "the killed plugin")
	if next := sharedPid(t, sandboxExec()); next == killed {
		t.Errorf("the command after the kill used plugin %d, the killed one", next)
	}
	sharedtest.Stop(t, h.tmp)

	h.env = append(h.env, "AMELIA_PLUGIN_IDLE=0")
	idle := sharedPid(t, sandboxExec())
	sharedtest.WaitGone(t, idle, "the idle plugin")
	if socks, _ := filepath.Glob(filepath.Join(h.tmp, "amelia-*", "*.sock")); len(socks) != 0 {
		t.Errorf("the idle plugin left its socket: %v", socks)
	}
}
