//go:build unix

package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// terminal is the host terminal a shell in the sandbox runs on: amelia's
// stdin.
type terminal struct{ fd int }

// openTerminal is stdin as a terminal, or an error saying it is not one.
func openTerminal(stdin io.Reader) (*terminal, error) {
	f, ok := stdin.(interface{ Fd() uintptr })
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil, errors.New("stdin is not a terminal, and an interactive shell needs one")
	}
	return &terminal{fd: int(f.Fd())}, nil
}

// size is the terminal's size now.
func (t *terminal) size() sdk.TermSize {
	cols, rows, err := term.GetSize(t.fd)
	if err != nil || cols <= 0 || rows <= 0 {
		return sdk.TermSize{Rows: 24, Cols: 80}
	}
	return sdk.TermSize{Rows: uint32(rows), Cols: uint32(cols)}
}

// run puts the terminal in raw mode (so every key, Ctrl-C included, goes
// to the shell), runs exec with its size and its changes (SIGWINCH), and
// restores the terminal however exec ends.
func (t *terminal) run(ctx context.Context, exec func(sdk.TermSize, <-chan sdk.TermSize) (sdk.ExitStatus, error)) (sdk.ExitStatus, error) {
	old, err := term.MakeRaw(t.fd)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	defer term.Restore(t.fd, old)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)
	resize := make(chan sdk.TermSize, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
			}
			size := t.size()
			select { // only the latest size matters
			case <-resize:
			default:
			}
			resize <- size
		}
	}()
	return exec(t.size(), resize)
}
