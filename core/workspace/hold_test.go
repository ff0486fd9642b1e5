package workspace

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// One run holds the workspace; a second is refused at once, told who holds
// it, and gets it once the first lets go — with flock(1) and with the
// worker's flock alike. A holder whose context is cancelled keeps it until
// it releases.
func TestHold(t *testing.T) {
	for _, mode := range []string{"flock", "worker"} {
		t.Run(mode, func(t *testing.T) {
			_, ws := newSandbox(t)
			ws.lockWith = mode
			ctx, cancel := context.WithCancel(t.Context())
			release, err := ws.Hold(ctx, "workflow first (host h, pid 1)")
			if err != nil {
				t.Fatal(err)
			}
			cancel() // an interrupted run still holds it through its cleanups
			_, err = ws.Hold(t.Context(), "workflow second")
			if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "workflow first (host h, pid 1)") {
				t.Fatalf("a second Hold = %v, want ErrBusy naming the first", err)
			}
			if err := release(t.Context()); err != nil {
				t.Fatalf("release: %v", err)
			}
			again, err := ws.Hold(t.Context(), "workflow second")
			if err != nil {
				t.Fatalf("Hold after the release: %v", err)
			}
			if err := again(t.Context()); err != nil {
				t.Fatalf("release: %v", err)
			}
		})
	}
}
