package worker

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/amelia-sandbox/amelia/core/workstep"
)

func stepRetire(ctx context.Context, r workstep.Retire, sio stepIO) error {
	if !strings.HasPrefix(r.Trash, ".trash-") || strings.ContainsAny(r.Trash, "/\x00") {
		return fmt.Errorf("%q is not a trash entry's name", r.Trash)
	}
	release, err := lockWorkspace(ctx, r.Root)
	if err != nil {
		return err
	}
	defer release()
	dot := filepath.Join(r.Root, ".amelia")
	pk, trashd := filepath.Join(dot, "parked"), filepath.Join(dot, "trash")
	if err := shared(r.Root, ".amelia/parked"); err != nil {
		return err
	}
	if err := os.MkdirAll(trashd, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(trashd, 0o755); err != nil {
		return err
	}
	entry := filepath.Join(pk, r.Trash)
	// into moves p into the trash entry as name, making the entry first.
	into := func(p, name string) error {
		if err := os.Mkdir(entry, 0o700); err != nil && !os.IsExist(err) {
			return err
		}
		return os.Rename(p, filepath.Join(entry, name))
	}
	if r.RunDir != "" && mine(r.RunDir) {
		if err := os.Chmod(r.RunDir, 0o700); err != nil {
			return fmt.Errorf("remove the run directory: %w", err)
		}
		if !removeFew(r.RunDir) {
			if err := into(r.RunDir, "run"); err != nil {
				return fmt.Errorf("move the run directory into the trash: %w", err)
			}
		}
	}
	if fi, err := os.Lstat(filepath.Join(r.Checkout, ".git")); err == nil && fi.Mode().IsRegular() {
		_, err := io.WriteString(sio.stdout, "legacy\n")
		return err
	}
	if mine(r.Checkout) {
		if err := os.Chmod(r.Checkout, 0o700); err != nil {
			return fmt.Errorf("put the checkout away: %w", err)
		}
		if err := into(r.Checkout, "checkout"); err != nil {
			return fmt.Errorf("put the checkout away: %w", err)
		}
	}
	if err := dropRef(ctx, sio, r.Repo, r.DirtyRef); err != nil {
		return err
	}
	// The record keeps what is still there, and the new entry.
	rec := filepath.Join(trashd, "self")
	var keep []string
	if data, err := os.ReadFile(rec); err == nil {
		for n := range strings.FieldsSeq(string(data)) {
			if exists(filepath.Join(pk, n)) {
				keep = append(keep, n+"\n")
			}
		}
	}
	if os.Remove(entry) != nil && exists(entry) {
		keep = append(keep, r.Trash+"\n")
	}
	if err := os.WriteFile(rec+".new", []byte(strings.Join(keep, "")), 0o644); err != nil {
		return fmt.Errorf("record the trash: %w", err)
	}
	if err := os.Rename(rec+".new", rec); err != nil {
		return fmt.Errorf("record the trash: %w", err)
	}
	if len(keep) == 0 {
		return nil
	}
	if err := recordLock(rec); err != nil {
		return err
	}
	return startSweeper(r.Root, rec)
}
