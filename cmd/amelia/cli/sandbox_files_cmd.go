package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/sandboxfs"
	"github.com/amelia-sandbox/amelia/core/workspace"
)

// filesHelp is what the file commands share in their help.
const filesHelp = `Sandbox paths are relative to the sandbox's workdir, or with --workflow
ID to that workflow's checkout (and written as its uid where runs are
separated); an absolute path must be inside that root. A path that
leaves it, by name or through a symbolic link, is refused. Files move
over the amelia-worker in the sandbox, on every provider, as streams.`

// openFiles opens the profile's sandbox (started if needed, its worker
// put in) and its files, under its workdir or workflow's checkout; close
// ends it.
func (a *app) openFiles(ctx context.Context, workflow string) (*sandboxfs.FS, func(), error) {
	st, err := a.openStack(ctx)
	if err != nil {
		return nil, nil, err
	}
	closeStack := func() { st.Close(context.WithoutCancel(ctx)) }
	err = st.Up(ctx)
	if err == nil {
		err = st.InstallWorker(ctx)
	}
	if err == nil && workflow != "" {
		err = st.OpenWorkspace(workspace.Options{})
	}
	var f *sandboxfs.FS
	if err == nil {
		f, err = sandboxfs.ForStack(ctx, st, workflow)
	}
	if err != nil {
		closeStack()
		return nil, nil, err
	}
	return f, closeStack, nil
}

// sandboxSide is p without its leading ':' and true when p names a
// sandbox path.
func sandboxSide(p string) (string, bool) {
	if rest, ok := strings.CutPrefix(p, ":"); ok {
		if rest == "" {
			rest = "."
		}
		return rest, true
	}
	return p, false
}

func (a *app) sandboxCpCommand() *cobra.Command {
	var workflow string
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file or directory between this host and the profile's sandbox",
		Long: `Copy a file or directory between this host and the profile's sandbox
(started if needed), either way. The sandbox side starts with ':' (":"
alone is the root); the other is a host path. As with docker cp: when DST
is a directory, SRC goes into it under its own name, else SRC becomes DST,
whose directory must exist; a directory onto a file is refused. Permission
bits and modification times are kept, symbolic links inside a directory
are copied as links.

` + filesHelp,
		Example: `  amelia sandbox cp ./src :          # ./src into the workdir, as src
  amelia sandbox cp report.txt :out/notes.txt
  amelia sandbox cp :dist ./build     # the sandbox's dist to ./build
  amelia sandbox cp --workflow ID :coverage.html .`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError{fmt.Errorf("sandbox cp needs SRC and DST, one of them in the sandbox with a leading ':' (amelia sandbox cp ./dir :dest), got %d arguments", len(args))}
			}
			_, in0 := sandboxSide(args[0])
			_, in1 := sandboxSide(args[1])
			if in0 == in1 {
				return usageError{fmt.Errorf("sandbox cp %s %s: exactly one side must be in the sandbox, marked with a leading ':' (amelia sandbox cp ./dir :dest, or amelia sandbox cp :dest ./dir)", args[0], args[1])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f, done, err := a.openFiles(cmd.Context(), workflow)
			if err != nil {
				return err
			}
			defer done()
			if src, in := sandboxSide(args[0]); in {
				_, err = f.CopyOut(cmd.Context(), src, args[1])
			} else {
				dst, _ := sandboxSide(args[1])
				_, err = f.CopyIn(cmd.Context(), src, dst)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&workflow, "workflow", "", "the workflow whose checkout sandbox paths are in")
	return cmd
}

func (a *app) sandboxCatCommand() *cobra.Command {
	var workflow string
	cmd := &cobra.Command{
		Use:   "cat PATH",
		Short: "Print a file of the profile's sandbox",
		Long:  "Print a file of the profile's sandbox (started if needed) to stdout, as it is.\n\n" + filesHelp,
		Args:  exactPath("cat"),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, done, err := a.openFiles(cmd.Context(), workflow)
			if err != nil {
				return err
			}
			defer done()
			rc, _, err := f.ReadFile(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(a.stdout, rc) // the file's bytes, as they are
			return err
		},
	}
	cmd.Flags().StringVar(&workflow, "workflow", "", "the workflow whose checkout PATH is in")
	return cmd
}

func (a *app) sandboxPutCommand() *cobra.Command {
	var (
		workflow string
		mode     string
	)
	cmd := &cobra.Command{
		Use:   "put PATH",
		Short: "Write stdin to a file of the profile's sandbox",
		Long: `Write stdin to the file PATH of the profile's sandbox (started if needed),
made or replaced whole: it appears only once all of stdin is in. Its
directory must exist; a directory at PATH is refused.

` + filesHelp,
		Example: `  echo 'hello' | amelia sandbox put notes/hello.txt
  cat ./tool | amelia sandbox put --mode 0755 bin/tool`,
		Args: exactPath("put"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var perm fs.FileMode
			if mode != "" {
				m, err := strconv.ParseUint(mode, 8, 32)
				if err != nil || m > 0o777 {
					return usageError{fmt.Errorf("--mode %q: give permission bits in octal, like 0644", mode)}
				}
				perm = fs.FileMode(m)
			}
			f, done, err := a.openFiles(cmd.Context(), workflow)
			if err != nil {
				return err
			}
			defer done()
			_, err = f.WriteFile(cmd.Context(), args[0], cmd.InOrStdin(), perm)
			return err
		},
	}
	cmd.Flags().StringVar(&workflow, "workflow", "", "the workflow whose checkout PATH is in")
	cmd.Flags().StringVar(&mode, "mode", "", "permission bits in octal (default: those of the file replaced, else 0644)")
	return cmd
}

// exactPath takes one PATH argument for the file command name.
func exactPath(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{fmt.Errorf("sandbox %s needs one PATH in the sandbox, got %d arguments", name, len(args))}
		}
		return nil
	}
}

// lsFiles lists the sandbox directory p (sandbox ls PATH).
func (a *app) lsFiles(cmd *cobra.Command, p, workflow string, asJSON bool) error {
	f, done, err := a.openFiles(cmd.Context(), workflow)
	if err != nil {
		return err
	}
	defer done()
	entries, err := f.List(cmd.Context(), p)
	if err != nil {
		return err
	}
	return printEntries(cmd.OutOrStdout(), entries, asJSON)
}

// printEntries prints a directory's entries, as ls -l does, or as JSON.
func printEntries(w io.Writer, entries []sandboxfs.Entry, asJSON bool) error {
	if asJSON {
		if entries == nil {
			entries = []sandboxfs.Entry{}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	owners := make([]string, len(entries))
	ownerW, sizeW := 0, 0
	for i, e := range entries {
		owners[i] = fmt.Sprintf("%d:%d", e.UID, e.GID)
		ownerW = max(ownerW, len(owners[i]))
		sizeW = max(sizeW, len(strconv.FormatInt(e.Size, 10)))
	}
	for i, e := range entries {
		name := e.Name
		mode := e.FileMode().String()
		switch e.Type {
		case "dir":
			name += "/"
		case "symlink":
			name += " -> " + e.Target
			mode = "l" + mode[1:] // as ls has it (io/fs writes L)
		}
		if _, err := fmt.Fprintf(w, "%s  %-*s  %*d  %s  %s\n", mode, ownerW, owners[i], sizeW, e.Size, e.MTime.UTC().Format("2006-01-02 15:04"), name); err != nil {
			return err
		}
	}
	return nil
}

// errNoWorkflowPath is ls --workflow without a PATH.
var errNoWorkflowPath = errors.New("sandbox ls --workflow lists files: give a PATH in the checkout (. for its top)")
