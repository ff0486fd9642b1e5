package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
)

// ErrBusy: another run holds the workspace (see Hold).
var ErrBusy = errors.New("the sandbox is in use by another run")

// holdScript takes ROOT/.amelia-run.lock without waiting, writes the
// holder's description ($1) beside it, says "held", and keeps the lock
// until its stdin ends. When the lock is taken it prints the holder's
// description and exits exitRefused. The lock belongs to the open fd 8,
// so however the script ends — stdin closed, the exec killed, the
// provider gone — the lock goes with it.
const holdScript = `owner=$1 busy=
exec 8>>"$root/.amelia-run.lock"
if [ "$lockwith" = flock ] && command -v flock >/dev/null 2>&1; then
	flock -n -x 8 || busy=1
elif [ -n "$worker" ]; then
	"$worker" flock -n 8 2>/dev/null || busy=1
else
	echo "cannot lock $root: the sandbox has no flock(1) (install util-linux) and amelia did not give the worker's path" >&2
	exit 1
fi
if [ -n "$busy" ]; then
	cat "$root/.amelia-run.owner" >&2 2>/dev/null || echo "a run that did not say which" >&2
	exit 3
fi
printf '%s\n' "$owner" >"$root/.amelia-run.owner"
echo held
cat >/dev/null
`

// Hold makes this run the only one in the workspace until release is
// called: for sandboxes whose runs are not separated from each other,
// where a second run could read the first one's token and write its
// worktree. owner describes this run to one that finds the workspace
// held (ErrBusy, with that run's description). The hold outlives ctx's
// cancellation, so the cleanups of an interrupted run still hold it;
// release ends it, within its own ctx.
func (w *Workspace) Hold(ctx context.Context, owner string) (release func(context.Context) error, err error) {
	h, err := sandboxexec.Hold(ctx, "held\n", func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
		return w.script(ctx, "hold the sandbox", nil, stdin, stdout, holdScript, owner)
	})
	if msg, ok := refused(err); ok {
		return nil, fmt.Errorf("%w (%s)", ErrBusy, msg)
	}
	if err != nil {
		return nil, err // w.script says what it was doing
	}
	return func(ctx context.Context) error {
		if err := h.Release(ctx); err != nil {
			return fmt.Errorf("release the sandbox: %w", err)
		}
		return nil
	}, nil
}
