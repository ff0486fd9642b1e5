package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/worker/tools"
)

// docs/running.md's scripted models: its example script is one amelia
// plays, and its table of tools names every tool the worker has, with each
// tool's arguments, and nothing else.
func TestDocsDescribeTheScriptedModel(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "running.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, after, ok := strings.Cut(doc, "`--model scripted:FILE` plays a script instead")
	if !ok {
		t.Fatal("docs/running.md does not describe --model scripted:FILE")
	}
	after, _, _ = strings.Cut(after, "\n## ")
	_, example, ok := strings.Cut(after, "```json\n")
	example, _, _ = strings.Cut(example, "```")
	file := filepath.Join(t.TempDir(), "script.json")
	if err := os.WriteFile(file, []byte(example), 0o600); !ok || err != nil {
		t.Fatalf("the example script: %v", err)
	}
	turns, err := readScript(file)
	if err != nil {
		t.Fatalf("the example script does not play: %v", err)
	}
	if last := turns[len(turns)-1]; len(last.ToolCalls) != 0 {
		t.Errorf("the example's last turn calls a tool")
	}

	set, err := tools.New(t.TempDir(), tools.Options{})
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| (.*) \\|$")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(after, -1) {
		documented[m[1]] = m[2]
	}
	var names []string
	for _, d := range set.Definitions() {
		names = append(names, d.Name)
		var params struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(d.Parameters, &params); err != nil {
			t.Fatal(err)
		}
		doc, ok := documented[d.Name]
		if !ok {
			t.Errorf("tool %s is not in the table of tools", d.Name)
			continue
		}
		for p := range params.Properties {
			if !strings.Contains(doc, "`"+p+"`") {
				t.Errorf("the table's row of %s does not name its argument %s: %s", d.Name, p, doc)
			}
		}
	}
	for name := range documented {
		if !slices.Contains(names, name) {
			t.Errorf("the table of tools has %s, which is no tool of the worker", name)
		}
	}
}
