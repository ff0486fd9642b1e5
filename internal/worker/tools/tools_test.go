package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// newSet returns tools on a fresh temporary directory holding files
// (path → content; a path ending in "/" is a directory).
func newSet(t *testing.T, opts Options, files map[string]string) (*Set, string) {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, files)
	s, err := New(dir, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// call calls tool name with args encoded as JSON (a string is sent as is).
func call(t *testing.T, s *Set, name string, args any) Result {
	t.Helper()
	var raw []byte
	if str, ok := args.(string); ok {
		raw = []byte(str)
	} else {
		var err error
		if raw, err = json.Marshal(args); err != nil {
			t.Fatal(err)
		}
	}
	res := s.Call(context.Background(), name, raw)
	if !utf8.ValidString(res.Output) {
		t.Errorf("%s output is not valid UTF-8: %q", name, res.Output)
	}
	return res
}

// toolCase is a call and what its result must be: the whole output (want)
// or parts of it (contains), and whether it is an error.
type toolCase struct {
	name     string
	tool     string
	args     any
	want     string
	contains []string
	wantErr  bool
}

func (tc toolCase) check(t *testing.T, res Result) {
	t.Helper()
	if res.IsError != tc.wantErr {
		t.Errorf("IsError = %v, want %v; output:\n%s", res.IsError, tc.wantErr, res.Output)
	}
	if tc.want != "" && res.Output != tc.want {
		t.Errorf("output:\n%s\nwant:\n%s", res.Output, tc.want)
	}
	for _, c := range tc.contains {
		if !strings.Contains(res.Output, c) {
			t.Errorf("output does not contain %q:\n%s", c, res.Output)
		}
	}
}

func runCases(t *testing.T, s *Set, cases []toolCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, call(t, s, tc.tool, tc.args))
		})
	}
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing"), file} {
		if s, err := New(bad, Options{}); err == nil {
			s.Close()
			t.Errorf("New(%q) succeeded, want an error", bad)
		}
	}
	s, err := New(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	res := s.Call(context.Background(), "ls", nil)
	if !res.IsError || !strings.Contains(res.Output, "closed") {
		t.Errorf("ls after Close = %+v, want an error saying the tools are closed", res)
	}
}

func TestDefinitions(t *testing.T) {
	s, _ := newSet(t, Options{}, nil)
	defs := s.Definitions()
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
		if d.Description == "" {
			t.Errorf("%s has no description", d.Name)
		}
		var p struct {
			Type                 string                     `json:"type"`
			Properties           map[string]json.RawMessage `json:"properties"`
			Required             []string                   `json:"required"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
		}
		if err := json.Unmarshal(d.Parameters, &p); err != nil {
			t.Errorf("%s parameters: %v", d.Name, err)
			continue
		}
		if p.Type != "object" || p.AdditionalProperties == nil || *p.AdditionalProperties || p.Required == nil {
			t.Errorf("%s parameters = %s, want an object with required and additionalProperties false", d.Name, d.Parameters)
		}
		for _, r := range p.Required {
			if _, ok := p.Properties[r]; !ok {
				t.Errorf("%s requires %q, which is not a property", d.Name, r)
			}
		}
		for name, raw := range p.Properties {
			var prop struct{ Description string }
			if err := json.Unmarshal(raw, &prop); err != nil || prop.Description == "" {
				t.Errorf("%s.%s has no description", d.Name, name)
			}
		}
	}
	want := []string{"ls", "read_file", "write_file", "edit_file", "glob", "grep", "execute", "write_todos"}
	if !slices.Equal(names, want) {
		t.Errorf("names = %v, want %v", names, want)
	}
	defs[0].Name = "changed"
	if s.Definitions()[0].Name != "ls" {
		t.Error("changing the returned slice changed the Set's definitions")
	}
}

func TestCallArguments(t *testing.T) {
	s, _ := newSet(t, Options{}, map[string]string{"a.txt": "hello\n"})
	runCases(t, s, []toolCase{
		{name: "unknown tool", tool: "rm", args: `{}`, wantErr: true,
			want: `unknown tool "rm"; the tools are ls, read_file, write_file, edit_file, glob, grep, execute, write_todos`},
		{name: "not JSON", tool: "read_file", args: `file_path=a.txt`, wantErr: true,
			want: "the arguments are not valid JSON; send a JSON object of the tool's parameters"},
		{name: "broken object", tool: "read_file", args: `{"file_path": "a.txt"`, wantErr: true,
			contains: []string{"the arguments are not valid JSON (", "send a JSON object"}},
		{name: "array", tool: "read_file", args: `["a.txt"]`, wantErr: true,
			want: "the arguments must be a JSON object of the tool's parameters, not a JSON array"},
		{name: "string", tool: "read_file", args: `"a.txt"`, wantErr: true, contains: []string{"not a JSON string"}},
		{name: "null", tool: "ls", args: `null`, wantErr: true, contains: []string{"not a JSON null"}},
		{name: "number", tool: "ls", args: ` 42 `, wantErr: true, contains: []string{"not a JSON number"}},
		{name: "wrong type", tool: "read_file", args: `{"file_path": 5}`, wantErr: true,
			want: `argument "file_path" must be a string, not a JSON number`},
		{name: "wrong type bool", tool: "edit_file", args: `{"file_path":"a.txt","old_string":"h","new_string":"j","replace_all":"yes"}`, wantErr: true,
			want: `argument "replace_all" must be a boolean (true or false), not a JSON string`},
		{name: "missing required", tool: "read_file", args: `{}`, wantErr: true, want: `missing required argument "file_path"`},
		{name: "null required", tool: "read_file", args: `{"file_path": null}`, wantErr: true, want: `missing required argument "file_path"`},
		{name: "unknown argument ignored", tool: "read_file", args: `{"file_path": "a.txt", "bogus": [1]}`, want: "     1\thello"},
		{name: "empty arguments", tool: "ls", args: ``, want: "a.txt"},
		{name: "whitespace arguments", tool: "ls", args: " \n", want: "a.txt"},
	})
}

func TestFinish(t *testing.T) {
	ascii := strings.Repeat("a", MaxOutputChars)
	wide := strings.Repeat("é", MaxOutputChars)
	marker := func(total int) string {
		return "\n[output truncated: showed 10000 of " + strconv.Itoa(total) + " characters]"
	}
	tests := []struct {
		name, in, want string
	}{
		{"short", "hello", "hello"},
		{"exactly the cap", ascii, ascii},
		{"one over the cap", ascii + "b", ascii + marker(MaxOutputChars+1)},
		{"multibyte at the cap", wide, wide},
		{"multibyte over the cap", wide + "日本", wide + marker(MaxOutputChars+2)},
		{"cut between multibyte", ascii[1:] + "日本語", ascii[1:] + "日" + marker(MaxOutputChars+2)},
		{"invalid UTF-8", "a\xffb\xc3", "a\uFFFDb\uFFFD"},
		{"invalid UTF-8 over the cap", ascii + "\xff\xfe", ascii + marker(MaxOutputChars+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := finish(Result{Output: tt.in, IsError: true})
			if res.Output != tt.want {
				t.Errorf("output (%d runes) ends %q, want (%d runes) ending %q",
					utf8.RuneCountInString(res.Output), tail(res.Output), utf8.RuneCountInString(tt.want), tail(tt.want))
			}
			if !res.IsError {
				t.Error("finish lost IsError")
			}
		})
	}
}

func TestCallTruncates(t *testing.T) {
	s, _ := newSet(t, Options{}, nil)
	content := strings.Repeat("ü", 2*MaxOutputChars)
	res := call(t, s, "write_todos", map[string]any{"todos": []map[string]string{{"content": content, "status": "pending"}}})
	prefix := `Updated todo list to [{"content":"`
	total := utf8.RuneCountInString(prefix) + 2*MaxOutputChars + len(`","status":"pending"}]`)
	want := prefix + strings.Repeat("ü", MaxOutputChars-utf8.RuneCountInString(prefix)) + "\n[output truncated: showed 10000 of " + strconv.Itoa(total) + " characters]"
	if res.IsError || res.Output != want {
		t.Errorf("output ends %q, want it to end %q", tail(res.Output), tail(want))
	}
}

func TestWriteTodos(t *testing.T) {
	s, _ := newSet(t, Options{}, nil)
	runCases(t, s, []toolCase{
		{name: "list", tool: "write_todos", args: map[string]any{"todos": []map[string]string{
			{"content": "read <main.go>", "status": "completed"},
			{"content": "fix & test", "status": "in_progress"},
			{"content": "commit", "status": "pending"},
		}}, want: `Updated todo list to [{"content":"read <main.go>","status":"completed"},{"content":"fix & test","status":"in_progress"},{"content":"commit","status":"pending"}]`},
		{name: "empty list", tool: "write_todos", args: `{"todos": []}`, want: `Updated todo list to []`},
		{name: "bad status", tool: "write_todos", args: `{"todos": [{"content": "x", "status": "done"}]}`, wantErr: true,
			want: `todos[0] has status "done"; use one of pending, in_progress or completed`},
		{name: "no status", tool: "write_todos", args: `{"todos": [{"content": "x", "status": "pending"}, {"content": "y"}]}`, wantErr: true,
			want: `todos[1] has no status; use one of pending, in_progress or completed`},
		{name: "no content", tool: "write_todos", args: `{"todos": [{"content": " ", "status": "pending"}]}`, wantErr: true,
			contains: []string{"todos[0] has no content"}},
		{name: "not an array", tool: "write_todos", args: `{"todos": "x"}`, wantErr: true,
			want: `argument "todos" must be an array, not a JSON string`},
		{name: "missing", tool: "write_todos", args: `{}`, wantErr: true, want: `missing required argument "todos"`},
	})
	// The failed calls above left the last good list in place.
	s.mu.Lock()
	got := s.todos
	s.mu.Unlock()
	if len(got) != 0 {
		t.Errorf("todos = %+v, want the empty list of the last good call", got)
	}
	call(t, s, "write_todos", `{"todos": [{"content": "x", "status": "pending"}]}`)
	s.mu.Lock()
	got = s.todos
	s.mu.Unlock()
	if want := []todo{{"x", "pending"}}; !slices.Equal(got, want) {
		t.Errorf("todos = %+v, want %+v", got, want)
	}
}

// TestConcurrentCalls is for the race detector.
func TestConcurrentCalls(t *testing.T) {
	s, _ := newSet(t, Options{}, map[string]string{"a.txt": "a\nb\n"})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			name := "f" + strconv.Itoa(i) + ".txt"
			for range 20 {
				for _, c := range []struct {
					tool string
					args any
				}{
					{"write_file", map[string]string{"file_path": name, "content": "x\n"}},
					{"read_file", map[string]string{"file_path": "a.txt"}},
					{"grep", map[string]string{"pattern": "x"}},
					{"glob", map[string]string{"pattern": "*.txt"}},
					{"write_todos", `{"todos": [{"content": "x", "status": "pending"}]}`},
				} {
					if res := call(t, s, c.tool, c.args); res.IsError {
						t.Errorf("%s: %s", c.tool, res.Output)
					}
				}
			}
		})
	}
	wg.Wait()
}

// tail is the end of s, for messages about long outputs.
func tail(s string) string {
	if n := len(s); n > 80 {
		return "..." + s[n-80:]
	}
	return s
}
