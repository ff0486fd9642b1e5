package workspace

import (
	"context"
	"path"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

// StageDir makes ROOT/.amelia/stage, 1733 as .amelia/parked is, as the
// sandbox's user, and returns its path: core/sandboxfs stages big files
// there, in directories of their uid's own, for a provider that copies
// archives itself. A uid may make an entry in it; none may list it or
// touch another's.
func (w *Workspace) StageDir(ctx context.Context) (string, error) {
	if err := w.step(ctx, "", "make the staging directory", workstep.SharedDirs{Root: w.root, Dirs: []string{".amelia/stage"}}, nil, nil); err != nil {
		return "", err
	}
	return path.Join(w.root, ".amelia", "stage"), nil
}
