package worker_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/pythontest"
)

// checkScript validates protocol lines with the Python Amelia's models.
const checkScript = "../../core/protocol/testdata/check_lines.py"

// Every line the worker writes is read by the Python Amelia's own pydantic
// models, and written back by them byte for byte. `make test` says so when
// this is skipped for want of python3 with pydantic v2 (a failure with
// AMELIA_REQUIRE_UPSTREAM=1).
func TestStdoutParsesWithPythonModels(t *testing.T) {
	python := pythontest.Python(t, "the worker's stdout against the Python models")

	cwd := t.TempDir()
	writeFile(t, cwd, "notes.txt", "ünïcödé ✓\nline\u2028separator\ttab \"quotes\" \\ back\x01ctl\n")
	cost := 0.0000123
	srv := llmtest.New(t,
		llmtest.Turn{Text: "Résumé: <b>&</b> \u2029 😀", ToolCalls: []llmtest.ToolCall{
			call("read_file", `{"file_path": "notes.txt", "limit": 1e1}`),
			call("grep", `{"pattern": "(unclosed"}`),
			call("write_todos", `{"todos": [{"content": "ünï", "status": "in_progress"}], "nested": {"a": [1, 2.5, -0.0, null, true]}}`),
			call("ls", `not json`),
		}, Usage: &llmtest.Usage{PromptTokens: 1 << 40, CompletionTokens: 3, CachedTokens: 2, CacheWriteTokens: 1, Cost: &cost}},
		llmtest.Turn{Text: "Fin. ✓"},
	)
	var all bytes.Buffer
	for _, r := range []result{
		agentic(t, srv, cwd, "Look."),
		agentic(t, llmtest.New(t, llmtest.Turn{Status: 400, Error: "upstream \"refused\"\n"}), cwd, "Look."),
		generate(t, llmtest.New(t, llmtest.Turn{Text: `{"verdict": "reject", "comments": ["ü", "\u2028"]}`}),
			"--schema", writeFile(t, t.TempDir(), "s.json", llmtest.ReviewSchema)),
	} {
		r.decode(t)
		all.Write(r.stdout)
	}
	lines := filepath.Join(t.TempDir(), "worker-stdout.jsonl")
	if err := os.WriteFile(lines, all.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(python, checkScript, lines).CombinedOutput()
	if err != nil {
		t.Fatalf("the Python models reject the worker's output: %v\n%s", err, out)
	}
	t.Logf("%s", bytes.TrimSpace(out))
}
