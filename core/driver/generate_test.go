package driver_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// Generate with the real worker: a schema'd answer comes back compact, an
// answer that never matches is an error, free text comes back as a JSON
// string; the files are gone afterwards in every case.
func TestGenerateRealWorker(t *testing.T) {
	valid := `{ "verdict": "approve", "comments": ["looks <good>"] }`
	invalid := `{"verdict": "maybe", "comments": []}`
	u := &llmtest.Usage{PromptTokens: 40, CompletionTokens: 12}
	cases := []struct {
		name    string
		answers []string
		schema  string
		system  string
		want    string // the answer, or part of the error
		is      error
	}{
		{name: "valid", answers: []string{valid}, schema: llmtest.ReviewSchema, want: `{"verdict":"approve","comments":["looks <good>"]}`},
		{name: "valid on the retry", answers: []string{invalid, valid}, schema: llmtest.ReviewSchema, want: `{"verdict":"approve","comments":["looks <good>"]}`},
		{name: "mismatch", answers: []string{invalid, invalid}, schema: llmtest.ReviewSchema, want: "does not match the schema", is: driver.ErrWorkerFailed},
		{name: "free text", answers: []string{"A haiku."}, system: "You write haiku.", want: `"A haiku."`},
	}
	sb := newRealSandbox(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var turns []llmtest.Turn
			for _, a := range c.answers {
				turns = append(turns, llmtest.Turn{Text: a, Usage: u})
			}
			srv := llmtest.New(t, turns...)
			d := sb.driverFor(srv)
			wf := workflowID(t)
			var schema json.RawMessage
			if c.schema != "" {
				schema = json.RawMessage(c.schema)
			}
			got, usage, err := d.Generate(t.Context(), driver.GenerateRequest{Workflow: wf, Prompt: "Review this.", Model: "test-model", System: c.system}, schema)
			if c.is != nil {
				if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %v, want %v containing %q", err, c.is, c.want)
				}
			} else if err != nil || string(got) != c.want {
				t.Errorf("Generate = %s, %v; want %s", got, err, c.want)
			}
			if want := int64(40 * len(c.answers)); num(usage.InputTokens) != want {
				t.Errorf("input tokens %d, want %d", num(usage.InputTokens), want)
			}
			reqs := srv.Requests()
			if len(reqs) != len(c.answers) {
				t.Fatalf("%d requests, want %d; server errors %v", len(reqs), len(c.answers), srv.Errors())
			}
			msgs := reqs[0].Chat.Messages
			if last := msgs[len(msgs)-1]; last.Text() != "Review this." {
				t.Errorf("the prompt did not reach the model: %q", last.Text())
			}
			if c.system != "" && msgs[0].Text() != c.system {
				t.Errorf("system prompt %q", msgs[0].Text())
			}
			if (c.schema != "") != strings.Contains(string(reqs[0].Chat.ResponseFormat), `"enum":["approve","reject"]`) {
				t.Errorf("response_format = %s", reqs[0].Chat.ResponseFormat)
			}
			noFilesLeft(t, sb.Sandbox, wf)
		})
	}
}

// The host checks the answer against the schema itself: a worker (or a
// sandbox) that claims success with a wrong answer gets an error.
func TestGenerateHostChecksSchema(t *testing.T) {
	cases := map[string]string{
		"wrong enum": `{"verdict":"maybe","comments":[]}`,
		"not JSON":   `Sure! Here it is.`,
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			content, _ := json.Marshal(answer)
			line := `{"type":"result","content":` + string(content) + `,"is_error":false}`
			// The fake checks that it got the schema file, as the worker would.
			d, sb, _ := fakeDriver(t, `
[ "$1" = generate ] && [ "$6" = --schema ] && grep -q approve "$7" || { echo "argv: $*" >&2; exit 2; }
echo '`+line+`'
echo '`+usageLine+`'`)
			wf := workflowID(t)
			got, usage, err := d.Generate(t.Context(), driver.GenerateRequest{Workflow: wf, Prompt: "p", Model: "m"}, json.RawMessage(llmtest.ReviewSchema))
			if !errors.Is(err, driver.ErrSchemaMismatch) {
				t.Errorf("Generate = %s, %v; want ErrSchemaMismatch", got, err)
			}
			if num(usage.InputTokens) != 7 {
				t.Errorf("usage %+v", usage)
			}
			noFilesLeft(t, sb, wf)
		})
	}
}

// Generate follows the same contract as ExecuteAgentic for a worker that
// dies or writes garbage.
func TestGenerateContract(t *testing.T) {
	for name, script := range map[string]string{
		"no result": `echo "boom" >&2; exit 1`,
		"garbage":   `echo 'garbage'`,
	} {
		t.Run(name, func(t *testing.T) {
			d, sb, _ := fakeDriver(t, script)
			wf := workflowID(t)
			_, _, err := d.Generate(t.Context(), driver.GenerateRequest{Workflow: wf, Prompt: "p", Model: "m"}, nil)
			switch name {
			case "no result":
				if !errors.Is(err, driver.ErrNoResult) || !strings.Contains(err.Error(), "boom") {
					t.Errorf("error %v", err)
				}
			case "garbage":
				if !strings.Contains(err.Error(), "line 1: ") || !strings.Contains(err.Error(), "garbage") {
					t.Errorf("error %v", err)
				}
			}
			noFilesLeft(t, sb, wf)
		})
	}
}
