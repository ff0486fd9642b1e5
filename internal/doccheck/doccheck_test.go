package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// tree is a small command tree shaped like amelia's: a persistent flag, a
// group, a command whose flags after its first argument are the
// argument's, and one that takes no arguments.
func tree() *cobra.Command {
	root := &cobra.Command{Use: "amelia", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	root.PersistentFlags().StringP("profile", "p", "", "")
	root.PersistentFlags().Bool("debug", false, "")
	run := &cobra.Command{Use: "run", RunE: func(*cobra.Command, []string) error { return nil }}
	run.Flags().String("workflow", "", "")
	run.Flags().Bool("json", false, "")
	run.Flags().Int("max-turns", 0, "")
	sandbox := &cobra.Command{Use: "sandbox", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	exec := &cobra.Command{Use: "exec", RunE: func(*cobra.Command, []string) error { return nil }}
	exec.Flags().BoolP("interactive", "i", false, "")
	exec.Flags().StringP("workdir", "w", "", "")
	exec.Flags().SetInterspersed(false)
	ls := &cobra.Command{Use: "ls", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	down := &cobra.Command{Use: "down", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	down.Flags().Bool("force", false, "")
	sandbox.AddCommand(exec, ls, down)
	root.AddCommand(run, sandbox)
	return root
}

func TestCheckCobra(t *testing.T) {
	for _, tc := range []struct {
		kind Kind
		line string
		want string // "" for no error, else a part of it
	}{
		{Shell, "amelia run --workflow fix --json 'add a flag'", ""},
		{Shell, "amelia --profile dev run -p dev --max-turns=5 hi", ""},
		{Shell, "amelia sandbox exec -i -w sub -- sh -c 'echo -n x'", ""},
		{Shell, "amelia sandbox exec sh -c 'echo -n x'", ""},
		{Shell, "amelia sandbox ls --help", ""},
		{Shell, "amelia runn hi", `"runn" is no subcommand of "amelia"`},
		{Shell, "amelia sandbox lss", `"lss" is no subcommand of "amelia sandbox"`},
		{Shell, "amelia run --workflw fix hi", `"amelia run" has no flag --workflw`},
		{Shell, "amelia sandbox exec -x -- true", `"amelia sandbox exec" has no flag -x`},
		{Shell, "amelia sandbox ls extra", `amelia sandbox ls: unknown command "extra"`},
		{Shell, "amelia sandbox down --json", `"amelia sandbox down" has no flag --json`},
		{Prose, "amelia run [--workflow ID] [--json] (--prompt-file F \\| PROMPT...)", `"amelia run" has no flag --prompt-file`},
		{Prose, "amelia run [--workflow ID] [--json] (PROMPT... \\| -p P)", ""},
		{Prose, "amelia sandbox exec \\| ls \\| down", ""},
		{Prose, "amelia sandbox ls \\| up", `"up" is no subcommand of "amelia sandbox"`},
		{Prose, "amelia sandbox down [--force]", ""},
		{Prose, "amelia sandbox WHAT", ""},
		{Prose, "amelia sandbox what", `"what" is no subcommand of "amelia sandbox"`},
		{Prose, "amelia sandbox down --profile dev removes it)", ""},
	} {
		t.Run(tc.line, func(t *testing.T) {
			var c Command
			if tc.kind == Shell {
				cmds := shellCommands("doc.md", 1, tc.line)
				if len(cmds) != 1 {
					t.Fatalf("found %d commands", len(cmds))
				}
				c = cmds[0]
			} else {
				cmds := proseCommands("doc.md", 1, tc.line, true)
				if len(cmds) != 1 {
					t.Fatalf("found %d commands", len(cmds))
				}
				c = cmds[0]
			}
			err := CheckCobra(tree(), c)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestScanMarkdown(t *testing.T) {
	doc := strings.Join([]string{
		"# Title", // 1
		"",        // 2
		"Run `amelia run --json TASK` or `make x`.", // 3
		"`amelia ALL=(root) NOPASSWD` is sudoers'.", // 4
		"```sh",                 // 5
		"make build   # builds", // 6
		"cd dir && FOO=1 amelia version; echo hi", // 7
		"env -u KEY make demo | tee log",          // 8
		"go test \\",                              // 9
		"  ./core/protocol/",                      // 10
		"```",                                     // 11
		"```",                                     // 12
		"│ recover   amelia results --profile p w │", // 13
		"amelia: not a command",                      // 14
		"```",                                        // 15
		"```yaml",                                    // 16
		"cmd: amelia run x",                          // 17
		"```",                                        // 18
		"",                                           // 19
		"    amelia sandbox ls",                      // 20
		"",                                           // 21
		"- a list item",                              // 22
		"",                                           // 23
		"    continued, amelia run",                  // 24
	}, "\n")
	var got []string
	for _, c := range ScanMarkdown("d.md", doc) {
		kind := "shell"
		if c.Kind == Prose {
			kind = "prose"
		}
		got = append(got, kind+" "+c.String())
	}
	// at is "d.md:LINE": written out, a file name of a top-level domain
	// and a line number read as HOST:PORT to internal/netguard.
	at := func(line int) string { return fmt.Sprintf("d.md:%d", line) }
	want := []string{
		"prose " + at(3) + ": amelia run --json TASK",
		"prose " + at(3) + ": make x",
		"shell " + at(6) + ": make build",
		"shell " + at(7) + ": amelia version",
		"shell " + at(8) + ": make demo",
		"shell " + at(9) + ": go test ./core/protocol/",
		"prose " + at(13) + ": amelia results --profile p w",
		"shell " + at(20) + ": amelia sandbox ls",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestCheckMakeAndGo(t *testing.T) {
	dir := t.TempDir()
	mk := "GO ?= go\n.PHONY: a b\nall: build\nbuild worker: x\n\t@echo\nvar := 1\n"
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(mk), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "pkg", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pkg", "p.go"), []byte("package pkg\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	targets, err := MakeTargets(filepath.Join(dir, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		c    Command
		want string
	}{
		{Command{Kind: Shell, Args: []string{"make", "build", "PREFIX=/x", "worker"}}, ""},
		{Command{Kind: Shell, Args: []string{"make", "test"}}, `no target "test"`},
		{Command{Kind: Prose, Args: []string{"make", "all", "says", "so"}}, ""},
		{Command{Kind: Prose, Args: []string{"make", "var"}}, `no target "var"`},
		{Command{Kind: Shell, Args: []string{"go", "test", "-run=X", "./pkg/"}}, ""},
		{Command{Kind: Shell, Args: []string{"go", "run", "./pkg/empty", "sweep"}}, "no package"},
		{Command{Kind: Shell, Args: []string{"go", "test", "./gone/..."}}, "no directory"},
		{Command{Kind: Shell, Args: []string{"go", "test", "./..."}}, ""},
	} {
		var err error
		if tc.c.Program() == "make" {
			err = CheckMake(targets, tc.c)
		} else {
			err = CheckGo(dir, tc.c)
		}
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: error %v, want none", tc.c.Args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want one containing %q", tc.c.Args, err, tc.want)
		}
	}
}

// The make targets and Go packages README.md and docs/ name exist. (The
// amelia and amelia-worker commands are checked beside their command
// trees: cmd/amelia/cli and internal/worker.)
func TestDocsMakeAndGoCommands(t *testing.T) {
	root, cmds, err := ScanRepo("make", "go")
	if err != nil {
		t.Fatal(err)
	}
	targets, err := MakeTargets(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cmds {
		var err error
		switch c.Program() {
		case "make":
			err = CheckMake(targets, c)
		case "go":
			err = CheckGo(root, c)
		default:
			continue
		}
		n++
		if err != nil {
			t.Errorf("%s\n\t%v", c, err)
		}
	}
	if n < 5 {
		t.Errorf("found %d make and go commands in the docs; the scan is broken", n)
	}
}

// docs/performance.md's list of benchmarks names, with its package, every
// benchmark make bench runs, and each line of make bench runs one.
func TestDocsNameEveryBenchmark(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lines, err := BenchLines(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) < 10 {
		t.Fatalf("found %d lines in the bench target; the parse is broken", len(lines))
	}
	const file = "docs/performance.md"
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Split(string(b), "\n")
	for _, bl := range lines {
		names, err := Benchmarks(root, bl)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			t.Errorf("Makefile: make bench's -bench=%s runs no benchmark of %s", bl.Pattern, bl.Pkg)
		}
		for _, name := range names {
			found := slices.ContainsFunc(doc, func(line string) bool {
				return strings.Contains(line, "`"+bl.Pkg+"`") && strings.Contains(line, "`"+name+"`")
			})
			if !found {
				t.Errorf("%s: no line names %s of %s (make bench runs it): add it to the list of benchmarks, with its figures or \"not measured\"", file, name, bl.Pkg)
			}
		}
	}
}

func TestBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n[a](docs/b.md#the-api-providerproto) [b](docs/b.md#nope) [c](gone.md)\n"+
		"```sh\n[d](in-a-block.md)\n```\n[e](#top) [f](docs) [g](https://example.invalid/x) [h](docs/b.md#run-2)\n")
	write("docs/b.md", "# The API: `provider.proto`\n## Run\n## Run\n## Run\n")
	bad, err := BrokenLinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range bad {
		got = append(got, l.String())
	}
	readme := fmt.Sprintf("README.md:%d", 3) // see at in TestScanMarkdown
	want := []string{
		readme + ": docs/b.md#nope: no heading of that anchor",
		readme + ": gone.md: no such file or directory",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Every relative link of README.md and docs/ leads to a file, and a
// #fragment to a heading.
func TestDocsLinks(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bad, err := BrokenLinks(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range bad {
		t.Error(l)
	}
}
