package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLs(t *testing.T) {
	s, dir := newSet(t, Options{}, map[string]string{
		"a.txt": "", "c.txt": "", ".hidden": "", "b/x.txt": "", "b/y/": "", "empty/": "",
	})
	if err := os.Symlink("b", filepath.Join(dir, "lnk")); err != nil {
		t.Fatal(err)
	}
	runCases(t, s, []toolCase{
		{name: "default", tool: "ls", args: `{}`, want: ".hidden\na.txt\nb/\nc.txt\nempty/\nlnk/"},
		{name: "dot", tool: "ls", args: map[string]string{"path": "."}, want: ".hidden\na.txt\nb/\nc.txt\nempty/\nlnk/"},
		{name: "subdirectory", tool: "ls", args: map[string]string{"path": "b"}, want: "b/x.txt\nb/y/"},
		{name: "absolute inside", tool: "ls", args: map[string]string{"path": filepath.Join(dir, "b") + "/"}, want: "b/x.txt\nb/y/"},
		{name: "through a link inside", tool: "ls", args: map[string]string{"path": "lnk"}, want: "lnk/x.txt\nlnk/y/"},
		{name: "empty", tool: "ls", args: map[string]string{"path": "empty"}, want: "Directory empty is empty."},
		{name: "file", tool: "ls", args: map[string]string{"path": "a.txt"}, wantErr: true,
			want: `cannot list "a.txt": it is a file, not a directory; use read_file to read it`},
		{name: "missing", tool: "ls", args: map[string]string{"path": "nope"}, wantErr: true,
			want: `cannot list "nope": it does not exist; use ls or glob to find the right path`},
		{name: "wrong type", tool: "ls", args: `{"path": ["b"]}`, wantErr: true,
			want: `argument "path" must be a string, not a JSON array`},
	})
}

func TestReadFile(t *testing.T) {
	var many strings.Builder
	for i := 1; i <= 3000; i++ {
		fmt.Fprintf(&many, "line %d of a file with many lines\n", i)
	}
	long := strings.Repeat("x", 2500)
	wide := strings.Repeat("é", 2500)
	s, dir := newSet(t, Options{}, map[string]string{
		"a.txt":     "one\ntwo\nthree\n",
		"nonl.txt":  "a\n\nb",
		"crlf.txt":  "a\r\nb\r\n",
		"empty.txt": "",
		"bin.dat":   "PNG\x00\x01\x02",
		"long.txt":  long + "\nshort\n",
		"wide.txt":  wide + "\n",
		"many.txt":  many.String(),
		"huge.txt":  strings.Repeat("z", 100000) + "\nafter\n" + strings.Repeat("q", 50000),
		"d/":        "",
	})
	if err := os.Symlink("a.txt", filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	read := func(name string, args any, want string) toolCase {
		return toolCase{name: name, tool: "read_file", args: args, want: want}
	}
	fail := func(name string, args any, want string) toolCase {
		return toolCase{name: name, tool: "read_file", args: args, want: want, wantErr: true}
	}
	runCases(t, s, []toolCase{
		read("whole", map[string]any{"file_path": "a.txt"}, "     1\tone\n     2\ttwo\n     3\tthree"),
		read("absolute inside", map[string]any{"file_path": filepath.Join(dir, "a.txt")}, "     1\tone\n     2\ttwo\n     3\tthree"),
		read("dot slash", map[string]any{"file_path": "./d/../a.txt"}, "     1\tone\n     2\ttwo\n     3\tthree"),
		read("link inside", map[string]any{"file_path": "link.txt"}, "     1\tone\n     2\ttwo\n     3\tthree"),
		read("offset and limit", map[string]any{"file_path": "a.txt", "offset": 1, "limit": 1},
			"     2\ttwo\n[showed lines 2-2; the file has more: read on with offset=2]"),
		read("offset to the last line", map[string]any{"file_path": "a.txt", "offset": 2.0}, "     3\tthree"),
		read("limit to the end", map[string]any{"file_path": "a.txt", "limit": 3}, "     1\tone\n     2\ttwo\n     3\tthree"),
		read("no final newline", map[string]any{"file_path": "nonl.txt"}, "     1\ta\n     2\t\n     3\tb"),
		read("crlf kept", map[string]any{"file_path": "crlf.txt"}, "     1\ta\r\n     2\tb\r"),
		read("empty", map[string]any{"file_path": "empty.txt"}, "File empty.txt exists but is empty."),
		read("long line", map[string]any{"file_path": "long.txt"},
			"     1\t"+long[:2000]+" [line cut at 2000 characters]\n     2\tshort"),
		read("long multibyte line", map[string]any{"file_path": "wide.txt"},
			"     1\t"+strings.Repeat("é", 2000)+" [line cut at 2000 characters]"),
		read("lines longer than the buffer", map[string]any{"file_path": "huge.txt"},
			"     1\t"+strings.Repeat("z", 2000)+" [line cut at 2000 characters]\n     2\tafter\n     3\t"+strings.Repeat("q", 2000)+" [line cut at 2000 characters]"),
		read("line numbers past six digits", map[string]any{"file_path": "many.txt", "offset": 2998},
			"  2999\tline 2999 of a file with many lines\n  3000\tline 3000 of a file with many lines"),
		fail("offset past the end", map[string]any{"file_path": "a.txt", "offset": 3},
			"offset 3 is past the end of a.txt, which has 3 lines; use an offset below 3"),
		fail("binary", map[string]any{"file_path": "bin.dat"},
			`cannot read "bin.dat": it is a binary file (it contains NUL bytes); use execute with a tool such as xxd or file to inspect it`),
		fail("directory", map[string]any{"file_path": "d"}, `cannot read "d": it is a directory; use ls to list it`),
		fail("working directory", map[string]any{"file_path": "."}, `cannot read the working directory: it is a directory; use ls to list it`),
		fail("missing", map[string]any{"file_path": "nope.txt"}, `cannot read "nope.txt": it does not exist; use ls or glob to find the right path`),
		fail("under a file", map[string]any{"file_path": "a.txt/x"},
			`cannot read "a.txt/x": a part of the path that should be a directory is a file`),
		fail("negative offset", map[string]any{"file_path": "a.txt", "offset": -1}, `argument "offset" must be at least 0, not -1`),
		fail("zero limit", map[string]any{"file_path": "a.txt", "limit": 0}, `argument "limit" must be at least 1, not 0`),
		fail("fractional offset", map[string]any{"file_path": "a.txt", "offset": 1.5}, `argument "offset" must be a whole number, not 1.5`),
		fail("string offset", `{"file_path": "a.txt", "offset": "1"}`, `argument "offset" must be a number, not a JSON string`),
	})

	t.Run("stops before the output cap", func(t *testing.T) {
		res := call(t, s, "read_file", map[string]any{"file_path": "many.txt"})
		if res.IsError {
			t.Fatal(res.Output)
		}
		if n := utf8.RuneCountInString(res.Output); n > MaxOutputChars {
			t.Errorf("output has %d characters, more than %d", n, MaxOutputChars)
		}
		lines := strings.Split(res.Output, "\n")
		last := len(lines) - 1 // the note
		want := fmt.Sprintf("[output limit reached: showed lines 1-%d; read on with offset=%d]", last, last)
		if lines[last] != want {
			t.Errorf("last line = %q, want %q", lines[last], want)
		}
		if want := fmt.Sprintf("%6d\tline %d of a file with many lines", last, last); lines[last-1] != want {
			t.Errorf("line before the note = %q, want %q", lines[last-1], want)
		}
		// Reading on from the offset the note gives starts at the next line.
		next := call(t, s, "read_file", map[string]any{"file_path": "many.txt", "offset": last, "limit": 1})
		if want := fmt.Sprintf("%6d\tline %d of a file with many lines", last+1, last+1); !strings.HasPrefix(next.Output, want+"\n") {
			t.Errorf("next read = %q, want it to start with %q", next.Output, want)
		}
	})
}

func TestReadFileFIFO(t *testing.T) {
	s, dir := newSet(t, Options{}, nil)
	if err := mkfifo(filepath.Join(dir, "fifo")); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	// Opening a FIFO with no writer would block for ever without O_NONBLOCK.
	res := call(t, s, "read_file", map[string]string{"file_path": "fifo"})
	want := `cannot read "fifo": it is not a regular file (p---------)`
	if !res.IsError || res.Output != want {
		t.Errorf("read_file on a FIFO = %+v, want error %q", res, want)
	}
}

func TestWriteFile(t *testing.T) {
	s, dir := newSet(t, Options{}, map[string]string{"exists.txt": "old content\n", "d/": ""})
	if err := os.Chmod(filepath.Join(dir, "exists.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	runCases(t, s, []toolCase{
		{name: "new file", tool: "write_file", args: map[string]string{"file_path": "new.txt", "content": "hello\n"},
			want: "Wrote 6 bytes to new.txt (new file)"},
		{name: "new directories", tool: "write_file", args: map[string]string{"file_path": "x/y/z.txt", "content": "deep"},
			want: "Wrote 4 bytes to x/y/z.txt (new file)"},
		{name: "absolute inside", tool: "write_file", args: map[string]string{"file_path": filepath.Join(dir, "abs.txt"), "content": "a"},
			want: "Wrote 1 bytes to abs.txt (new file)"},
		{name: "overwrite", tool: "write_file", args: map[string]string{"file_path": "exists.txt", "content": "new"},
			want: "Wrote 3 bytes to exists.txt"},
		{name: "empty content", tool: "write_file", args: map[string]string{"file_path": "empty.txt", "content": ""},
			want: "Wrote 0 bytes to empty.txt (new file)"},
		{name: "directory", tool: "write_file", args: map[string]string{"file_path": "d", "content": "x"}, wantErr: true,
			want: `cannot write "d": it is a directory`},
		{name: "working directory", tool: "write_file", args: map[string]string{"file_path": ".", "content": "x"}, wantErr: true,
			want: `file_path "." is the working directory itself; give the path of a file`},
		{name: "under a file", tool: "write_file", args: map[string]string{"file_path": "exists.txt/x", "content": "x"}, wantErr: true,
			want: `cannot write "exists.txt/x": a part of the path that should be a directory is a file`},
		{name: "no content", tool: "write_file", args: map[string]string{"file_path": "n.txt"}, wantErr: true,
			want: `missing required argument "content"`},
	})
	for name, want := range map[string]string{
		"new.txt": "hello\n", "x/y/z.txt": "deep", "abs.txt": "a", "exists.txt": "new", "empty.txt": "",
	} {
		if got := readString(t, filepath.Join(dir, name)); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	// Modes: what os.WriteFile and os.Mkdir give under the same umask.
	ref := t.TempDir()
	if err := os.WriteFile(filepath.Join(ref, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ref, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ path, like string }{
		{"new.txt", "f"}, {"x/y/z.txt", "f"}, {"x", "d"}, {"x/y", "d"},
	} {
		if got, want := mode(t, filepath.Join(dir, m.path)), mode(t, filepath.Join(ref, m.like)); got != want {
			t.Errorf("mode of %s = %v, want %v", m.path, got, want)
		}
	}
	if got := mode(t, filepath.Join(dir, "exists.txt")); got != 0o600 {
		t.Errorf("overwritten file's mode = %v, want it kept at 0600", got)
	}
}

func TestEditFile(t *testing.T) {
	const code = "package main\n\nfunc main() {\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n\tprintln(\"hi\")\n}\n"
	newEdit := func(t *testing.T) (*Set, string) {
		s, dir := newSet(t, Options{}, map[string]string{"main.go": code, "d/": ""})
		if err := os.Chmod(filepath.Join(dir, "main.go"), 0o750); err != nil {
			t.Fatal(err)
		}
		return s, dir
	}
	edit := func(old, new string, all bool) map[string]any {
		return map[string]any{"file_path": "main.go", "old_string": old, "new_string": new, "replace_all": all}
	}
	tests := []struct {
		toolCase
		after string // the file afterwards
	}{
		{toolCase{name: "unique", args: edit("package main", "package other", false), want: "Replaced 1 occurrence in main.go"},
			strings.Replace(code, "package main", "package other", 1)},
		{toolCase{name: "replace all", args: edit(`"hi"`, `"bye"`, true), want: "Replaced 3 occurrences in main.go"},
			strings.ReplaceAll(code, `"hi"`, `"bye"`)},
		{toolCase{name: "multiline", args: edit("{\n\tprintln", "{\n\t// first\n\tprintln", false), want: "Replaced 1 occurrence in main.go"},
			strings.Replace(code, "{\n\tprintln", "{\n\t// first\n\tprintln", 1)},
		{toolCase{name: "delete", args: edit("\n\nfunc", "\nfunc", false), want: "Replaced 1 occurrence in main.go"},
			strings.Replace(code, "\n\nfunc", "\nfunc", 1)},
		{toolCase{name: "ambiguous", args: edit(`println("hi")`, `x()`, false), wantErr: true,
			want: `old_string occurs 3 times in main.go; pass replace_all=true to replace every occurrence, or add surrounding lines to old_string so that it matches exactly once`}, code},
		{toolCase{name: "absent", args: edit("func Main", "func X", false), wantErr: true,
			want: `old_string "func Main" was not found in main.go; read the file again and copy the text exactly, including whitespace and indentation`}, code},
		{toolCase{name: "absent and long", args: edit(strings.Repeat("z", 100), "y", false), wantErr: true,
			contains: []string{`old_string "` + strings.Repeat("z", 80) + `"... was not found`}}, code},
		{toolCase{name: "line numbers", args: edit("     3\tfunc main() {", "x", false), wantErr: true,
			contains: []string{"(do not include the line numbers and tab that read_file puts before each line)"}}, code},
		{toolCase{name: "empty old_string", args: edit("", "x", false), wantErr: true,
			want: "old_string is empty; give the exact text to replace (use write_file to create a file or replace all of it)"}, code},
		{toolCase{name: "no change", args: edit("main", "main", false), wantErr: true,
			want: "old_string and new_string are the same, so the edit would change nothing"}, code},
		{toolCase{name: "missing new_string", args: map[string]any{"file_path": "main.go", "old_string": "x"}, wantErr: true,
			want: `missing required argument "new_string"`}, code},
		{toolCase{name: "missing file", args: map[string]any{"file_path": "nope.go", "old_string": "a", "new_string": "b"}, wantErr: true,
			want: `cannot edit "nope.go": it does not exist; use ls or glob to find the right path`}, code},
		{toolCase{name: "directory", args: map[string]any{"file_path": "d", "old_string": "a", "new_string": "b"}, wantErr: true,
			want: `cannot edit "d": it is a directory; use ls to list it`}, code},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := newEdit(t)
			tt.tool = "edit_file"
			tt.check(t, call(t, s, "edit_file", tt.args))
			path := filepath.Join(dir, "main.go")
			if got := readString(t, path); got != tt.after {
				t.Errorf("file afterwards:\n%s\nwant:\n%s", got, tt.after)
			}
			if got := mode(t, path); got != 0o750 {
				t.Errorf("mode afterwards = %v, want 0750 kept", got)
			}
		})
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}
