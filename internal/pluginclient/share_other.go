//go:build !linux

package pluginclient

import (
	"fmt"
	"os/exec"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Share: plugins are shared on Linux only (a peer's uid comes from
// SO_PEERCRED); elsewhere every host Launches its own.
func Share(_ *exec.Cmd, opts ShareOptions) (*Plugin, error) {
	return nil, fmt.Errorf("share provider plugin %q: %w on this system", opts.Name, ErrNotShareable)
}

// sharedLink is a host's connection to a shared plugin, which there never
// is here.
type sharedLink struct{ pid int }

func (*sharedLink) lost() bool { return true }

func (*sharedLink) end() {}

func (*sharedLink) explain(name string) error {
	return sdk.Errorf(sdk.ErrUnavailable, "provider plugin %q stopped unexpectedly", name)
}
