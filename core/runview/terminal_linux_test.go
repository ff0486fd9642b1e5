package runview

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/core/runview/runviewtest"
)

// TestTerminal: a terminal is recognised with its width, followed when it
// changes, and New picks the live display for it unless asked for JSON.
func TestTerminal(t *testing.T) {
	_, pts := runviewtest.OpenPTY(t, 77)
	if w, ok := terminalWidth(pts); !ok || w != 77 {
		t.Fatalf("terminalWidth(pty) = %d, %v; want 77, true", w, ok)
	}
	if _, ok := terminalWidth(os.NewFile(^uintptr(0), "bad")); ok {
		t.Error("terminalWidth of a bad file reports a terminal")
	}
	if _, ok := terminalWidth(&bytes.Buffer{}); ok {
		t.Error("terminalWidth of a buffer reports a terminal")
	}

	v := New(pts, false)
	tv, ok := v.(*ttyView)
	if !ok {
		t.Fatalf("New(pty, false) = %T, want the TTY view", v)
	}
	if got := tv.cols(); got != 76 {
		t.Errorf("cols() = %d, want 76", got)
	}
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 100, Row: 24}); err != nil {
		t.Fatal(err)
	}
	if got := tv.cols(); got != 99 {
		t.Errorf("cols() after a resize = %d, want 99", got)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NO_COLOR", "1")
	v = New(pts, false)
	if !v.(*ttyView).opts.NoColor {
		t.Error("NO_COLOR set, but the view has colour")
	}
	v.Close()
	if v := New(pts, true); func() bool { _, ok := v.(*jsonView); return !ok }() {
		t.Errorf("New(pty, true) = %T, want the JSON view", v)
	}
}
