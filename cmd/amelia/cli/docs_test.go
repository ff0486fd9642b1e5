package cli

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/amelia-sandbox/amelia/cmd/amelia/builtin/linked"
	"github.com/amelia-sandbox/amelia/internal/doccheck"
)

// docTree is amelia's command tree as it runs, cobra's lazily added parts
// included: a fresh one per command, since a check parses its flags.
func docTree() *cobra.Command {
	var out, errb bytes.Buffer
	root := newApp(strings.NewReader(""), &out, &errb, linked.Providers()).rootCommand()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	root.InitDefaultVersionFlag()
	return root
}

// docCommands are the amelia and amelia-providers commands README.md and
// docs/ show (amelia-providers is the same command line).
func docCommands(t *testing.T) []doccheck.Command {
	t.Helper()
	_, cmds, err := doccheck.ScanRepo("amelia", "amelia-providers")
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) < 50 {
		t.Fatalf("found %d amelia commands in the docs; the scan is broken", len(cmds))
	}
	return cmds
}

// Every amelia command in README.md and docs/ names subcommands and flags
// that exist, and a command line of a shell block gives its command
// arguments it accepts.
func TestDocsCommandsResolve(t *testing.T) {
	for _, c := range docCommands(t) {
		if err := doccheck.CheckCobra(docTree(), c); err != nil {
			t.Errorf("%s\n\t%v", c, err)
		}
	}
}

// runnableInDocs are the documented commands that can run on any machine
// without changing anything but a test's own home: each shell-block line,
// and each code span without placeholders, that is one of them runs as
// written, and must succeed.
var runnableInDocs = []string{
	"amelia", "amelia help", "amelia version", "amelia config show", "amelia config validate",
	"amelia plugin ls", "amelia sandbox ls", "amelia gc",
}

// listsFiles reports whether args are `amelia sandbox ls PATH`, which
// lists a directory of the sandbox rather than the sandboxes.
func listsFiles(args []string) bool {
	i := slices.Index(args, "ls")
	if i < 2 || args[i-1] != "sandbox" {
		return false
	}
	return slices.ContainsFunc(args[i+1:], func(a string) bool { return !strings.HasPrefix(a, "-") })
}

// literal reports whether a command of a code span is one to run as it is:
// no placeholder (WORKFLOW) and no alternatives (a | b).
func literal(c doccheck.Command) bool {
	for _, w := range c.Args {
		if w == "|" || strings.ToUpper(w) == w && strings.ToLower(w) != w {
			return false
		}
	}
	return true
}

// The documented commands that can run here run, as the docs write them,
// and succeed.
func TestDocsCommandsRun(t *testing.T) {
	// Each command once, with every place that shows it.
	var order []string
	places := map[string][]string{}
	args := map[string][]string{}
	for _, c := range docCommands(t) {
		if c.Program() != "amelia" || c.Kind == doccheck.Prose && !literal(c) {
			continue
		}
		cmd := doccheck.Resolve(docTree(), c)
		help := slices.Contains(c.Args, "--help") || slices.Contains(c.Args, "-h")
		if !help && !slices.Contains(runnableInDocs, cmd.CommandPath()) {
			continue
		}
		if !help && listsFiles(c.Args) {
			continue // a sandbox directory: the worker is not built here (cmd/amelia's files tests run these)
		}
		line := strings.Join(c.Args, " ")
		if _, ok := args[line]; !ok {
			order = append(order, line)
			args[line] = c.Args[1:]
		}
		places[line] = append(places[line], fmt.Sprintf("%s:%d", c.File, c.Line))
	}
	for _, line := range order {
		t.Run(line, func(t *testing.T) {
			newEnv(t)
			r := amelia(t, "", args[line]...)
			if r.code != 0 {
				t.Errorf("%s (%s)\n\texit %d, stderr:\n%s", line, strings.Join(places[line], ", "), r.code, r.stderr)
			}
		})
	}
	t.Logf("ran %d documented commands", len(order))
	// The commands the docs should show, run as a user would.
	for _, args := range [][]string{{"--help"}, {"version"}, {"config", "show"}, {"sandbox", "ls"}} {
		t.Run("amelia "+strings.Join(args, " "), func(t *testing.T) {
			newEnv(t)
			if r := amelia(t, "", args...); r.code != 0 {
				t.Errorf("amelia %s: exit %d, stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
			}
		})
	}
}

// The examples in amelia's own help are commands that resolve too.
func TestHelpExamplesResolve(t *testing.T) {
	n := 0
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for i, line := range strings.Split(cmd.Example, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "amelia ") {
				continue
			}
			for _, c := range doccheck.ScanMarkdown(cmd.CommandPath()+" --help", "```sh\n"+line+"\n```\n") {
				c.Line = i + 1
				n++
				if err := doccheck.CheckCobra(docTree(), c); err != nil {
					t.Errorf("the example of %s\n\t%v", c, err)
				}
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(docTree())
	if n < 10 {
		t.Errorf("found %d examples in amelia's help; the walk is broken", n)
	}
}

// docs/commands.md, which says it has every command and flag, has them:
// each command that is not hidden or a group, and each of its flags, in a
// code span of the command's (completion's are cobra's own).
func TestDocsNameEveryCommandAndFlag(t *testing.T) {
	var shown []doccheck.Command
	for _, c := range docCommands(t) {
		if c.File == "docs/commands.md" {
			shown = append(shown, c)
		}
	}
	const file = "docs/commands.md"
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Hidden || cmd.Name() == "help" || cmd.Name() == "completion" {
			return
		}
		if cmd.HasSubCommands() && cmd.HasParent() {
			// A group: its commands are shown, not it.
			for _, sub := range cmd.Commands() {
				walk(sub)
			}
			return
		}
		// The spans that show this command.
		var mine []doccheck.Command
		for _, c := range shown {
			if doccheck.Resolve(docTree(), c).CommandPath() == cmd.CommandPath() {
				mine = append(mine, c)
			}
		}
		if len(mine) == 0 && cmd.HasParent() {
			t.Errorf("%s shows no command %q (%s)", file, cmd.CommandPath(), cmd.Short)
		}
		cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if f.Hidden || f.Name == "help" || f.Name == "version" {
				return
			}
			named := slices.ContainsFunc(mine, func(c doccheck.Command) bool {
				return slices.ContainsFunc(c.Args, func(w string) bool {
					return w == "--"+f.Name || strings.HasPrefix(w, "--"+f.Name+"=") || f.Shorthand != "" && w == "-"+f.Shorthand
				})
			})
			if !named && len(mine) > 0 {
				t.Errorf("%s: no span of %q names its flag --%s (%s)", file, cmd.CommandPath(), f.Name, f.Usage)
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(docTree())
}
