package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/core/runview/runviewtest"
)

// While a run is drawn live, the log goes above the live line, each
// record on lines of its own (with --debug too); once detached, to
// stderr.
func TestLogOutputGoesAboveTheLiveLine(t *testing.T) {
	for _, debug := range []bool{false, true} {
		var screen, stderr bytes.Buffer
		view := runview.NewTTY(&screen, runview.TTYOptions{Width: 200, NoColor: true, Tick: -1})
		out := &logOutput{w: &stderr, live: view}
		log := newLogger(out, debug)
		view.PhaseStart("sandbox")
		log.Warn("provider local isolates nothing")
		view.PhaseEnd("sandbox", 0, nil)
		out.detach()
		log.Warn("after the view")
		if err := view.Close(); err != nil {
			t.Fatal(err)
		}
		lines, err := runviewtest.Screen(screen.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) != 2 || !strings.Contains(lines[0], "provider local isolates nothing") || strings.HasPrefix(lines[0], "⠋") || lines[1] != "✓ sandbox 0ms" {
			t.Errorf("debug %v: screen %q, want the warning on a line of its own, then the phase", debug, lines)
		}
		if !strings.Contains(stderr.String(), "after the view") || strings.Contains(stderr.String(), "isolates nothing") {
			t.Errorf("debug %v: stderr %q, want only what was logged after the view", debug, stderr.String())
		}
	}
}
