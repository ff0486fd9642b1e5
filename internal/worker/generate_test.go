package worker_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

func generate(t *testing.T, srv *llmtest.Server, extra ...string) result {
	t.Helper()
	dir := t.TempDir()
	args := append([]string{"generate", "--prompt-file", writeFile(t, dir, "p.txt", "Review this."), "--model", "test-model"}, extra...)
	return runWorker(t, proxyEnv(srv), nil, args...)
}

func TestGenerateWithSchema(t *testing.T) {
	valid := `{ "verdict": "approve",
	  "comments": ["looks good"] }`
	cases := []struct {
		name     string
		answers  []string
		wantErr  bool
		want     string // result content, or part of the error
		requests int
	}{
		{"valid at once", []string{valid}, false, `{"verdict":"approve","comments":["looks good"]}`, 1},
		{"valid on the retry", []string{`{"verdict": "maybe", "comments": []}`, valid}, false, `{"verdict":"approve","comments":["looks good"]}`, 2},
		{"invalid twice", []string{`{"verdict": "maybe", "comments": []}`, `{"verdict": "approve"}`}, true, "no valid answer after 2 attempts", 2},
		{"not JSON", []string{"Sure! Here it is.", "Still prose."}, true, "not a JSON document", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var turns []llmtest.Turn
			for _, a := range c.answers {
				turns = append(turns, llmtest.Turn{Text: a, Usage: &llmtest.Usage{PromptTokens: 40, CompletionTokens: 12}})
			}
			srv := llmtest.New(t, turns...)
			schema := writeFile(t, t.TempDir(), "review-output.json", llmtest.ReviewSchema)
			r := generate(t, srv, "--schema", schema)
			res, u := r.ending(t, c.wantErr)
			if len(r.msgs) != 2 {
				t.Errorf("%d lines, want result and usage only", len(r.msgs))
			}
			if c.wantErr {
				if r.code != 1 {
					t.Errorf("exit %d, want 1", r.code)
				}
				contains(t, "error", str(res.Content), c.want)
			} else if str(res.Content) != c.want {
				t.Errorf("result = %s, want %s", str(res.Content), c.want)
			}
			if got, want := num(u.Usage.InputTokens), map[int]string{1: "40", 2: "80"}[c.requests]; got != want {
				t.Errorf("input_tokens = %s, want %s", got, want)
			}

			reqs := srv.Requests()
			if len(reqs) != c.requests {
				t.Fatalf("%d requests, want %d", len(reqs), c.requests)
			}
			var rf struct {
				Type       string `json:"type"`
				JSONSchema struct {
					Name   string          `json:"name"`
					Strict bool            `json:"strict"`
					Schema json.RawMessage `json:"schema"`
				} `json:"json_schema"`
			}
			if err := json.Unmarshal(reqs[0].Chat.ResponseFormat, &rf); err != nil {
				t.Fatalf("response_format %s: %v", reqs[0].Chat.ResponseFormat, err)
			}
			if rf.Type != "json_schema" || !rf.JSONSchema.Strict || rf.JSONSchema.Name != "review-output" ||
				!strings.Contains(string(rf.JSONSchema.Schema), `"enum":["approve","reject"]`) {
				t.Errorf("response_format = %s", reqs[0].Chat.ResponseFormat)
			}
			if c.requests == 2 {
				// The retry tells the model what was wrong.
				msgs := reqs[1].Chat.Messages
				last := msgs[len(msgs)-1]
				if last.Role != "user" || !strings.Contains(last.Text(), "not valid") {
					t.Errorf("retry ends with %s %q, want the validation error", last.Role, last.Text())
				}
			}
		})
	}
}

func TestGenerateFreeText(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Text: "A haiku, as asked."})
	system := writeFile(t, t.TempDir(), "sys.txt", "You write haiku.")
	r := generate(t, srv, "--system-prompt-file", system)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	res, u := r.ending(t, false)
	if str(res.Content) != "A haiku, as asked." || num(u.Usage.NumTurns) != "1" {
		t.Errorf("result %q, num_turns %s", str(res.Content), num(u.Usage.NumTurns))
	}
	if u.Usage.InputTokens != nil {
		t.Errorf("input_tokens = %d, want null: the upstream reported no usage", *u.Usage.InputTokens)
	}
	req := srv.Requests()[0].Chat
	if len(req.ResponseFormat) != 0 || len(req.Messages) != 2 || req.Messages[0].Text() != "You write haiku." {
		t.Errorf("request: response_format %s, messages %+v", req.ResponseFormat, req.Messages)
	}
}

func TestGenerateBadSchemaFile(t *testing.T) {
	srv := llmtest.New(t)
	for name, content := range map[string]string{
		"not JSON":   "{",
		"not schema": `{"type": 12}`,
	} {
		t.Run(name, func(t *testing.T) {
			r := generate(t, srv, "--schema", writeFile(t, t.TempDir(), "s.json", content))
			res, _ := r.ending(t, true)
			contains(t, "error", str(res.Content), "schema")
		})
	}
	if len(srv.Requests()) != 0 {
		t.Error("the LLM was called with a broken schema")
	}
}
