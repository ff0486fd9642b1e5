package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/reachtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
)

// End-to-end: amelia run on the daytona provider against the fake Daytona
// (its API over HTTP, its SSH gateway, sandboxes that are containers of the
// real engine), with network none: the sandbox has no network at all, and
// the LLM is reached through the exec tunnel over the gateway.

// daytonaTunnelProbe says whether an exec tunnel (a worker running
// `tunnel`) serves the sandbox.
const daytonaTunnelProbe = `for p in /proc/[0-9]*; do
  tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q 'amelia-worker-[0-9a-f]* tunnel' && echo TUNNEL-EXEC
done; echo PROBED`

// fiveMiBStderr writes 5 MiB of "e" to stderr.
const fiveMiBStderr = `head -c 5242880 /dev/zero | tr '\0' e >&2`

// daytonaSandbox is the e2e profile's sandbox block on the fake f, its
// host key known; the egress check tries checkTargets.
func daytonaSandbox(t testing.TB, f *daytonatest.Fake, network string, checkTargets ...string) string {
	known := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(known, []byte(f.KnownHostsLine()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	block, _ := json.Marshal(map[string]any{
		"api_url":         f.URL(),
		"api_key_env":     "DAYTONA_E2E_KEY",
		"known_hosts":     known,
		"host_key_policy": "strict",
	})
	targets, _ := json.Marshal(checkTargets)
	return fmt.Sprintf("{provider: daytona, network: %s, egress_check_targets: %s, daytona: %s}", network, targets, block)
}

func TestRunOnDaytona(t *testing.T) {
	cli, outside := dockerOutside(t)
	f := daytonatest.Start(t, daytonatest.Options{Docker: cli})
	h := newHostWith(t, daytonaSandbox(t, f, "none", outside.Addr()), "", llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("cloud.txt", "written in the cloud\n")}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall("id -un; pwd; " + probe(outside.DevTCP()) + "\n" + daytonaTunnelProbe)}},
		// A tool that writes 5 MiB to stderr: more than Daytona's gateway
		// lets through before it hangs, had it reached the gateway.
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(fiveMiBStderr + "; echo LOUD-DONE")}},
		llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 10, CompletionTokens: 5}},
	)
	h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
	t.Cleanup(func() { h.amelia(t, "sandbox", "down") })

	r := h.amelia(t, "run", "--json", "--sandbox", "daytona", "--workflow", "cloud", "Write cloud.txt.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	// The sandbox's creation, as it went.
	if name := h.sandboxName(t, "e2e"); !strings.Contains(r.stderr, "amelia: Daytona sandbox "+name+": creating\n") || !strings.Contains(r.stderr, "amelia: Daytona sandbox "+name+": started\n") {
		t.Errorf("no live phase of the sandbox's creation on stderr:\n%s", r.stderr)
	}
	if got := h.git(t, "show", "amelia/cloud:cloud.txt"); got != "written in the cloud" {
		t.Errorf("cloud.txt on the branch: %q", got)
	}
	if !strings.Contains(r.stdout, `{"type":"phase","content":"egress","status":"done"`) {
		t.Error("no egress check before the agent ran")
	}
	probed := toolOutput(t, r.stdout, "PROBED")
	if !strings.HasPrefix(probed, "daytona\n/home/daytona/workspace/") {
		t.Errorf("the agent did not run as daytona in the sandbox's workspace:\n%s", probed)
	}
	if strings.Contains(probed, "REACHED") || !strings.Contains(probed, "UNREACHABLE "+outside.DevTCP()) || outside.Accepted() != 0 || !strings.Contains(probed, "TUNNEL-EXEC") {
		t.Errorf("the sandbox reached the host's bridge address directly (%d connections), or no exec tunnel served it:\n%s", outside.Accepted(), probed)
	}
	if loud := toolOutput(t, r.stdout, "LOUD-DONE"); !strings.HasPrefix(loud, "eeee") {
		t.Errorf("the tool that wrote 5 MiB to stderr: %.200q", loud)
	}
	// A command's 5 MiB of stderr reaches amelia's stderr whole through the
	// gateway, which drops stderr, and its stdout after it too.
	loud := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", fiveMiBStderr+"; echo after")
	if loud.code != 0 || loud.stdout != "after\n" || strings.Count(loud.stderr, "e") < 5<<20 {
		t.Errorf("sandbox exec with 5 MiB of stderr: exit %d, stdout %q, %d bytes of stderr", loud.code, loud.stdout, len(loud.stderr))
	}
	for i, req := range h.up.Requests() {
		if got := req.Header.Get("Authorization"); got != "Bearer "+upstreamKey {
			t.Errorf("LLM request %d: Authorization %q, want the host's key", i, got)
		}
	}
	if strings.Contains(r.stdout+r.stderr, upstreamKey) || strings.Contains(r.stdout+r.stderr, f.APIKey()) {
		t.Error("a key appears in amelia's output")
	}

	// The keys are nowhere in the sandbox, and the Daytona key is only
	// ever in the API requests' Authorization header.
	sandboxes := f.Sandboxes()
	if len(sandboxes) != 1 {
		t.Fatalf("%d sandboxes in Daytona, want 1", len(sandboxes))
	}
	for _, key := range []string{upstreamKey, f.APIKey()} {
		s := h.amelia(t, "sandbox", "exec", "--", "sh", "-c",
			`grep -rlF -- "$1" /home /tmp /opt /etc 2>/dev/null; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -F -- "$1"; echo searched`, "sh", key)
		if s.code != 0 || strings.TrimSpace(s.stdout) != "searched" {
			t.Errorf("a key is in the sandbox (files or process environments), or the search failed: exit %d\n%s%s", s.code, s.stdout, s.stderr)
		}
	}
	c, err := cli.ContainerInspect(t.Context(), f.Container(sandboxes[0].ID), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if env := strings.Join(c.Container.Config.Env, "\n"); strings.Contains(env, upstreamKey) || strings.Contains(env, f.APIKey()) {
		t.Error("a key is in the sandbox's environment as created")
	}
	for _, req := range f.Requests() {
		rest := req.Path + "?" + req.RawQuery + "\n" + string(req.Body)
		for k, vs := range req.Header {
			if k != "Authorization" {
				rest += "\n" + k + ": " + strings.Join(vs, ",")
			}
		}
		if strings.Contains(rest, f.APIKey()) || strings.Contains(rest, upstreamKey) {
			t.Errorf("%s %s carries a key outside its Authorization header", req.Method, req.Path)
		}
		if got := req.Header.Get("Authorization"); got != "Bearer "+f.APIKey() {
			t.Errorf("%s %s: Authorization %q", req.Method, req.Path, got)
		}
	}

	if d := h.amelia(t, "sandbox", "down"); d.code != 0 {
		t.Fatalf("amelia sandbox down: exit %d\n%s", d.code, d.stderr)
	}
	if left := f.Sandboxes(); len(left) != 0 {
		t.Errorf("sandboxes left after amelia sandbox down: %+v", left)
	}
}

// A provider that accepts network none without enforcing it (the fake's
// host backend ignores networkBlockAll, as a Daytona without network
// controls would): the egress check, aimed at a listener of the test's on
// host loopback, reaches it, and the run stops before the agent starts,
// naming what it reached. The LLM is never asked and no branch comes back.
func TestRunRefusesUnenforcedNetwork(t *testing.T) {
	outside := reachtest.Listen(t, "127.0.0.1")
	f := daytonatest.Start(t, daytonatest.Options{})
	h := newHostWith(t, daytonaSandbox(t, f, "none", outside.Addr()), "", llmtest.Options{}, llmtest.Turn{Text: "never asked"})
	h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
	t.Cleanup(func() { h.amelia(t, "sandbox", "down") })

	r := h.amelia(t, "run", "--workflow", "fenced", "Write nothing.")
	want := `profile e2e asks for network "none", but the sandbox reached ` + outside.Addr() + " directly: provider daytona does not enforce it here; nothing was run"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("amelia run on a sandbox that reaches out: exit %d, want a refusal saying %q\nstderr: %s", r.code, want, r.stderr)
	}
	outside.Next(t) // the egress check's connection
	if n := len(h.up.Requests()); n != 0 {
		t.Errorf("the LLM got %d requests; the agent must not start", n)
	}
	if b := h.git(t, "branch", "--list", "amelia/fenced"); b != "" {
		t.Errorf("a refused run left a branch: %q", b)
	}
}
