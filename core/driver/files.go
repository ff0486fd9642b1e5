package driver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// FilePrefix starts the name of the directory inside the sandbox that
// holds one call's files (its prompt, schema, instructions) while its
// worker runs: FilePrefix + "<mode>-<workflow>-<random>", made mode 0700
// with the files 0600 in it, and removed whole when the call ends, so no
// two calls share a file — not two runs of one workflow id from different
// profiles or hosts on a shared machine, nor a run and its own retry — and
// nothing is left behind, not even an empty directory.
const FilePrefix = "/tmp/amelia-"

// callDir is the directory of one call's files: the mode, the workflow,
// and a random part.
func callDir(mode, workflow string) string {
	return FilePrefix + mode + "-" + workflow + "-" + randomHex(8)
}

// sandboxFile is a file the worker reads, written for one call.
type sandboxFile struct {
	what string // for errors: "prompt", "schema"...
	path string // absolute, in its call's directory
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

// withFiles writes files into dir, the call's own directory (callDir),
// runs fn, and removes the directory whatever happened — also when ctx is
// done, with a context of its own. A failure to remove it is the error
// when fn succeeded, else it is logged.
func (d *Driver) withFiles(ctx context.Context, dir string, files []sandboxFile, fn func() error) (err error) {
	defer func() {
		if rmErr := d.removeDir(ctx, dir); rmErr != nil {
			if err == nil {
				err = rmErr
			} else {
				d.logger().Warn("prompt files left in the sandbox", "dir", dir, "err", rmErr)
			}
		}
	}()
	for _, f := range files {
		if err := d.writeFile(ctx, dir, f); err != nil {
			return err
		}
	}
	return fn()
}

// stepper is an Execer that has amelia-worker serve its typed requests,
// on a session it keeps (execsession.Sessions).
type stepper interface {
	Step(ctx context.Context, user string, r workstep.Request, eio sdk.ExecIO) (sdk.ExitStatus, error)
}

// writeFile writes f, a file in dir, through the exec's stdin, so its
// content is never on a command line. On a session of amelia-worker's
// (stepper) the worker writes it itself (workstep.WriteFile, the same
// rules as writeScript): no shell, no tools, no process. Elsewhere the
// worker may be another implementation of the protocol, which serves no
// steps, and the shell writes it.
func (d *Driver) writeFile(ctx context.Context, dir string, f sandboxFile) error {
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	var stderr execreport.Stderr
	eio := sdk.ExecIO{Stdin: strings.NewReader(f.data), Stderr: &stderr}
	var st sdk.ExitStatus
	var err error
	if s, ok := d.Exec.(stepper); ok {
		st, err = s.Step(ctx, "", workstep.WriteFile{Dir: dir, Path: f.path}, eio)
	} else {
		st, err = d.Exec.Exec(ctx, sdk.ExecRequest{Argv: []string{"sh", "-c", writeScript, "sh", dir, f.path}}, eio)
	}
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

// removeDir removes a call's directory (callDir) inside the sandbox with
// what is in it, even when ctx is done.
func (d *Driver) removeDir(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	var stderr execreport.Stderr
	req := sdk.ExecRequest{Argv: []string{"rm", "-rf", "--", dir}}
	st, err := d.Exec.Exec(ctx, req, sdk.ExecIO{Stderr: &stderr})
	if err != nil {
		return fmt.Errorf("remove %s on %s: %w", dir, d.provider(), err)
	}
	if st.Code != 0 {
		return fmt.Errorf("remove %s on %s: %s%s", dir, d.provider(), execreport.Status(st), stderr.Note())
	}
	return nil
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}
