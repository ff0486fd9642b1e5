package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

func stepPlace(ctx context.Context, r workstep.Place, sio stepIO) error {
	for _, name := range []string{r.From, r.ID} {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
			return fmt.Errorf("%q is not a name in a directory", name)
		}
	}
	release, err := lockWorkspace(ctx, r.Root)
	if err != nil {
		return err
	}
	defer release()
	aside, err := claim(filepath.Join(r.Root, "worktrees"), r.Owner, r.From, r.ID)
	if _, ok := errors.AsType[claimRefused](err); ok {
		return &stepExit{workstep.ExitRefused, err.Error()}
	}
	if err != nil {
		return err
	}
	if r.Stamp {
		stamps := filepath.Join(r.Root, ".amelia", "stamps")
		if err := os.MkdirAll(stamps, 0o700); err != nil {
			return fmt.Errorf("keep the stamp: %w", err)
		}
		if err := os.Chmod(stamps, 0o700); err != nil {
			return fmt.Errorf("keep the stamp: %w", err)
		}
		if err := writeFileFrom(filepath.Join(stamps, r.ID), sio.stdin); err != nil {
			return fmt.Errorf("keep the stamp: %w", err)
		}
	}
	if aside >= 0 {
		_, err = fmt.Fprintf(sio.stdout, "aside %d\n", aside)
	}
	return err
}

// writeFileFrom writes what r gives to name (mode 0600) through a
// temporary file beside it, renamed into place once whole.
func writeFileFrom(name string, r io.Reader) error {
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}
