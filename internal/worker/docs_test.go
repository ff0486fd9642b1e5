package worker

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/internal/doccheck"
)

// docTree is the worker's command tree: a fresh one per command, since a
// check parses its flags.
func docTree() *cobra.Command {
	w := &worker{
		p:   Process{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }},
		log: slog.New(slog.DiscardHandler),
	}
	root := w.commands()
	root.InitDefaultHelpCmd()
	return root
}

// workerTableRow is a row of docs/worker.md's table of subcommands: its
// first cell's code spans.
var workerTableRow = regexp.MustCompile("(?m)^\\| (`[^|]*(?:\\\\\\|[^|]*)*) \\|")

// Every amelia-worker command README.md and docs/ show names subcommands
// and flags the worker has, and docs/worker.md's table of subcommands has
// a row for each subcommand that is not hidden, whose usage is right.
func TestDocsWorkerCommands(t *testing.T) {
	root, cmds, err := doccheck.ScanRepo("amelia-worker")
	if err != nil {
		t.Fatal(err)
	}

	// The table's rows are usage lines without the program's name.
	const file = "docs/worker.md"
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for i, line := range strings.Split(string(b), "\n") {
		m := workerTableRow.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(m[1], "`amelia") {
			continue
		}
		for _, span := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
			c := doccheck.ScanMarkdown(file, "`amelia-worker "+span[1]+"`")
			if len(c) != 1 {
				t.Errorf("%s:%d: %q is no usage line", file, i+1, span[1])
				continue
			}
			c[0].Line = i + 1
			cmds = append(cmds, c[0])
			documented[strings.Fields(span[1])[0]] = true
		}
	}
	if len(cmds) < 20 {
		t.Fatalf("found %d amelia-worker commands in the docs; the scan is broken", len(cmds))
	}
	for _, c := range cmds {
		if err := doccheck.CheckCobra(docTree(), c); err != nil {
			t.Errorf("%s\n\t%v", c, err)
		}
	}
	for _, sub := range docTree().Commands() {
		if !sub.Hidden && sub.Name() != "help" && !documented[sub.Name()] {
			t.Errorf("%s: the table of subcommands has no row for %s (%s)", file, sub.Name(), sub.Short)
		}
	}
}
