package fswire

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
)

// Error is a failed request: a one-line message and its kind.
type Error struct {
	Kind string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is lets errors.Is match fs.ErrNotExist, fs.ErrExist and
// fs.ErrPermission by kind.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Kind == KindNotFound
	case fs.ErrPermission:
		return e.Kind == KindPermission
	case fs.ErrExist:
		return e.Kind == KindExists
	}
	return false
}

func errorf(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Jail names paths under one directory, the root of an os.Root, and
// words what the file system says of them.
type Jail struct {
	// Dir is the root's path, for messages and for absolute paths.
	Dir string
	// Where names the root in messages ("the sandbox's root /workspace").
	Where string
}

// Resolve turns p (relative to the root, or absolute under it) into a
// path relative to the root ("." for the root itself), or says why it
// is refused. It is lexical: the access itself goes through an os.Root,
// which also refuses symbolic links that lead out.
func (j Jail) Resolve(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", errorf(KindBadInput, "path %q contains a NUL byte; name a path without one", p)
	}
	if filepath.IsAbs(p) {
		rel, err := filepath.Rel(j.Dir, filepath.Clean(p))
		if err == nil && (rel == "." || filepath.IsLocal(rel)) {
			return rel, nil
		}
		return "", j.outside(p)
	}
	rel := filepath.Clean(p)
	if rel != "." && !filepath.IsLocal(rel) {
		return "", j.outside(p)
	}
	return rel, nil
}

func (j Jail) outside(p string) error {
	return errorf(KindOutside, "path %q is outside %s; use a path inside it", p, j.Where)
}

// Name is how rel is named in messages.
func Name(rel string) string {
	if rel == "." {
		return "the root"
	}
	return fmt.Sprintf("%q", filepath.ToSlash(rel))
}

// IsEscape reports whether err is os.Root refusing a path that leaves
// it; os does not export that error, only its text.
func IsEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// FSError words err, met doing what (a verb: "read", "list") to rel, as
// one line that says what to do.
func (j Jail) FSError(what, rel string, err error) *Error {
	var e *Error
	var errno syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case IsEscape(err):
		return errorf(KindOutside, "cannot %s %s: it leads outside %s through a symbolic link; use a path inside it", what, Name(rel), j.Where)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return errorf(KindNoSpace, "cannot %s %s: the sandbox's disk is full; free space in the sandbox (or give it a bigger disk) and try again", what, Name(rel))
	case errors.Is(err, fs.ErrNotExist):
		return errorf(KindNotFound, "cannot %s %s: it does not exist; check the path", what, Name(rel))
	case errors.Is(err, fs.ErrPermission):
		return errorf(KindPermission, "cannot %s %s: permission denied", what, Name(rel))
	case errors.Is(err, syscall.ENOTDIR):
		return errorf(KindNotDir, "cannot %s %s: a part of the path that should be a directory is a file", what, Name(rel))
	case errors.Is(err, syscall.EISDIR):
		return errorf(KindIsDir, "cannot %s %s: it is a directory; name a file", what, Name(rel))
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return errorf(KindExists, "cannot %s %s: it is a directory that is not empty; remove it recursively or name another path", what, Name(rel))
	case errors.Is(err, syscall.ELOOP):
		return errorf(KindBadInput, "cannot %s %s: too many levels of symbolic links", what, Name(rel))
	case errors.As(err, &errno):
		return errorf("", "cannot %s %s: %v", what, Name(rel), errno)
	default:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return errorf("", "cannot %s %s: %v", what, Name(rel), err)
	}
}
