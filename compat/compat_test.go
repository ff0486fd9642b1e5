package compat_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/pythontest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/proxy"
)

// workerBin is the amelia-worker the harness drives, built by TestMain.
var workerBin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerBin, err = testbin.BuildWorker(dir)
		return err
	}))
}

// Secrets of the run, which the harness checks never reach the worker's
// side.
const (
	upstreamKey = "sk-compat-upstream-key-7f1c0e"
	gitToken    = "ghs_compat_git_token_29d4"
	gitHost     = "forge.test"
)

// model is the scripted model the harness's worker talks to. It answers
// by the request's last message:
//
//	write-file  a write_file tool call, then (after the tool's result) "Done."
//	fail        HTTP 400
//	review      a review, as JSON
//	hold        waits for the control server's /release, then "released"
//	headers     the identity headers it got, as JSON (the run's upstream
//	            key named as such)
//	anything    "echo: " and the message
type model struct {
	held, release chan struct{}
	heldOnce      sync.Once
	releaseOnce   sync.Once
}

func (m *model) turn(_ int, req *llmtest.Request) llmtest.Turn {
	msgs := req.Chat.Messages
	last := msgs[len(msgs)-1]
	if last.Role == "tool" {
		return llmtest.Turn{Text: "Done."}
	}
	switch text := last.Text(); text {
	case "write-file":
		return llmtest.Turn{Text: "Writing.", ToolCalls: []llmtest.ToolCall{{Name: "write_file", Arguments: `{"file_path": "out.txt", "content": "written by the agent\n"}`}}}
	case "fail":
		return llmtest.Turn{Status: 400, Error: "context too long"}
	case "review":
		return llmtest.Turn{Text: `{"verdict": "approve", "comments": [{"text": "fine"}]}`, Usage: &llmtest.Usage{PromptTokens: 12, CompletionTokens: 4}}
	case "hold":
		m.heldOnce.Do(func() { close(m.held) })
		select {
		case <-m.release:
			return llmtest.Turn{Text: "released"}
		case <-time.After(2 * time.Minute):
			return llmtest.Turn{Status: 500, Error: "nobody released the held request"}
		}
	case "headers":
		seen := map[string]any{}
		for _, h := range []string{"Authorization", "X-Amelia-Proxy-Token", "X-Amelia-Profile"} {
			if v := req.Header.Values(h); v != nil {
				seen[h] = v[0]
			}
		}
		// The upstream key is named, not echoed: the answer streams in
		// small deltas, and a key cut across them is not redacted by
		// the proxy.
		if seen["Authorization"] == "Bearer "+upstreamKey {
			seen["Authorization"] = "Bearer <the upstream key>"
		}
		var amelia []string
		for k := range req.Header {
			if strings.HasPrefix(k, "X-Amelia-") {
				amelia = append(amelia, k)
			}
		}
		seen["x-amelia-headers"] = amelia
		b, _ := json.Marshal(seen)
		return llmtest.Turn{Text: string(b)}
	default:
		return llmtest.Turn{Text: "echo: " + text}
	}
}

// The harness, with python3 and pydantic v2, against the real worker, the
// scripted model and our proxy.
func TestPythonHarness(t *testing.T) {
	python := pythontest.Python(t, "amelia-worker against the Python Amelia's wire rules (compat/harness.py)")

	m := &model{held: make(chan struct{}), release: make(chan struct{})}
	llm := llmtest.NewWithOptions(t, llmtest.Options{Script: m.turn})
	t.Cleanup(func() { m.releaseOnce.Do(func() { close(m.release) }) }) // before llm closes

	p := proxy.New(proxy.Options{})
	addr, err := p.ListenAndServe("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	run, err := p.Start(proxy.RunConfig{
		ID: "compat", Profile: "compat", AuditDir: t.TempDir(),
		OpenAI: proxy.Upstream{BaseURL: llm.URL() + "/v1", Key: upstreamKey},
		Repos:  []string{"https://" + gitHost + "/org/repo.git"},
		Git:    proxy.GitAuth{Token: gitToken},
	})
	if err != nil {
		t.Fatal(err)
	}

	// The harness's handle on the held request: /held answers once the
	// model holds it, /release lets it go.
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/held":
			select {
			case <-m.held:
			case <-r.Context().Done():
				return
			}
		case "/release":
			m.releaseOnce.Do(func() { close(m.release) })
		default:
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(control.Close)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "harness.py")
	cmd.Env = append(os.Environ(),
		"AMELIA_COMPAT_WORKER="+workerBin,
		"AMELIA_COMPAT_LLM_URL="+llm.URL(),
		"AMELIA_COMPAT_PROXY_URL=http://"+addr,
		"AMELIA_COMPAT_PROXY_TOKEN="+run.Token(),
		"AMELIA_COMPAT_UPSTREAM_KEY="+upstreamKey,
		"AMELIA_COMPAT_GIT_HOST="+gitHost,
		"AMELIA_COMPAT_GIT_TOKEN="+gitToken,
		"AMELIA_COMPAT_CONTROL_URL="+control.URL,
		// The harness's files (the workers' homes and work directories
		// among them) go where the test removes them, however it ends.
		"TMPDIR="+t.TempDir(),
	)
	out, err := cmd.CombinedOutput()
	t.Logf("harness.py:\n%s", out)
	if err != nil {
		t.Fatalf("harness.py: %v", err)
	}
	// The last line is "N checks, 0 failed", with checks that ran.
	var n int
	if _, err := fmt.Sscanf(lastLine(string(out)), "%d checks, 0 failed", &n); err != nil || n == 0 {
		t.Fatalf("harness.py did not report checks that ran and passed (%v, %d checks)", err, n)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
