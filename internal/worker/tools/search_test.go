package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }

var searchTree = map[string]string{
	"main.go":           "package main\n\nfunc main() {}\nfunc helper() {}\n",
	"README.md":         "# Main\nsee main.go\n",
	"src/a.go":          "package src\n\nfunc A() {}\n",
	"src/b.ts":          "export function b() {}\n",
	"src/deep/c.go":     "package deep\n// TODO: main\n",
	"src/deep/d.txt":    "nothing\n",
	".git/HEAD":         "ref: main\n",
	".git/x.go":         "package git // main\n",
	"docs/.hidden.go":   "package hidden\n",
	"bin/tool":          "\x7fELF\x00\x00main",
	"a b/with space.go": "package space\n",
}

func TestGlob(t *testing.T) {
	s, dir := newSet(t, Options{}, searchTree)
	glob := func(name string, args map[string]string, want string) toolCase {
		return toolCase{name: name, tool: "glob", args: args, want: want}
	}
	fail := func(name string, args map[string]string, want string) toolCase {
		return toolCase{name: name, tool: "glob", args: args, want: want, wantErr: true}
	}
	runCases(t, s, []toolCase{
		glob("recursive", map[string]string{"pattern": "**/*.go"},
			"a b/with space.go\ndocs/.hidden.go\nmain.go\nsrc/a.go\nsrc/deep/c.go"),
		glob("top level only", map[string]string{"pattern": "*.go"}, "main.go"),
		glob("one level", map[string]string{"pattern": "*/*.go"}, "a b/with space.go\ndocs/.hidden.go\nsrc/a.go"),
		glob("under path", map[string]string{"pattern": "*.go", "path": "src"}, "src/a.go"),
		glob("recursive under path", map[string]string{"pattern": "**/*", "path": "src/deep"}, "src/deep/c.go\nsrc/deep/d.txt"),
		glob("absolute path", map[string]string{"pattern": "*", "path": filepath.Join(dir, "src")}, "src/a.go\nsrc/b.ts"),
		glob("braces", map[string]string{"pattern": "src/*.{go,ts}"}, "src/a.go\nsrc/b.ts"),
		glob("class and question mark", map[string]string{"pattern": "**/[ab].?s"}, "src/b.ts"),
		glob("dot slash", map[string]string{"pattern": "./src/*.ts"}, "src/b.ts"),
		glob("working directory prefix", map[string]string{"pattern": dir + "/src/*.ts"}, "src/b.ts"),
		glob("git skipped", map[string]string{"pattern": "**/HEAD"}, `No files match "**/HEAD" in the working directory.`),
		glob("no match", map[string]string{"pattern": "*.rs", "path": "src"}, `No files match "*.rs" in "src".`),
		fail("bad pattern", map[string]string{"pattern": "src/[a"},
			`pattern "src/[a" is not a valid glob pattern; check its brackets, braces and escapes`),
		fail("absolute pattern", map[string]string{"pattern": "/etc/*"},
			`pattern "/etc/*" is absolute; give a pattern relative to path, such as "**/*.go"`),
		fail("empty pattern", map[string]string{"pattern": ""}, `pattern is empty; give a glob pattern such as "**/*.go"`),
		fail("path is a file", map[string]string{"pattern": "*", "path": "main.go"},
			`cannot search "main.go": it is a file, not a directory`),
		fail("missing path", map[string]string{"pattern": "*", "path": "nope"},
			`cannot search "nope": it does not exist; use ls or glob to find the right path`),
		fail("no pattern", map[string]string{"path": "src"}, `missing required argument "pattern"`),
	})
}

func TestGlobCap(t *testing.T) {
	files := map[string]string{}
	for i := range maxGlobResults + 100 {
		files[fmt.Sprintf("%04d", i)] = ""
	}
	s, _ := newSet(t, Options{}, files)
	res := call(t, s, "glob", map[string]string{"pattern": "*"})
	lines := strings.Split(res.Output, "\n")
	if res.IsError || len(lines) != maxGlobResults+1 || lines[0] != "0000" || lines[maxGlobResults-1] != "0999" {
		t.Fatalf("glob gave %d lines, from %q to %q; want the first 1000 files and a note", len(lines), lines[0], lines[len(lines)-1])
	}
	if want := "[showed 1000 of 1100 matching files; use a narrower pattern or path]"; lines[maxGlobResults] != want {
		t.Errorf("note = %q, want %q", lines[maxGlobResults], want)
	}
}

func TestGrep(t *testing.T) {
	s, _ := newSet(t, Options{}, searchTree)
	grep := func(name string, args map[string]string, want string) toolCase {
		return toolCase{name: name, tool: "grep", args: args, want: want}
	}
	fail := func(name string, args map[string]string, want string) toolCase {
		return toolCase{name: name, tool: "grep", args: args, want: want, wantErr: true}
	}
	runCases(t, s, []toolCase{
		grep("files by default", map[string]string{"pattern": "main"}, "README.md\nmain.go\nsrc/deep/c.go"),
		grep("content", map[string]string{"pattern": `func \w+\(`, "output_mode": "content"},
			"main.go:3:func main() {}\nmain.go:4:func helper() {}\nsrc/a.go:3:func A() {}"),
		grep("count", map[string]string{"pattern": "func", "output_mode": "count"}, "main.go:2\nsrc/a.go:1\nsrc/b.ts:1"),
		grep("case-insensitive", map[string]string{"pattern": "(?i)^# main"}, "README.md"),
		grep("glob on the name", map[string]string{"pattern": "main", "glob": "*.go"}, "main.go\nsrc/deep/c.go"),
		grep("glob on the path", map[string]string{"pattern": "package", "glob": "src/**/*.go"}, "src/a.go\nsrc/deep/c.go"),
		grep("braces glob", map[string]string{"pattern": "function|func", "glob": "*.{ts,md}"}, "src/b.ts"),
		grep("directory", map[string]string{"pattern": "package", "path": "src"}, "src/a.go\nsrc/deep/c.go"),
		grep("one file", map[string]string{"pattern": "func", "path": "main.go", "output_mode": "content"},
			"main.go:3:func main() {}\nmain.go:4:func helper() {}"),
		grep("no match", map[string]string{"pattern": "zebra"}, `No matches for "zebra" in the working directory.`),
		grep("no match in a file", map[string]string{"pattern": "zebra", "path": "main.go"}, `No matches for "zebra" in "main.go".`),
		fail("bad regexp", map[string]string{"pattern": "func (", "path": "main.go"},
			"pattern \"func (\" is not a valid regular expression (error parsing regexp: missing closing ): `func (`); it uses Go RE2 syntax: escape special characters such as ( [ { . * + ? with a backslash, and lookaround and backreferences are not supported"),
		fail("bad mode", map[string]string{"pattern": "x", "output_mode": "lines"},
			`output_mode must be "files_with_matches", "content" or "count", not "lines"`),
		fail("bad glob", map[string]string{"pattern": "x", "glob": "{a"},
			`glob "{a" is not a valid glob pattern; check its brackets, braces and escapes`),
		fail("binary file", map[string]string{"pattern": "main", "path": "bin/tool"},
			`cannot search "bin/tool": it is a binary file (it contains NUL bytes)`),
		fail("missing path", map[string]string{"pattern": "x", "path": "nope"},
			`cannot search "nope": it does not exist; use ls or glob to find the right path`),
		fail("no pattern", map[string]string{}, `missing required argument "pattern"`),
	})
}

func TestGrepCaps(t *testing.T) {
	var many strings.Builder
	for i := range maxGrepLines + 100 {
		fmt.Fprintf(&many, "m %d\n", i)
	}
	long := strings.Repeat("é", 3*maxGrepLine)
	s, _ := newSet(t, Options{}, map[string]string{
		"many.txt": many.String(),
		"long.txt": "x" + long + "\n",
		"huge.txt": strings.Repeat("y", 3*maxScanLine) + "needle\nneedle\n",
	})

	res := call(t, s, "grep", map[string]string{"pattern": "^m", "path": "many.txt", "output_mode": "content"})
	lines := strings.Split(res.Output, "\n")
	if res.IsError || len(lines) != maxGrepLines+1 || lines[0] != "many.txt:1:m 0" || lines[maxGrepLines-1] != "many.txt:500:m 499" {
		t.Errorf("grep gave %d lines, from %q to %q; want 500 matches and a note", len(lines), lines[0], lines[len(lines)-1])
	}
	if want := "[results capped after 500 matching lines; narrow the pattern, path or glob to see the rest]"; lines[len(lines)-1] != want {
		t.Errorf("note = %q, want %q", lines[len(lines)-1], want)
	}

	res = call(t, s, "grep", map[string]string{"pattern": "^x", "path": "long.txt", "output_mode": "content"})
	if want := "long.txt:1:x" + long[:len("é")*(maxGrepLine-1)] + " [line cut]"; res.Output != want {
		t.Errorf("long line = %q, want %q", tail(res.Output), tail(want))
	}

	// A line longer than maxScanLine is only searched in its first part;
	// the lines after it are still found.
	res = call(t, s, "grep", map[string]string{"pattern": "needle", "path": "huge.txt", "output_mode": "count"})
	if res.Output != "huge.txt:1" {
		t.Errorf("count in huge.txt = %q, want huge.txt:1", res.Output)
	}
}

func TestGrepBudget(t *testing.T) {
	// Many matching files with long names fill the output before 500 lines.
	files := map[string]string{}
	for i := range 400 {
		files[fmt.Sprintf("%s%04d.txt", strings.Repeat("n", 40), i)] = "hit\n"
	}
	s, _ := newSet(t, Options{}, files)
	res := call(t, s, "grep", map[string]string{"pattern": "hit"})
	lines := strings.Split(res.Output, "\n")
	last := lines[len(lines)-1]
	if want := fmt.Sprintf("[results capped after %d files; narrow the pattern, path or glob to see the rest]", len(lines)-1); res.IsError || last != want {
		t.Errorf("last line = %q, want %q", last, want)
	}
	if strings.Contains(res.Output, "output truncated") {
		t.Error("grep's own cap should keep Call from truncating")
	}
}

func TestSearchSkipsSpecialFiles(t *testing.T) {
	s, dir := newSet(t, Options{}, map[string]string{"a.txt": "hit\n"})
	if err := mkfifo(filepath.Join(dir, "fifo")); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	// The FIFO would block a reader; the link is not followed in a walk.
	res := call(t, s, "grep", map[string]string{"pattern": "hit"})
	if res.Output != "a.txt" {
		t.Errorf("grep = %q, want only a.txt", res.Output)
	}
	// Named explicitly, a link to a file inside is searched.
	res = call(t, s, "grep", map[string]string{"pattern": "hit", "path": "link.txt"})
	if res.Output != "link.txt" {
		t.Errorf("grep link.txt = %q, want link.txt", res.Output)
	}
}
