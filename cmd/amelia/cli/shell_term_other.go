//go:build !unix

package cli

import (
	"context"
	"errors"
	"io"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

type terminal struct{}

// openTerminal refuses: the shell's terminal handling is Unix's.
func openTerminal(io.Reader) (*terminal, error) {
	return nil, errors.New("an interactive shell needs a Unix terminal")
}

func (*terminal) run(context.Context, func(sdk.TermSize, <-chan sdk.TermSize) (sdk.ExitStatus, error)) (sdk.ExitStatus, error) {
	return sdk.ExitStatus{}, errors.New("an interactive shell needs a Unix terminal")
}
