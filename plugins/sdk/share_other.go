//go:build !linux

package sdk

import (
	"fmt"
	"os"
	"os/exec"
)

// Share: plugins are shared on Linux only (a peer's uid comes from
// SO_PEERCRED); elsewhere every host Launches its own.
func Share(_ *exec.Cmd, opts ShareOptions) (*Plugin, error) {
	return nil, fmt.Errorf("share provider plugin %q: %w on this system", opts.Name, ErrNotShareable)
}

// serveShared is never reached: Share starts no plugin here.
func serveShared(*Server, serveConfig, *os.File, sharedConfig) error {
	return fmt.Errorf("%w on this system", ErrNotShareable)
}

// sharedLink is a host's connection to a shared plugin, which there never
// is here.
type sharedLink struct{ pid int }

func (*sharedLink) lost() bool { return true }

func (*sharedLink) end() {}

func (*sharedLink) explain(name string) error {
	return &kindError{msg: fmt.Sprintf("provider plugin %q stopped unexpectedly", name), kind: ErrUnavailable}
}
