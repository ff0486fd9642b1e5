package cliagent

// The Gemini CLI stand-in through a real proxy: the adapter's command,
// pointed at the proxy's /gemini route with the run's token, reaches a
// scripted Gemini API upstream that sees only the host's key.

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/proxy"
	"github.com/amelia-sandbox/amelia/proxy/proxytest"
)

// hostGeminiKey is the host's Gemini API key: only the upstream may see it.
const hostGeminiKey = "AIza-host-gemini-key-0c47d2"

// geminiProxy is a proxy on loopback serving one run whose Gemini
// upstream is up, or which has none unless withGemini.
func geminiProxy(t *testing.T, up *llmtest.Server, withGemini bool) (string, *proxy.Run) {
	t.Helper()
	cfg := proxy.RunConfig{ID: "run-gemini", OpenAI: proxy.Upstream{BaseURL: up.URL() + "/v1"}}
	if withGemini {
		cfg.Gemini = &proxy.Upstream{BaseURL: up.URL(), Key: hostGeminiKey}
	}
	return proxytest.Start(t, cfg)
}

func TestGeminiThroughTheProxy(t *testing.T) {
	bin := buildStandin(t, "gemini")
	usage := &llmtest.Usage{PromptTokens: turnIn, CompletionTokens: turnOut, CachedTokens: turnCached}
	up := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyGemini},
		llmtest.Turn{Text: "I'll write hello.txt.", ToolCalls: []llmtest.ToolCall{{Name: "write_file", Arguments: `{"file_path":"hello.txt","content":"hello from gemini\n"}`}}, Usage: usage},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{{Name: "run_shell_command", Arguments: `{"command":"cat hello.txt"}`}}, Usage: usage},
		llmtest.Turn{Text: "Wrote hello.txt.", Usage: usage},
	)
	base, run := geminiProxy(t, up, true)
	cwd := checkout(t)
	res := runAgent(t, gemini{}, Run{
		Binary: bin, Prompt: "Write hello.txt.", Cwd: cwd, Model: "gemini-test", MaxTurns: 10, StateDir: t.TempDir(), API: Gemini,
		LLM: Endpoints{OpenAIBase: base + "/v1", AnthropicBase: base + "/anthropic", Key: run.Token()},
	})
	if res.err != nil || res.exit != 0 {
		t.Fatalf("run: events %v, exit %d\nstderr: %s", res.err, res.exit, res.stderr)
	}
	want := []string{
		"thinking: I'll write hello.txt.",
		`tool_call write_file {"file_path":"hello.txt","content":"hello from gemini\n"}`,
		"tool_result: ",
		`tool_call run_shell_command {"command":"cat hello.txt"}`,
		"tool_result: hello from gemini\n",
	}
	if got := summaries(res.msgs, cwd); !slices.Equal(got, want) {
		t.Errorf("messages:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Every chunk of the stream carries the counts so far; the agent
	// counts each request's once.
	o := res.outcome
	if o.Result != "Wrote hello.txt." || o.IsError || o.Usage == nil || *o.Usage.InputTokens != 3*turnIn ||
		*o.Usage.OutputTokens != 3*turnOut || *o.Usage.CacheReadTokens != 3*turnCached {
		t.Errorf("outcome %+v, usage %+v", o, o.Usage)
	}
	if data, err := os.ReadFile(filepath.Join(cwd, "hello.txt")); err != nil || string(data) != "hello from gemini\n" {
		t.Errorf("hello.txt = %q, %v", data, err)
	}

	reqs := up.Requests()
	if len(reqs) != 3 {
		t.Fatalf("the upstream got %d requests, want 3", len(reqs))
	}
	for i, r := range reqs {
		if r.Path != "/v1beta/models/gemini-test:streamGenerateContent" || r.Header.Get("X-Goog-Api-Key") != hostGeminiKey {
			t.Errorf("request %d: %s with x-goog-api-key %q, want the host's key", i, r.Path, r.Header.Get("X-Goog-Api-Key"))
		}
		for k, vs := range r.Header {
			if slices.ContainsFunc(vs, func(v string) bool { return strings.Contains(v, run.Token()) }) {
				t.Errorf("request %d: the run token reached the upstream in %s", i, k)
			}
		}
	}
	if !strings.Contains(string(reqs[2].Body), "hello from gemini") {
		t.Errorf("the shell's output did not reach the model: %s", reqs[2].Body)
	}
	if errs := up.Errors(); len(errs) > 0 {
		t.Errorf("the upstream met: %v", errs)
	}

	recs := proxytest.Records(t, run)
	if len(recs) != 3 {
		t.Fatalf("audit has %d records, want 3: %+v", len(recs), recs)
	}
	for i, rec := range recs {
		if rec.Route != "gemini" || rec.Status != 200 || rec.Path != "/gemini/v1beta/models/gemini-test:streamGenerateContent" ||
			rec.InputTokens == nil || *rec.InputTokens != turnIn || rec.OutputTokens == nil || *rec.OutputTokens != turnOut ||
			rec.CacheReadTokens == nil || *rec.CacheReadTokens != turnCached {
			t.Errorf("record %d: %+v", i, rec)
		}
	}
}

// A token the proxy does not know, and a profile without llm.gemini, end
// the agent's run with the proxy's answer, in the exit code Gemini CLI
// gives an API error (its HTTP status); nothing reaches the upstream.
func TestGeminiThroughTheProxyRefused(t *testing.T) {
	bin := buildStandin(t, "gemini")
	up := llmtest.NewWithOptions(t, llmtest.Options{API: llmtest.OnlyGemini}, llmtest.Turn{Text: "never"})
	for _, tc := range []struct {
		name       string
		withGemini bool
		token      func(*proxy.Run) string
		exit       int
		want       string
	}{
		{"a wrong token", true, func(*proxy.Run) string { return "amr_" + strings.Repeat("x", 43) }, 401 & 0xff, "missing or invalid run token"},
		{"no llm.gemini", false, (*proxy.Run).Token, 404 & 0xff, "no llm.gemini block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, run := geminiProxy(t, up, tc.withGemini)
			cwd := checkout(t)
			res := runAgent(t, gemini{}, Run{
				Binary: bin, Prompt: "hi", Cwd: cwd, Model: "gemini-test", StateDir: t.TempDir(), API: Gemini,
				LLM: Endpoints{OpenAIBase: base + "/v1", Key: tc.token(run)},
			})
			if res.err != nil || res.exit != tc.exit {
				t.Fatalf("events %v, exit %d, want %d\nstderr: %s", res.err, res.exit, tc.exit, res.stderr)
			}
			if !res.outcome.IsError || !strings.Contains(res.outcome.Result, tc.want) {
				t.Errorf("outcome %+v, want an error saying %q", res.outcome, tc.want)
			}
		})
	}
	if reqs := up.Requests(); len(reqs) != 0 {
		t.Errorf("the upstream got %d requests", len(reqs))
	}
}
