package cli

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/core/runview/runviewtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The shell's terminal: raw while the exec runs, with the terminal's size
// and its changes (SIGWINCH), and restored however the exec ends.
func TestTerminalRawResizedRestored(t *testing.T) {
	for _, ending := range []struct {
		name string
		err  error
	}{{"exit", nil}, {"error", errors.New("the connection dropped")}} {
		t.Run(ending.name, func(t *testing.T) {
			_, pts := runviewtest.OpenPTY(t, 100)
			before, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatal(err)
			}
			if before.Lflag&(unix.ICANON|unix.ECHO) == 0 {
				t.Fatal("a new terminal is not in canonical mode with echo")
			}
			term, err := openTerminal(pts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = term.run(t.Context(), func(size sdk.TermSize, resize <-chan sdk.TermSize) (sdk.ExitStatus, error) {
				if size != (sdk.TermSize{Rows: 24, Cols: 100}) {
					t.Errorf("the exec's size: %+v, want the terminal's 24x100", size)
				}
				raw, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
				if err != nil {
					t.Fatal(err)
				}
				if raw.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
					t.Errorf("the terminal is not raw while the shell runs: lflag %#x", raw.Lflag)
				}
				if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 41, Col: 133}); err != nil {
					t.Fatal(err)
				}
				// The window's change, as the terminal's process group
				// would get it.
				syscall.Kill(os.Getpid(), syscall.SIGWINCH)
				select {
				case got := <-resize:
					if got != (sdk.TermSize{Rows: 41, Cols: 133}) {
						t.Errorf("resized to %+v, want 41x133", got)
					}
				case <-t.Context().Done():
					t.Fatal("no resize after SIGWINCH")
				}
				return sdk.ExitStatus{Code: 3}, ending.err
			})
			if !errors.Is(err, ending.err) {
				t.Errorf("run: %v, want %v", err, ending.err)
			}
			after, err := unix.IoctlGetTermios(int(pts.Fd()), unix.TCGETS)
			if err != nil {
				t.Fatal(err)
			}
			if *after != *before {
				t.Errorf("the terminal is not restored after the shell's %s: lflag %#x, was %#x", ending.name, after.Lflag, before.Lflag)
			}
		})
	}
}

// Not a terminal: refused, saying so.
func TestOpenTerminalRefusesAPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := openTerminal(r); err == nil || !strings.Contains(err.Error(), "stdin is not a terminal") {
		t.Errorf("openTerminal(a pipe): %v, want a refusal", err)
	}
	if _, err := openTerminal(strings.NewReader("")); err == nil {
		t.Error("openTerminal(a reader) succeeded")
	}
}
