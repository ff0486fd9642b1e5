//go:build unix && !linux

package tools

import (
	"errors"
	"syscall"
)

// sysProcAttr puts the command in a process group of its own. There is no
// parent-death signal outside Linux.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// waitExited is not available: the command is reaped before its group is
// killed, which leaves a small window for its pid to be reused.
func waitExited(int) error {
	return errors.ErrUnsupported
}
