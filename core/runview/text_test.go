package runview

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestWrap(t *testing.T) {
	tests := []struct {
		in    string
		width int
		want  []string
	}{
		{"", 20, nil},
		{"one two three four five", 10, []string{"one two", "three four", "five"}},
		{"a\n\n\n\nb\n\n", 10, []string{"a", "", "b"}},
		{"\n\nlead", 10, []string{"lead"}},
		{"  - item with words", 12, []string{"  - item", "  with words"}},
		{"abcdefghijklmnopqrst", 8, []string{"abcdefgh", "ijklmnop", "qrst"}},
		{"x abcdefghij", 8, []string{"x", "abcdefgh", "ij"}},
		{"日本語のテキスト", 8, []string{"日本語の", "テキスト"}},
	}
	for _, tt := range tests {
		got := wrap(tt.in, tt.width)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Errorf("wrap(%q, %d) = %q, want %q", tt.in, tt.width, got, tt.want)
		}
		for _, l := range got {
			if textWidth(l) > tt.width {
				t.Errorf("wrap(%q, %d): line %q is too wide", tt.in, tt.width, l)
			}
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		w    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello!", 5, "hell…"},
		{"日本語", 4, "日…"},
		{"abc", 0, ""},
	}
	for _, tt := range tests {
		if got := truncate(tt.in, tt.w); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.w, got, tt.want)
		}
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain\ttext\n", "plain    text\n"},
		{"red \x1b[31mtext\x1b[0m", "red text"},
		{"osc \x1b]52;c;ZXZpbA==\x07end", "osc end"},
		{"st \x1b]0;t\x1b\\end", "st end"},
		{"dcs \x1bPq#0\x1b\\end", "dcs end"},
		{"charset \x1b(Bend", "charset end"},
		{"cr\rbs\bdel\x7fc1\u009b", "crbsdelc1"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{"cut \x1b[3", "cut "},
	}
	for _, tt := range tests {
		if got := sanitize(tt.in); got != tt.want {
			t.Errorf("sanitize(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestToolSubject(t *testing.T) {
	tests := []struct{ name, input, want string }{
		{"execute", `{"command": "go test ./...\n  && go vet"}`, "go test ./... && go vet"},
		{"write_file", `{"file_path": "a/b.go", "content": "x"}`, "a/b.go"},
		{"ls", `{"path": "src"}`, "src"},
		{"grep", `{"pattern": "TODO", "path": "src", "output_mode": "content"}`, "TODO in src"},
		{"glob", `{"pattern": "**/*.go"}`, "**/*.go"},
		{"write_todos", `{"todos": [{"content": "a", "status": "pending"}, {"content": "b", "status": "done"}]}`, "2 items"},
		{"custom", `{"a": 1,  "b": [true]}`, `{"a":1,"b":[true]}`},
		{"ls", `{}`, ""},
		{"ls", ``, ""},
	}
	for _, tt := range tests {
		if got := toolSubject(tt.name, json.RawMessage(tt.input)); got != tt.want {
			t.Errorf("toolSubject(%s, %s) = %q, want %q", tt.name, tt.input, got, tt.want)
		}
	}
}

func TestFailureReason(t *testing.T) {
	tests := []struct{ out, want string }{
		{"FAIL\n[Command failed with exit code 1]", "exit 1"},
		{"(no output)\n[Command timed out after 120s and was killed]\n", "timed out after 120s and was killed"},
		{"[Command was killed by signal 9 (killed)]", "was killed by signal 9 (killed)"},
		{"\n\nError: file not found\nmore", "Error: file not found"},
		{"", "failed"},
	}
	for _, tt := range tests {
		if got := failureReason(tt.out); got != tt.want {
			t.Errorf("failureReason(%q) = %q, want %q", tt.out, got, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	durations := map[time.Duration]string{
		0:                        "0ms",
		7 * time.Millisecond:     "7ms",
		412 * time.Millisecond:   "0.4s",
		12340 * time.Millisecond: "12.3s",
		83 * time.Second:         "1m23s",
		3723 * time.Second:       "1h2m3s",
	}
	for d, want := range durations {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
	counts := map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -12345: "-12,345"}
	for n, want := range counts {
		if got := formatCount(n); got != want {
			t.Errorf("formatCount(%d) = %q, want %q", n, got, want)
		}
	}
	if got := formatCost(0.0123); got != "$0.0123" {
		t.Errorf("formatCost = %q", got)
	}
	if got := formatCost(12.345); got != "$12.35" {
		t.Errorf("formatCost = %q", got)
	}
}
