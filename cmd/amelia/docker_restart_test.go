package main_test

import (
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
)

// docker restart of a sandbox whose agent waits at a gate, its host dead:
// the supervisor dies with the container, without an exit status. amelia
// logs (and logs -f, which does not wait) shows what the agent wrote until
// then and says exactly that, with the command that brings its work back;
// that command does.
func TestLogsAfterDockerRestart(t *testing.T) {
	cli := dockertest.Engine(t)
	g := newGate(t)
	h := newDockerHost(t, cli, dockerSandbox("open"))
	profile := h.addDockerProfile(t, "restart")
	script := gatedScript(t, g)

	// The host dies while the agent waits at the gate, then the sandbox
	// restarts.
	const wf = "restarted"
	r := h.startUntil(t, g.path, "run", "--json", "-p", profile, "--model", "scripted:"+script, "--workflow", wf, "outlive the host")
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.cmd.Wait()
	if _, err := cli.ContainerRestart(t.Context(), "amelia-sandbox-"+h.sandboxName(t, profile), client.ContainerRestartOptions{}); err != nil {
		t.Fatal(err)
	}

	want := "amelia: the agent of " + wf + " is not running: its supervisor in sandbox " + h.sandboxName(t, profile) +
		" is gone without an exit status (the sandbox restarted, or something killed it); above is what it wrote until then;" +
		" bring its work back with amelia results --profile " + profile + " " + wf + "\n"
	for _, args := range [][]string{{"logs", "-p", profile, "--json", wf}, {"logs", "-p", profile, "--json", "-f", wf}} {
		r := h.amelia(t, args...)
		if r.code != 1 || r.stderr != want {
			t.Errorf("amelia %s after docker restart: exit %d\nstderr: %q\nwant:   %q", strings.Join(args, " "), r.code, r.stderr, want)
		}
		// What the agent wrote before the restart: its two tool calls, and
		// the result of the first.
		var calls, results []string
		for _, ev := range events(t, r.stdout) {
			switch ev.Type {
			case "tool_call":
				calls = append(calls, string(ev.Raw))
			case "tool_result":
				results = append(results, string(ev.Raw))
			}
		}
		if len(calls) != 2 || !strings.Contains(calls[0], "before.txt") || !strings.Contains(calls[1], g.path) || len(results) != 1 {
			t.Errorf("amelia %s after docker restart showed tool calls %q and results %q; want the write of before.txt and the gate, and the write's result",
				strings.Join(args, " "), calls, results)
		}
	}

	res := h.amelia(t, "results", "--profile", profile, wf)
	if res.code != 0 || !strings.Contains(res.stdout, "branch amelia/"+wf) {
		t.Fatalf("amelia results after docker restart: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if got := h.git(t, "show", "amelia/"+wf+":before.txt"); got != "before the fault" {
		t.Errorf("before.txt on the brought-back branch: %q", got)
	}
}
