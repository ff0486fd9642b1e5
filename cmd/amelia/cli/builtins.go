package cli

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/amelia-sandbox/amelia/core/buildinfo"
	"github.com/amelia-sandbox/amelia/core/pluginhost"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/workerbin"
)

// The providers amelia serves itself (`amelia plugin serve NAME`), from
// the table main hands to Run; the plugin host takes their names, aliases
// and environments from the same table.

// builtinProvider builds the built-in provider called name, whose logs go
// to logger.
func (a *app) builtinProvider(name string, logger *slog.Logger) (sdk.Provider, bool) {
	for _, b := range a.builtins {
		if b.Name == name {
			return b.New(pluginhost.BuiltinDeps{
				Version:    buildinfo.Version(),
				StateDir:   filepath.Join(a.stateDir(), "amelia", name),
				WorkerDirs: workerbin.Dirs(a.getenv("AMELIA_WORKER_DIR"), a.self),
				Getenv:     a.getenv,
				Environ:    a.environ,
				Logger:     logger,
			}), true
		}
	}
	return nil, false
}

// imageBuilder is a built-in provider that builds a sandbox image ahead of
// its sandboxes (`amelia image build`): the docker provider.
type imageBuilder interface {
	BuildImage(ctx context.Context, settings []byte, noCache bool, progress io.Writer) (string, error)
}
