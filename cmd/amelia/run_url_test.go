package main_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/gittest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// A repository given by URL, on a git server that wants a token: the sandbox
// clones it and pushes amelia/<id> with credentials from the host's proxy
// (git.token_env), and neither the token nor the key ever enters it. The
// server's main does not move.
func TestRunURLRepoPush(t *testing.T) {
	const gitToken = "ghs_e2e-run-push-token-6a0f"
	srv := gittest.NewServer(t, "x-access-token", gitToken)
	mainBefore := gittest.Git(t, srv.Dir, "rev-parse", "main")
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("pushed.txt", "from the sandbox\n")}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(`cat README; env; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`)}},
		llmtest.Turn{Text: "Added pushed.txt."},
	)
	h.addProfileYAML(t, "    git: {token_env: AMELIA_E2E_GIT_TOKEN}\n")
	h.env = append(h.env, "AMELIA_E2E_GIT_TOKEN="+gitToken)

	r := h.amelia(t, "run", "--json", "--repo", srv.RepoURL, "--push", "--workflow", "url-push", "Add pushed.txt.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	evs := events(t, r.stdout)
	var summary struct {
		Status string `json:"status"`
		Branch string `json:"branch"`
		Pushed bool   `json:"pushed"`
	}
	if last := evs[len(evs)-1]; json.Unmarshal(last.Raw, &summary) != nil || summary.Status != "done" || summary.Branch != "amelia/url-push" || !summary.Pushed {
		t.Errorf("summary %s, want done, pushed amelia/url-push", last.Raw)
	}
	// The agent worked on the clone: the server's README was there.
	if !strings.Contains(r.stdout, `"tool_output":"hello\n`) {
		t.Error("the agent did not see the cloned repository's README")
	}
	if got := gittest.Git(t, srv.Dir, "show", "amelia/url-push:pushed.txt"); got != "from the sandbox" {
		t.Errorf("the pushed branch's pushed.txt = %q", got)
	}
	if got := gittest.Git(t, srv.Dir, "rev-parse", "amelia/url-push^"); got != mainBefore {
		t.Errorf("the pushed branch's parent is %s, want main's %s", got, mainBefore)
	}
	if got := gittest.Git(t, srv.Dir, "rev-parse", "main"); got != mainBefore {
		t.Error("the server's main moved")
	}
	for _, secret := range []string{gitToken, upstreamKey} {
		if strings.Contains(r.stdout, secret) || strings.Contains(r.stderr, secret) {
			t.Errorf("a host secret (%.8s...) appears in the run's output: the sandbox's environment or process arguments", secret)
		}
		assertNoSecret(t, secret, h.root, "/tmp/amelia")
	}
}
