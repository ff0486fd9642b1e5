//go:build !linux

package worker

import (
	"os"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/ptyframe"
)

func openPTY(ptyframe.Size) (ptmx, pts *os.File, err error) { return nil, nil, errNoPTY }

func setSize(*os.File, ptyframe.Size) error { return errNoPTY }
