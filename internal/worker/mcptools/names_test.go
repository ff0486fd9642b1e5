package mcptools

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amelia-sandbox/amelia/internal/worker/tools"
)

// Tool names become names model APIs accept, deterministically: those
// that fit unchanged, others with their odd characters replaced, and
// those too long or taken cut and told apart by a hash of the real name.
func TestDefinitionNames(t *testing.T) {
	long := strings.Repeat("x", 70)
	tests := []struct {
		name, server, tool string
		taken              []string
		want               string // "" for left out
	}{
		{"fits", "everything", "greet", nil, "mcp__everything__greet"},
		{"odd characters", "everything", "greet (structured)", nil, "mcp__everything__greet__structured_"},
		{"non-ASCII", "s", "grüße", nil, "mcp__s__gr__e"},
		{"too long", "s", long, nil, ("mcp__s__" + long)[:55] + "_" + hash8("s", long)},
		{"taken", "s", "a.b", []string{"mcp__s__a_b"}, "mcp__s__a_b_" + hash8("s", "a.b")},
		{"taken even hashed", "s", "a.b", []string{"mcp__s__a_b", "mcp__s__a_b_" + hash8("s", "a.b")}, ""},
		{"no name", "s", "", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			taken := map[string]bool{}
			for _, n := range tt.taken {
				taken[n] = true
			}
			d, ok := definition(tt.server, &mcp.Tool{Name: tt.tool, InputSchema: map[string]any{"type": "object"}}, taken)
			if got := map[bool]string{true: d.Name}[ok]; got != tt.want {
				t.Fatalf("named %q (%v), want %q", got, ok, tt.want)
			}
			if ok && len(d.Name) > maxName {
				t.Errorf("%q is %d characters, over %d", d.Name, len(d.Name), maxName)
			}
			if ok && d.Name != "mcp__"+tt.server+"__"+tt.tool && !strings.Contains(d.Description, `"`+tt.tool+`"`) {
				t.Errorf("the renamed tool's description %q does not name %q", d.Description, tt.tool)
			}
		})
	}
}

// hash8 is the hash that tells a renamed tool apart.
func hash8(server, tool string) string {
	sum := sha256.Sum256([]byte(server + "\x00" + tool))
	return hex.EncodeToString(sum[:4])
}

// A tool's input schema is its parameters, as an object schema with
// properties.
func TestParameters(t *testing.T) {
	tests := []struct {
		name   string
		schema any
		want   string
	}{
		{"none", nil, `{"type":"object","properties":{}}`},
		{"no properties", map[string]any{"type": "object"}, `{"properties":{},"type":"object"}`},
		{"as it is", map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "string"}}, "required": []string{"n"}},
			`{"properties":{"n":{"type":"string"}},"required":["n"],"type":"object"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parameters(tt.schema)
			if string(got) != tt.want || !json.Valid(got) {
				t.Errorf("parameters = %s, want %s", got, tt.want)
			}
		})
	}
}

// What the model sees of a result: the text parts, one a line; the
// structured content when there is no text; a note for what it cannot
// see; at most tools.MaxOutputChars characters.
func TestOutput(t *testing.T) {
	big := strings.Repeat("é", tools.MaxOutputChars+5)
	tests := []struct {
		name string
		res  *mcp.CallToolResult
		want string
	}{
		{"text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}}, "a\nb"},
		{"structured only", &mcp.CallToolResult{StructuredContent: map[string]any{"k": 1}}, `{"k":1}`},
		{"structured and text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "t"}}, StructuredContent: map[string]any{"k": 1}}, "t"},
		{"an image", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: []byte("png")}}}, "[image (image/png, 3 bytes), not shown]"},
		{"an embedded text resource", &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a", Text: "inside"}}}}, "inside"},
		{"a link", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ResourceLink{URI: "file:///a", Name: "a"}}}, "[resource link file:///a: a]"},
		{"too long", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: big}}},
			big[:2*tools.MaxOutputChars] + "\n[output truncated: showed 10000 of 10005 characters]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := finish(tools.Result{Output: output(tt.res)}).Output; got != tt.want {
				t.Errorf("output = %.200q, want %.200q", got, tt.want)
			}
		})
	}
}
