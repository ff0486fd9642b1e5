// Package doccheck finds the commands that README.md and docs/ show and
// checks them against what they name, so that the docs cannot drift from
// the code: an amelia, amelia-providers or amelia-worker command against
// the program's cobra command tree (every subcommand and flag exists), a
// make target against the Makefile, a package of go test or go run against
// the repository; that docs/performance.md names every benchmark make
// bench runs; and that every relative link leads somewhere. The tests that use it live beside the command trees
// (cmd/amelia/cli, internal/worker) and here (make, go and benchmarks).
//
// A command is found in three places: a line of a shell code block (a
// fenced block marked sh, shell, bash or console, or an indented block),
// where the whole line is a command line; an inline code span that starts
// with a program's name; and a line of any other fenced block but YAML,
// JSON, Go and text (a diagram), say a program's output, where a
// program's name followed by a subcommand may appear anywhere. In a shell
// block the words are split as sh splits them; elsewhere loosely, on
// spaces, with the brackets and bars of a usage line ("[-f]", "(A \| B)")
// taken apart.
package doccheck

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/spf13/cobra"
)

// Kind says where a command was found, and so how strictly it is read.
type Kind int

const (
	// Shell is a line of a shell code block: a whole command line, its
	// words split as sh splits them.
	Shell Kind = iota
	// Prose is an inline code span or a line of a program's output: the
	// command may be a usage line with placeholders and alternatives.
	Prose
)

// Command is one command a doc shows.
type Command struct {
	// File is the doc's path, relative to the repository's root, with
	// forward slashes; Line counts from 1.
	File string
	Line int
	Kind Kind
	// Args is the command line, the program first.
	Args []string
}

// String is the command's place and text, as a failure names it.
func (c Command) String() string {
	return fmt.Sprintf("%s:%d: %s", c.File, c.Line, strings.Join(c.Args, " "))
}

// Program is the command's program: Args[0].
func (c Command) Program() string { return c.Args[0] }

// Programs are the names a command may start with.
var programs = []string{"amelia", "amelia-providers", "amelia-worker", "make", "go"}

// RepoRoot is the repository's root: the nearest directory at or above the
// working directory whose go.mod declares the amelia module.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository's root: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/amelia-sandbox/amelia\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find the repository's root: no go.mod of module github.com/amelia-sandbox/amelia above the working directory")
		}
		dir = parent
	}
}

// Docs lists README.md and every Markdown file under docs/, relative to
// root, sorted.
func Docs(root string) ([]string, error) {
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the docs: %w", err)
	}
	slices.Sort(files[1:])
	return files, nil
}

// Scan returns the commands of every doc Docs lists, in order.
func Scan(root string) ([]Command, error) {
	files, err := Docs(root)
	if err != nil {
		return nil, err
	}
	var all []Command
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		all = append(all, ScanMarkdown(f, string(b))...)
	}
	return all, nil
}

// ScanRepo is the root of the repository this package is in, and the
// commands its docs show of the programs named (every command when none
// is).
func ScanRepo(programs ...string) (string, []Command, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", nil, err
	}
	all, err := Scan(root)
	if err != nil || len(programs) == 0 {
		return root, all, err
	}
	var cmds []Command
	for _, c := range all {
		if slices.Contains(programs, c.Program()) {
			cmds = append(cmds, c)
		}
	}
	return root, cmds, nil
}

var (
	fence    = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")
	listItem = regexp.MustCompile(`^\s*([-*+]|\d+[.)])\s`)
	codeSpan = regexp.MustCompile("`([^`]+)`")
)

// ScanMarkdown returns the commands of one Markdown document; file is what
// they name as their place.
func ScanMarkdown(file, text string) []Command {
	lines := strings.Split(text, "\n")
	var out []Command
	var (
		inFence   bool
		fenceMark string
		lang      string
		pending   string // a shell line continued with a backslash
		pendingAt int
	)
	prevBlank := true
	lastText := "" // the last non-blank line outside code blocks
	inIndented := false
	for i, line := range lines {
		n := i + 1
		if inFence {
			if strings.HasPrefix(strings.TrimSpace(line), fenceMark) {
				inFence = false
				continue
			}
			switch lang {
			case "sh", "shell", "bash", "console", "zsh":
				if pending == "" {
					pendingAt = n
				}
				if cont, ok := strings.CutSuffix(line, "\\"); ok {
					pending += cont + " "
					continue
				}
				out = append(out, shellCommands(file, pendingAt, pending+line)...)
				pending = ""
			case "yaml", "yml", "json", "go", "proto", "python", "py", "diff", "dockerfile", "text":
			default:
				out = append(out, proseCommands(file, n, line, false)...)
			}
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			inFence, fenceMark, lang = true, m[1], strings.ToLower(m[2])
			continue
		}
		blank := strings.TrimSpace(line) == ""
		indented := strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")
		switch {
		case blank:
		case indented && (inIndented || prevBlank && !listItem.MatchString(lastText) && !strings.HasPrefix(lastText, " ")):
			inIndented = true
			out = append(out, shellCommands(file, n, line)...)
		default:
			inIndented = false
			lastText = line
			for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
				out = append(out, proseCommands(file, n, m[1], true)...)
			}
		}
		prevBlank = blank
	}
	return out
}

// shellCommands splits a shell line into its commands (at ;, &&, || and
// |) and returns those that start with a program, past variable
// assignments, env and sudo.
func shellCommands(file string, line int, text string) []Command {
	text = strings.TrimSpace(text)
	text = strings.TrimPrefix(text, "$ ")
	var out []Command
	for _, words := range splitShell(text) {
		for len(words) > 0 {
			w := words[0]
			switch {
			case w == "sudo" || w == "command" || w == "exec":
				words = words[1:]
				continue
			case w == "env":
				words = words[1:]
				for len(words) > 0 && strings.HasPrefix(words[0], "-") {
					if words[0] == "-u" && len(words) > 1 {
						words = words[1:]
					}
					words = words[1:]
				}
				continue
			case isAssignment(w):
				words = words[1:]
				continue
			}
			break
		}
		if len(words) > 0 && slices.Contains(programs, filepath.Base(words[0])) {
			words[0] = filepath.Base(words[0])
			out = append(out, Command{File: file, Line: line, Kind: Shell, Args: words})
		}
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func isAssignment(w string) bool { return assignment.MatchString(w) }

// splitShell splits a line into commands and their words as sh would, for
// the simple lines docs show: quotes and backslashes, comments, and the
// separators ; && || |. It expands nothing.
func splitShell(s string) [][]string {
	var (
		cmds  [][]string
		words []string
		cur   strings.Builder
		inW   bool
	)
	endWord := func() {
		if inW {
			words = append(words, cur.String())
			cur.Reset()
			inW = false
		}
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			inW = true
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
		case c == '"':
			inW = true
			for i++; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
		case c == '\\' && i+1 < len(s):
			inW = true
			i++
			cur.WriteByte(s[i])
		case c == '#' && !inW:
			endCmd()
			return cmds
		case c == ' ' || c == '\t':
			endWord()
		case c == ';' || c == '|' || c == '&':
			endCmd()
			for i+1 < len(s) && (s[i+1] == '|' || s[i+1] == '&') {
				i++
			}
		default:
			inW = true
			cur.WriteByte(c)
		}
	}
	endCmd()
	return cmds
}

// proseCommands returns the commands in a code span or a line of output.
// A code span is a command only when it starts with a program; in output,
// a program's name followed by a subcommand may be anywhere in the line.
func proseCommands(file string, line int, text string, span bool) []Command {
	words := looseWords(text)
	var out []Command
	for i, w := range words {
		if !slices.Contains(programs, w) {
			if span {
				return nil
			}
			continue
		}
		if i+1 >= len(words) || !plausibleArg(words[i+1]) {
			if span {
				return nil
			}
			continue
		}
		if !span && (w == "make" || w == "go") {
			continue // "make" and "go" are words of plain English too
		}
		out = append(out, Command{File: file, Line: line, Kind: Prose, Args: words[i:]})
		return out
	}
	return nil
}

// plausibleArg reports whether w can be the word after a program in a
// command: a subcommand's name or a flag, not an English word such as
// "ALL=(root)".
var plausibleArg = regexp.MustCompile(`^(-{1,2}[a-z]|[a-z][a-z0-9-]*$|\./)`).MatchString

// looseWords splits a usage line on spaces, keeping "|" as a word of its
// own and taking the brackets, parentheses and box-drawing of a usage line
// or a summary box off each word's ends.
func looseWords(s string) []string {
	s = strings.ReplaceAll(s, `\|`, "|")
	s = strings.ReplaceAll(s, "|", " | ")
	var out []string
	for _, w := range strings.Fields(s) {
		if w == "|" {
			out = append(out, w)
			continue
		}
		w = strings.TrimLeft(w, "[({\"'")
		w = strings.TrimRight(w, "])},;\"'│")
		if w != "" && w != "│" {
			out = append(out, w)
		}
	}
	return out
}

// CheckCobra checks c against root, the command tree of its program: each
// word before the first argument names a subcommand, every flag is one of
// the command it is given to (its own, or inherited), and a Shell command
// gives a command that has subcommands no other argument and a command
// that runs arguments it accepts. Prose commands may hold placeholders
// ("WORKFLOW", "-- CMD...") and alternatives ("up | down", where each
// alternative is a subcommand beside the one before the bar).
//
// CheckCobra parses flag sets of root's commands, so each call wants a tree
// of its own, with cobra's lazily added parts (the help and completion
// commands, the version flag) added first.
func CheckCobra(root *cobra.Command, c Command) error {
	cur := root
	var positional []string
	lastWasSub := false
	args := c.Args[1:]
	for i := 0; i < len(args); i++ {
		w := args[i]
		switch {
		case w == "--":
			if c.Kind == Shell {
				positional = append(positional, args[i+1:]...)
			}
			i = len(args)
		case w == "|":
			if lastWasSub && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && cur.Parent() != nil {
				sib := findSub(cur.Parent(), args[i+1])
				if sib == nil {
					return fmt.Errorf("%q is no subcommand of %q (it has: %s)", args[i+1], cur.Parent().CommandPath(), subNames(cur.Parent()))
				}
				cur = sib
				i++
				continue
			}
			lastWasSub = false
		case strings.HasPrefix(w, "-") && len(w) > 1:
			lastWasSub = false
			takesValue, err := checkFlag(cur, w)
			if err != nil {
				return err
			}
			if takesValue && !strings.Contains(w, "=") && i+1 < len(args) && args[i+1] != "|" {
				i++
			}
		default:
			if len(positional) == 0 {
				if sub := findSub(cur, w); sub != nil {
					cur = sub
					lastWasSub = true
					continue
				}
				if cur.HasSubCommands() && (c.Kind == Shell || isWord(w) && !isPlaceholder(w)) {
					return fmt.Errorf("%q is no subcommand of %q (it has: %s)", w, cur.CommandPath(), subNames(cur))
				}
			}
			lastWasSub = false
			positional = append(positional, w)
			if !interspersed(cur) {
				// The words after the first argument are the argument's
				// (amelia sandbox exec CMD ARGS...).
				if c.Kind == Shell {
					positional = append(positional, args[i+1:]...)
				}
				i = len(args)
			}
		}
	}
	if c.Kind == Shell && cur.Args != nil {
		if err := cur.Args(cur, positional); err != nil {
			return fmt.Errorf("%s: %w", cur.CommandPath(), err)
		}
	}
	return nil
}

// isWord reports whether w can be a subcommand's name.
var isWord = regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString

// interspersed reports whether cmd takes flags after its first argument,
// as cobra does unless the command says otherwise (SetInterspersed):
// pflag has no getter, so a flag that cannot exist is parsed after an
// argument. cmd's flags are left parsed: CheckCobra's caller passes a tree
// of its own.
func interspersed(cmd *cobra.Command) bool {
	return cmd.Flags().Parse([]string{"arg", "--doccheck-no-such-flag"}) != nil
}

// isPlaceholder reports whether w stands for a value: an upper-case word
// ("WORKFLOW", "CMD...").
func isPlaceholder(w string) bool {
	return strings.ToUpper(w) == w
}

// findSub is cmd's subcommand named (or aliased) name, hidden ones too.
func findSub(cmd *cobra.Command, name string) *cobra.Command {
	for _, sub := range cmd.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}

// subNames lists cmd's subcommands for an error message.
func subNames(cmd *cobra.Command) string {
	var names []string
	for _, sub := range cmd.Commands() {
		names = append(names, sub.Name())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// checkFlag checks that w, a flag word ("--name", "--name=v", "-x", "-xy"),
// is a flag of cmd, and reports whether it takes the next word as its
// value.
func checkFlag(cmd *cobra.Command, w string) (bool, error) {
	fs := cmd.Flags()
	// Inherited flags are merged into Flags only when the command runs.
	inherited := cmd.InheritedFlags()
	if name, ok := strings.CutPrefix(w, "--"); ok {
		name, _, _ = strings.Cut(name, "=")
		f := fs.Lookup(name)
		if f == nil {
			f = inherited.Lookup(name)
		}
		if f == nil && name == "help" {
			return false, nil
		}
		if f == nil {
			return false, fmt.Errorf("%q has no flag --%s", cmd.CommandPath(), name)
		}
		return f.NoOptDefVal == "", nil
	}
	short := strings.TrimPrefix(w, "-")
	short, _, _ = strings.Cut(short, "=")
	for i, r := range short {
		f := fs.ShorthandLookup(string(r))
		if f == nil {
			f = inherited.ShorthandLookup(string(r))
		}
		if f == nil && r == 'h' {
			continue
		}
		if f == nil {
			return false, fmt.Errorf("%q has no flag -%c", cmd.CommandPath(), r)
		}
		if f.NoOptDefVal == "" {
			// The rest of the word, if any, is its value.
			return i == len(short)-1 && !strings.Contains(w, "="), nil
		}
	}
	return false, nil
}

// Resolve is the command of root that c names, and the words c gives it
// after its path: for running a documented command.
func Resolve(root *cobra.Command, c Command) *cobra.Command {
	cur := root
	for _, w := range c.Args[1:] {
		sub := findSub(cur, w)
		if sub == nil {
			break
		}
		cur = sub
	}
	return cur
}

// MakeTargets returns the targets the Makefile at path defines.
func MakeTargets(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the Makefile: %w", err)
	}
	defer f.Close()
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:([^=]|$)`)
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := rule.FindStringSubmatch(s.Text()); m != nil {
			for _, t := range strings.Fields(m[1]) {
				targets[t] = true
			}
		}
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read the Makefile: %w", err)
	}
	return targets, nil
}

// CheckMake checks that every target c (a make command) names is one of
// targets.
func CheckMake(targets map[string]bool, c Command) error {
	for i := 1; i < len(c.Args); i++ {
		w := c.Args[i]
		switch {
		case w == "|" || isAssignment(w):
		case w == "-C" || w == "-f":
			return fmt.Errorf("make %s: the check knows only the repository's Makefile", w)
		case strings.HasPrefix(w, "-"):
		default:
			if c.Kind == Prose && !isWord(w) {
				return nil // the end of the command in a sentence
			}
			if !targets[w] {
				return fmt.Errorf("the Makefile has no target %q", w)
			}
			if c.Kind == Prose {
				// In prose, what follows the first target is a sentence's.
				if i+1 < len(c.Args) && c.Args[i+1] != "|" {
					return nil
				}
			}
		}
	}
	return nil
}

// CheckGo checks that every package path ("./x/y", "./x/...") a go test,
// go run, go build or go vet command names is a directory of the
// repository at root holding Go files.
func CheckGo(root string, c Command) error {
	if len(c.Args) < 2 {
		return nil
	}
	switch c.Args[1] {
	case "test", "run", "build", "vet", "install", "generate":
	default:
		return nil
	}
	for _, w := range c.Args[2:] {
		if !strings.HasPrefix(w, "./") {
			continue
		}
		dir := strings.TrimSuffix(strings.TrimSuffix(w, "..."), "/")
		if dir == "." {
			continue
		}
		matches, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*.go"))
		if len(matches) == 0 && !strings.HasSuffix(w, "...") {
			return fmt.Errorf("go %s: %s is no package of the repository (no Go files in %s)", c.Args[1], w, dir)
		}
		if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(dir))); err != nil || !st.IsDir() {
			return fmt.Errorf("go %s: %s is no directory of the repository", c.Args[1], w)
		}
	}
	return nil
}

// Bench is one line of the Makefile's bench target: the benchmarks of a
// package that match a -bench pattern.
type Bench struct {
	// Pkg is the package, as the line names it ("./core/protocol/").
	Pkg string
	// Pattern is the -bench regular expression, make's $$ read as $.
	Pattern string
}

// benchLine is a go test line of the bench target.
var benchLine = regexp.MustCompile(`^\t\$\(GO\) test .*-bench=('[^']*'|\S+) .*?(\./\S+)\s*$`)

// BenchLines returns the lines of the Makefile at path's bench target.
func BenchLines(path string) ([]Bench, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the Makefile: %w", err)
	}
	_, body, ok := strings.Cut(string(b), "\nbench:")
	if !ok {
		return nil, errors.New("the Makefile has no bench target")
	}
	var out []Bench
	for _, line := range strings.Split(body, "\n")[1:] {
		if !strings.HasPrefix(line, "\t") {
			break
		}
		if m := benchLine.FindStringSubmatch(line); m != nil {
			pat := strings.ReplaceAll(strings.Trim(m[1], "'"), "$$", "$")
			out = append(out, Bench{Pkg: m[2], Pattern: pat})
		}
	}
	return out, nil
}

// benchFunc is a benchmark's declaration.
var benchFunc = regexp.MustCompile(`(?m)^func (Benchmark\w*)\(b \*testing\.B\)`)

// Benchmarks returns the names of the benchmarks of b's package (a path
// relative to root) that its pattern selects, as go test -bench does.
func Benchmarks(root string, b Bench) ([]string, error) {
	re, err := regexp.Compile(b.Pattern)
	if err != nil {
		return nil, fmt.Errorf("bench pattern %q of %s: %w", b.Pattern, b.Pkg, err)
	}
	files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(b.Pkg), "*_test.go"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		for _, m := range benchFunc.FindAllStringSubmatch(string(src), -1) {
			if re.MatchString(m[1]) {
				names = append(names, m[1])
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// Link is a relative link of a doc that leads nowhere.
type Link struct {
	// File and Line are where the link is; Target is what it says.
	File   string
	Line   int
	Target string
	// Why says what is missing.
	Why string
}

// String is the link's place, target and what is wrong.
func (l Link) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", l.File, l.Line, l.Target, l.Why)
}

var (
	mdLink  = regexp.MustCompile(`\[(?:[^\][]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	scheme  = regexp.MustCompile(`^[a-z][a-z0-9+.-]*:`)
)

// BrokenLinks checks every relative link of the docs Docs lists, outside
// code blocks: the file or directory it names exists, and a #fragment
// into a Markdown file is one of its headings' anchors, as GitHub makes
// them.
func BrokenLinks(root string) ([]Link, error) {
	files, err := Docs(root)
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := map[string]bool{}
		seen := map[string]int{}
		for _, line := range proseLines(string(b)) {
			if m := heading.FindStringSubmatch(line); m != nil {
				s := slug(m[1])
				if n := seen[s]; n > 0 {
					a[fmt.Sprintf("%s-%d", s, n)] = true
				} else {
					a[s] = true
				}
				seen[s]++
			}
		}
		anchors[path] = a
		return a, nil
	}
	var bad []Link
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		for i, line := range proseLines(string(b)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue
				}
				path, frag, _ := strings.Cut(target, "#")
				dest := filepath.Join(root, filepath.FromSlash(f))
				if path != "" {
					dest = filepath.Join(filepath.Dir(dest), filepath.FromSlash(path))
				}
				st, err := os.Stat(dest)
				if err != nil {
					bad = append(bad, Link{f, i + 1, target, "no such file or directory"})
					continue
				}
				if frag == "" {
					continue
				}
				if st.IsDir() || !strings.HasSuffix(dest, ".md") {
					bad = append(bad, Link{f, i + 1, target, "a #fragment into what is not a Markdown file"})
					continue
				}
				a, err := anchorsOf(dest)
				if err != nil {
					return nil, err
				}
				if !a[frag] {
					bad = append(bad, Link{f, i + 1, target, "no heading of that anchor"})
				}
			}
		}
	}
	return bad, nil
}

// proseLines is text's lines with those of fenced code blocks blanked, so
// that line numbers stay.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
		}
	}
	return lines
}

// slug is the anchor GitHub gives a heading: lower case, the Markdown of
// code and links taken out, every character but letters, digits, '-', '_'
// and spaces dropped, spaces made '-'.
func slug(h string) string {
	h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
