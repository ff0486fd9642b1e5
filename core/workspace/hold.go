package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
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
	stdinR, stdinW := io.Pipe()
	held := &signalOn{want: []byte("held\n"), ch: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		done <- w.script(context.WithoutCancel(ctx), "hold the sandbox", nil, stdinR, held, holdScript, owner)
	}()
	select {
	case <-held.ch:
	case err := <-done:
		stdinW.Close()
		if msg, ok := refused(err); ok {
			return nil, fmt.Errorf("%w (%s)", ErrBusy, msg)
		}
		return nil, err
	case <-ctx.Done():
		stdinW.Close()
		<-done
		return nil, ctx.Err()
	}
	return func(ctx context.Context) error {
		stdinW.Close()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return fmt.Errorf("release the sandbox: %w", ctx.Err())
		}
	}, nil
}

// signalOn closes ch once what was written holds want.
type signalOn struct {
	mu   sync.Mutex
	want []byte
	seen []byte
	ch   chan struct{}
	done bool
}

func (s *signalOn) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.seen = append(s.seen, p...)
		if bytes.Contains(s.seen, s.want) {
			s.done = true
			close(s.ch)
		}
	}
	return len(p), nil
}
