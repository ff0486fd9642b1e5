package worker_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/pythontest"
)

// reviewModule is a module holding pydantic models, as the Python Amelia's
// images hold amelia.agents.schemas.
const reviewModule = `from typing import Literal

from pydantic import BaseModel


class Comment(BaseModel):
    text: str


class Review(BaseModel):
    verdict: Literal["approve", "reject"]
    comments: list[Comment]


class NotAModel:
    pass
`

// pythonWithPydantic returns a directory holding reviewModule, for
// PYTHONPATH, or skips the test, saying so, when python3 with pydantic v2
// is not on PATH (fails it with AMELIA_REQUIRE_UPSTREAM=1).
func pythonWithPydantic(t *testing.T) string {
	t.Helper()
	pythontest.Python(t, "generate --schema module:ClassName")
	dir := t.TempDir()
	writeFile(t, dir, "review_models.py", reviewModule)
	return dir
}

const reviewAnswer = `{"verdict": "reject", "comments": [{"text": "no tests"}]}`

// generate --schema module:ClassName asks the sandbox's python3 for the
// model's JSON Schema, sends it as the response format and validates the
// answer with it; in serve, schema_path takes the same form.
func TestGenerateSchemaFromPythonModel(t *testing.T) {
	dir := pythonWithPydantic(t)
	check := func(t *testing.T, srv *llmtest.Server, content string) {
		t.Helper()
		if content != `{"verdict":"reject","comments":[{"text":"no tests"}]}` {
			t.Errorf("result = %s", content)
		}
		var rf struct {
			JSONSchema struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
			} `json:"json_schema"`
		}
		reqs := srv.Requests()
		if err := json.Unmarshal(reqs[len(reqs)-1].Chat.ResponseFormat, &rf); err != nil {
			t.Fatal(err)
		}
		s := string(rf.JSONSchema.Schema)
		if rf.JSONSchema.Name != "Review" || !strings.Contains(s, `"$defs":{"Comment"`) || !strings.Contains(s, `"enum":["approve","reject"]`) {
			t.Errorf("response_format %s: %s", rf.JSONSchema.Name, s)
		}
	}
	t.Run("one-shot", func(t *testing.T) {
		srv := llmtest.New(t,
			llmtest.Turn{Text: `{"verdict": "maybe", "comments": []}`}, // invalid: asked again
			llmtest.Turn{Text: reviewAnswer})
		prompt := writeFile(t, t.TempDir(), "p.txt", "Review.")
		env := append(proxyEnv(srv), "PYTHONPATH="+dir)
		r := runWorker(t, env, nil, "generate", "--prompt-file", prompt, "--model", "m", "--schema", "review_models:Review")
		if r.code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
		}
		res, _ := r.ending(t, false)
		check(t, srv, str(res.Content))
		if len(srv.Requests()) != 2 {
			t.Errorf("%d requests: the invalid answer was not asked again", len(srv.Requests()))
		}
	})
	t.Run("serve", func(t *testing.T) {
		srv := llmtest.New(t, llmtest.Turn{Text: reviewAnswer})
		env := append(proxyEnv(srv), "PYTHONPATH="+dir)
		r := runWorker(t, env, bytes.NewReader(request(t, protocol.Request{
			Mode: protocol.ModeGenerate, Prompt: "Review.", Model: "m", SchemaPath: new("review_models:Review"),
		})), "serve")
		if r.code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
		}
		cmds := commands(t, r.stdout)
		if len(cmds) != 1 {
			t.Fatalf("%d commands", len(cmds))
		}
		check(t, srv, cmds[0].ends(t, false))
	})
}

// A schema that cannot be had fails the call before the model is asked,
// with one line that says why: a result with is_error and exit 1, or in
// serve an error frame, the worker serving on.
func TestGenerateSchemaErrors(t *testing.T) {
	dir := pythonWithPydantic(t)
	for _, tt := range []struct {
		name, schema string
		env          []string
		want         string
	}{
		{"module not importable", "no_such_module.sub:Review", nil,
			"schema no_such_module.sub:Review: module no_such_module.sub is not importable by the sandbox's python3: ModuleNotFoundError: No module named 'no_such_module'"},
		{"no such class", "review_models:Nope", nil, "schema review_models:Nope: module review_models has no Nope"},
		{"not a pydantic model", "review_models:NotAModel", nil,
			"schema review_models:NotAModel: review_models.NotAModel is not a pydantic v2 model: it has no model_json_schema()"},
		{"not identifiers", "review-models:Review", nil, `schema "review-models:Review": no such file, and not module:ClassName either`},
		{"a shell word", "os:system;touch", nil, `schema "os:system;touch": no such file, and not module:ClassName either`},
		{"no python3", "review_models:Review", []string{"PATH=" + t.TempDir()},
			"schema review_models:Review: python3 is not on the sandbox's PATH, and it is needed to import module review_models (or give a JSON Schema file)"},
		{"no file", "/nonexistent/schema.json", nil, "read schema: open /nonexistent/schema.json: no such file or directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Turn{Text: "second"})
			env := append(append(proxyEnv(srv), "PYTHONPATH="+dir), tt.env...)
			prompt := writeFile(t, t.TempDir(), "p.txt", "Review.")
			r := runWorker(t, env, nil, "generate", "--prompt-file", prompt, "--model", "m", "--schema", tt.schema)
			res, _ := r.ending(t, true)
			if r.code != 1 || !strings.HasPrefix(str(res.Content), tt.want) {
				t.Errorf("exit %d, result %q; want 1 and %q", r.code, str(res.Content), tt.want)
			}
			if strings.Contains(str(res.Content), "\n") {
				t.Errorf("the error is not one line: %q", str(res.Content))
			}

			// serve: the same error in its frame, and the next request is served.
			stdin := append(request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "p", Model: "m", SchemaPath: &tt.schema}),
				request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "p", Model: "m"})...)
			r = runWorker(t, env, bytes.NewReader(stdin), "serve")
			if r.code != 0 {
				t.Fatalf("serve: exit %d; stderr:\n%s", r.code, r.stderr)
			}
			cmds := commands(t, r.stdout)
			if len(cmds) != 2 {
				t.Fatalf("%d commands", len(cmds))
			}
			cmds[0].ends(t, true)
			if !strings.HasPrefix(*cmds[0].err, tt.want) {
				t.Errorf("error frame %q, want %q", *cmds[0].err, tt.want)
			}
			if got := cmds[1].ends(t, false); got != "second" {
				t.Errorf("the next request: %q", got)
			}
			if len(srv.Requests()) != 1 {
				t.Errorf("the model was asked %d times, want once (the second request)", len(srv.Requests()))
			}
		})
	}
}
