package runstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/moby/sys/atomicwriter"
)

// Exports are the bundles amelia gc writes on this host: the kept work of
// runs it removed from their sandboxes, one git bundle per run,
// DIR/<profile>/<workflow>.bundle, mode 0600 in a 0700 directory, written
// whole through a rename. The run's record (State Exported) names its
// bundle; `amelia results` brings the branch back from it and only then
// removes it. Nothing else removes an export.
type Exports struct{ dir string }

// NewExports is the exports in dir (created when the first is written).
func NewExports(dir string) *Exports { return &Exports{dir: dir} }

// Path is where the export of workflow in profile goes.
func (e *Exports) Path(profile, workflow string) (string, error) {
	return namedPath("export", e.dir, profile, workflow, ".bundle", true)
}

// Write puts data, the bundle of workflow's branch, in place, replacing
// any export of the workflow before it, and returns its path.
func (e *Exports) Write(profile, workflow string, data []byte) (string, error) {
	p, err := e.Path(profile, workflow)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fmt.Errorf("export the work of %s: %w", workflow, err)
	}
	if err := atomicwriter.WriteFile(p, data, 0o600); err != nil {
		return "", fmt.Errorf("export the work of %s: %w", workflow, err)
	}
	return p, nil
}

// Read reads the export at p, which must be one of these exports' files
// (a record naming anything else is refused).
func (e *Exports) Read(p string) ([]byte, error) {
	if err := e.own(p); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read the exported work %s: %w", p, err)
	}
	return b, nil
}

// Remove removes the export at p; a missing one is fine.
func (e *Exports) Remove(p string) error {
	if err := e.own(p); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the exported work %s: %w", p, err)
	}
	return nil
}

// own refuses a path that is not an export's: DIR/<profile>/<name>.bundle.
func (e *Exports) own(p string) error {
	rel, err := filepath.Rel(e.dir, p)
	profile, file := filepath.Split(rel)
	if err != nil || !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("%q is not an export of this host's (in %s)", p, e.dir)
	}
	wf, ok := cutBundle(file)
	if want, err := e.Path(filepath.Clean(profile), wf); !ok || err != nil || want != p {
		return fmt.Errorf("%q is not an export of this host's (in %s)", p, e.dir)
	}
	return nil
}

func cutBundle(name string) (string, bool) {
	const ext = ".bundle"
	if len(name) <= len(ext) || name[len(name)-len(ext):] != ext {
		return "", false
	}
	return name[:len(name)-len(ext)], true
}
