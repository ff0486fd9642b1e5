package main_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/gittest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/proxy"
)

// gitAttack is what an agent that wants the run's git token, or more of
// the forge than its run may have, tries with git and curl: it reports
// each attempt as "ATTEMPT <what>: refused" or ": SUCCEEDED". repo and
// other are the git route's paths of the run's repository and of another
// one on the same forge, at forge.
func gitAttack(forge, repo, other string) string {
	return fmt.Sprintf(`R="$AMELIA_PROXY_URL%s" O="$AMELIA_PROXY_URL%s" F=%q
g() { git -c credential.helper= -c 'credential.helper=!f() { echo username=amelia; echo "password=$AMELIA_PROXY_TOKEN"; }; f' "$@"; }
try() { what=$1; shift; if "$@" >"$out" 2>&1; then echo "ATTEMPT $what: SUCCEEDED"; else echo "ATTEMPT $what: refused"; fi; cat "$out"; }
d=$(mktemp -d); out=$d/out; cd "$d"
g clone -q "$R" mine && echo "CLONED its own repository"
cd mine && git -c user.name=a -c user.email=a@example.com commit -q --allow-empty -m attack
try push-main g push -q origin HEAD:refs/heads/main
try push-another-branch g push -q origin HEAD:refs/heads/evil
try push-a-tag g push -q origin HEAD:refs/tags/evil
try clone-another-repository g clone -q "$O" "$d/other"
try credential-of-the-forge sh -c 'printf "protocol=http\nhost=%%s\n\n" "${F#http://}" | curl -sf -H "Authorization: Bearer $AMELIA_PROXY_TOKEN" --data-binary @- "$AMELIA_PROXY_URL/git/credentials"'
try the-forge-directly git -c credential.helper= clone -q "$F/repo.git" "$d/direct"
echo ATTACK-DONE
cd / && rm -rf "$d"`, repo, other, forge)
}

// A repository given by URL, on a git server that wants a token: the
// sandbox clones it and pushes amelia/<id> through the proxy's git route,
// which adds the token (git.token_env) on the way out. The agent tries to
// get the token, push elsewhere and reach another repository of the same
// forge: every attempt is refused, and neither the token nor the key ever
// enters the sandbox. The server's main does not move.
func TestRunURLRepoPush(t *testing.T) {
	const gitToken = "ghs_e2e-run-push-token-6a0f"
	srv := gittest.NewServer(t, "x-access-token", gitToken)
	mainBefore := gittest.Git(t, srv.Dir, "rev-parse", "main")
	repoPath, _ := proxy.GitPath(srv.RepoURL)
	otherPath, _ := proxy.GitPath(srv.OtherURL)
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("pushed.txt", "from the sandbox\n")}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall(`cat README; env; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`)}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeFor(gitAttack(srv.URL, repoPath, otherPath), 120)}},
		llmtest.Turn{Text: "Added pushed.txt."},
	)
	h.addProfileYAML(t, "    git: {token_env: AMELIA_E2E_GIT_TOKEN}\n")
	h.env = append(h.env, "AMELIA_E2E_GIT_TOKEN="+gitToken)

	r := h.amelia(t, "run", "--json", "--repo", srv.RepoURL, "--push", "--workflow", "url-push", "Add pushed.txt.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	evs := events(t, r.stdout)
	var summary pushSummary
	if last := evs[len(evs)-1]; json.Unmarshal(last.Raw, &summary) != nil || summary.Status != "done" || summary.Branch != "amelia/url-push" || !summary.Pushed ||
		!strings.Contains(summary.DiffStat, "pushed.txt") {
		t.Errorf("summary %s, want done, pushed amelia/url-push, pushed.txt in its diff stat", last.Raw)
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
	attack := toolOutput(t, r.stdout, "ATTACK-DONE")
	if !strings.Contains(attack, "CLONED its own repository") || strings.Count(attack, ": refused") != 6 || strings.Contains(attack, "SUCCEEDED") {
		t.Errorf("the agent's attempts on the forge: want its own clone, and six refusals:\n%s", attack)
	}
	if got := gittest.Git(t, srv.Dir, "for-each-ref", "--format=%(refname)"); got != "refs/heads/amelia/url-push\nrefs/heads/main" {
		t.Errorf("the forge's refs after the run: %q", got)
	}
	if got := gittest.Git(t, srv.OtherDir, "for-each-ref", "--format=%(refname)"); got != "refs/heads/main" {
		t.Errorf("the other repository's refs after the run: %q", got)
	}
	for _, secret := range []string{gitToken, upstreamKey} {
		if strings.Contains(r.stdout, secret) || strings.Contains(r.stderr, secret) {
			t.Errorf("a host secret (%.8s...) appears in the run's output: the sandbox's environment or process arguments", secret)
		}
		assertNoSecret(t, secret, append(callDirs(), h.root)...)
	}
}

// pushSummary is the summary line of a run that pushed.
type pushSummary struct {
	Status   string `json:"status"`
	Branch   string `json:"branch"`
	Pushed   bool   `json:"pushed"`
	DiffStat string `json:"diff_stat"`
}

// A run on a file:// repository that pushes says what it changed, as a
// run that fetches its branch home does.
func TestRunFileURLPushSaysWhatChanged(t *testing.T) {
	srv := gittest.NewServer(t, "x", "y")
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("pushed.txt", "from the sandbox\n")}},
		llmtest.Turn{Text: "Added pushed.txt."},
	)
	r := h.amelia(t, "run", "--json", "--repo", "file://"+srv.Dir, "--push", "--workflow", "file-push", "Add pushed.txt.")
	if r.code != 0 {
		t.Fatalf("amelia run: exit %d\nstderr: %s\nstdout: %s", r.code, r.stderr, r.stdout)
	}
	evs := events(t, r.stdout)
	var summary pushSummary
	if last := evs[len(evs)-1]; json.Unmarshal(last.Raw, &summary) != nil || !summary.Pushed ||
		summary.DiffStat != "pushed.txt | 1 +\n 1 file changed, 1 insertion(+)" {
		t.Errorf("summary %s: want the push, and pushed.txt's line in its diff stat", last.Raw)
	}
	if got := gittest.Git(t, srv.Dir, "show", "amelia/file-push:pushed.txt"); got != "from the sandbox" {
		t.Errorf("the pushed branch's pushed.txt = %q", got)
	}
}
