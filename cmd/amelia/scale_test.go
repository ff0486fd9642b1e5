package main_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// Twenty runs at once on one docker sandbox each bring back their own
// branch, holding their own file and nothing of another's, and leave no
// active workflow, no uid and no process of a run behind.
func TestTwentyRunsOnOneDockerSandbox(t *testing.T) {
	const n = scaleRuns
	cli := dockertest.Engine(t)
	h := newHostWith(t, dockerSandbox("open"), "", llmtest.Options{Script: func(_ int, req *llmtest.Request) llmtest.Turn {
		if req.Chat.Messages[len(req.Chat.Messages)-1].Role == "tool" {
			return llmtest.Turn{Text: "done"}
		}
		for _, m := range req.Chat.Messages {
			if id, ok := strings.CutPrefix(m.Text(), "write "); ok && m.Role == "user" {
				return llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall(id+".txt", id+"\n")}}
			}
		}
		return llmtest.Turn{Text: "no task found"}
	}})
	dockertest.RemoveContainers(t, cli, "amelia.config="+h.configPath())
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i] = h.amelia(t, "run", "--json", "--workflow", fmt.Sprintf("w%02d", i), fmt.Sprintf("write w%02d", i))
		})
	}
	wg.Wait()
	for i, r := range results {
		id := fmt.Sprintf("w%02d", i)
		if r.code != 0 {
			t.Errorf("run %s: exit %d, stderr %s", id, r.code, r.stderr)
			continue
		}
		if got := h.git(t, "diff", "--name-only", "main", "amelia/"+id); got != id+".txt" {
			t.Errorf("amelia/%s changes %q, want %s.txt only", id, got, id)
		}
		if got := h.git(t, "show", "amelia/"+id+":"+id+".txt"); got != id {
			t.Errorf("amelia/%s holds %q in %s.txt", id, got, id)
		}
	}

	// Nothing of a run is left in the sandbox: no workflow, no uid
	// record, no process of a run's uid.
	left := h.amelia(t, "sandbox", "exec", "--", "sh", "-c",
		`ls -A .amelia/users 2>/dev/null; ps -eo uid=,args= | awk '$1 >= 60100 && $1 <= 64999'`)
	if left.code != 0 || strings.TrimSpace(left.stdout) != "" {
		t.Errorf("left in the sandbox after the runs (uid records, then processes of run uids): exit %d\n%s%s", left.code, left.stdout, left.stderr)
	}
	if ls := h.amelia(t, "sandbox", "ls"); ls.code != 0 || strings.Contains(ls.stdout, "w0") || strings.Contains(ls.stdout, "w1") {
		t.Errorf("sandbox ls after the runs: exit %d\n%s%s", ls.code, ls.stdout, ls.stderr)
	}
}
