//go:build unix

package runview

import (
	"io"

	"golang.org/x/sys/unix"
)

// terminalWidth returns the column count of the terminal w writes to, and
// false if w is not a terminal. Asking for the window size answers both
// questions with one system call, on every Unix, without golang.org/x/term.
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	return int(ws.Col), true
}
