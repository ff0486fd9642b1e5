//go:build !linux

package worker

import (
	"errors"
	"os"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/ptyframe"
)

func openPTY(ptyframe.Size) (ptmx, pts *os.File, err error) { return nil, nil, errNoPTY }

func setSize(*os.File, ptyframe.Size) error { return errNoPTY }

// errNoPTY: the worker opens terminals on Linux only.
var errNoPTY = errors.New("no terminals here: amelia-worker opens them on Linux only")
