package tools

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// resolve turns a path argument into a path relative to the working
// directory ("." for the directory itself), or says why it is refused.
// This check is lexical and only gives clear messages: the access itself
// goes through s.root, which also refuses symbolic links that lead out.
func (s *Set) resolve(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if filepath.IsAbs(p) {
		clean := filepath.Clean(p)
		for _, base := range s.cwdAlias {
			rel, err := filepath.Rel(base, clean)
			if err == nil && (rel == "." || filepath.IsLocal(rel)) {
				return rel, nil
			}
		}
		return "", s.outside(p)
	}
	rel := filepath.Clean(p)
	if rel != "." && !filepath.IsLocal(rel) {
		return "", s.outside(p)
	}
	return rel, nil
}

func (s *Set) outside(p string) error {
	return fmt.Errorf("path %q is outside the working directory %s; use a path inside it", p, s.cwd)
}

// display is how a cwd-relative path is named in messages.
func display(rel string) string {
	if rel == "." {
		return "the working directory"
	}
	return fmt.Sprintf("%q", rel)
}

// fsError turns an error from the file system, met while doing what (a
// verb: "read", "list", ...) to rel, into a message the model can act on.
func (s *Set) fsError(what, rel string, err error) error {
	var errno syscall.Errno
	switch {
	case isEscape(err):
		return fmt.Errorf("path %q leads outside the working directory %s through a symbolic link; use a path inside it", rel, s.cwd)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot %s %s: it does not exist; use ls or glob to find the right path", what, display(rel))
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("cannot %s %s: permission denied", what, display(rel))
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("cannot %s %s: a part of the path that should be a directory is a file", what, display(rel))
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("cannot %s %s: it is a directory", what, display(rel))
	case errors.Is(err, syscall.ELOOP):
		return fmt.Errorf("cannot %s %s: too many levels of symbolic links", what, display(rel))
	case errors.Is(err, os.ErrClosed):
		return fmt.Errorf("cannot %s %s: the tools have been closed", what, display(rel))
	case errors.As(err, &errno):
		return fmt.Errorf("cannot %s %s: %v", what, display(rel), errno)
	default:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Errorf("cannot %s %s: %v", what, display(rel), err)
	}
}

// isEscape reports whether err is os.Root refusing a path that leaves it.
// os does not export that error, only its text.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// openFile opens rel for reading without blocking on FIFOs and checks
// that it is a regular file; what names the action for messages.
func (s *Set) openFile(what, rel string) (*os.File, os.FileInfo, error) {
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, s.fsError(what, rel, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, s.fsError(what, rel, err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("cannot %s %s: it is a directory; use ls to list it", what, display(rel))
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("cannot %s %s: it is not a regular file (%v)", what, display(rel), fi.Mode().Type())
	}
	return f, fi, nil
}

// statDir checks that rel is a directory; what names the action.
func (s *Set) statDir(what, rel string) error {
	fi, err := s.root.Stat(rel)
	if err != nil {
		return s.fsError(what, rel, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cannot %s %s: it is a file, not a directory", what, display(rel))
	}
	return nil
}

// slashRel is rel in the form io/fs paths and outputs use.
func slashRel(rel string) string {
	return filepath.ToSlash(rel)
}
