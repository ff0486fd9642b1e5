package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// FileDir is the directory inside the sandbox that holds prompt files while
// a worker runs. It is made mode 0700 and the files 0600.
const FileDir = "/tmp/amelia"

// callFiles is the stem of one call's files in FileDir: the mode, the
// workflow, and a random part, so that no two calls share a file — not two
// runs of one workflow id from different profiles or hosts on a shared
// machine, nor a run and its own retry.
func callFiles(mode, workflow string) string {
	return FileDir + "/" + mode + "-" + workflow + "-" + randomHex(8)
}

// sandboxFile is a file the worker reads, written for one call.
type sandboxFile struct {
	what string // for errors: "prompt", "schema"...
	path string // absolute, under FileDir
	data string
}

// writeScript writes stdin to $2 in the directory $1, both private to the
// user: umask 077 for the file, 0700 for the directory (chmod fails, and
// so the write, when someone else owns it). The file is removed first so
// a leftover with a wider mode is not reused. Data never reaches the
// script's text: it comes as positional parameters and stdin.
const writeScript = `set -eu
umask 077
mkdir -p -m 700 -- "$1"
if [ -L "$1" ] || [ ! -d "$1" ]; then echo "$1 is not a directory" >&2; exit 1; fi
chmod 700 -- "$1"
rm -f -- "$2"
cat > "$2"`

// withFiles writes files into the sandbox, runs fn, and removes the files
// whatever happened — also when ctx is done, with a context of its own. A
// failure to remove them is the error when fn succeeded, else it is logged.
func (d *Driver) withFiles(ctx context.Context, files []sandboxFile, fn func() error) (err error) {
	defer func() {
		paths := make([]string, len(files))
		for i, f := range files {
			paths[i] = f.path
		}
		if rmErr := d.removeFiles(ctx, paths); rmErr != nil {
			if err == nil {
				err = rmErr
			} else {
				d.logger().Warn("prompt files left in the sandbox", "paths", paths, "err", rmErr)
			}
		}
	}()
	for _, f := range files {
		if err := d.writeFile(ctx, FileDir, f); err != nil {
			return err
		}
	}
	return fn()
}

// writeFile writes f, a file in dir, through the exec's stdin, so its
// content is never on a command line.
func (d *Driver) writeFile(ctx context.Context, dir string, f sandboxFile) error {
	var stderr execreport.Stderr
	req := sdk.ExecRequest{
		Argv:    []string{"sh", "-c", writeScript, "sh", dir, f.path},
		Timeout: fileTimeout,
	}
	st, err := d.Exec.Exec(ctx, req, sdk.ExecIO{Stdin: strings.NewReader(f.data), Stderr: &stderr})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("write the %s file %s: %w", f.what, f.path, ctxErr)
		}
		return fmt.Errorf("write the %s file %s on %s: %w", f.what, f.path, d.provider(), err)
	}
	if st.Code != 0 {
		return fmt.Errorf("write the %s file %s on %s: %s%s", f.what, f.path, d.provider(), execreport.Status(st), stderr.Note())
	}
	return nil
}

// removeFiles removes paths inside the sandbox, even when ctx is done.
func (d *Driver) removeFiles(ctx context.Context, paths []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var stderr execreport.Stderr
	req := sdk.ExecRequest{Argv: append([]string{"rm", "-f", "--"}, paths...)}
	st, err := d.Exec.Exec(ctx, req, sdk.ExecIO{Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("remove %s on %s: %w", strings.Join(paths, " "), d.provider(), err)
	}
	if st.Code != 0 {
		return fmt.Errorf("remove %s on %s: %s%s", strings.Join(paths, " "), d.provider(), execreport.Status(st), stderr.Note())
	}
	return nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
