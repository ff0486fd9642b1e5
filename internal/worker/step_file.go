package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

func stepWriteFile(_ context.Context, r workstep.WriteFile, sio stepIO) error {
	if !filepath.IsAbs(r.Dir) || filepath.Clean(r.Dir) != r.Dir || filepath.Dir(r.Path) != r.Dir || filepath.Base(r.Path) == "." {
		return fmt.Errorf("%q is not a file directly in the directory %q", r.Path, r.Dir)
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(r.Dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", r.Dir)
	}
	// Fails where another user owns it: then it is not this run's.
	if err := os.Chmod(r.Dir, 0o700); err != nil {
		return err
	}
	if err := os.Remove(r.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(r.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, sio.stdin); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", r.Path, err)
	}
	return f.Close()
}
