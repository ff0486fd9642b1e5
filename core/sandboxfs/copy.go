package sandboxfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
)

// CopyIn copies the host file or directory src into the sandbox at dst,
// as docker cp does: when dst is a directory, src goes in it under its
// own name; else src becomes dst (whose directory must exist). A
// directory onto a file, or a file onto a directory, is refused. src, if
// a symbolic link itself, is followed; links inside a directory are
// copied as links. It returns where the copy went, relative to the root.
func (f *FS) CopyIn(ctx context.Context, src, dst string) (string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", hostError("copy", src, err)
	}
	name := filepath.Base(filepath.Clean(src))
	if strings.HasSuffix(dst, "/") {
		e, err := f.Stat(ctx, dst)
		switch {
		case err == nil && e.Type != fswire.TypeDir:
			return "", fmt.Errorf("cannot copy into %s: it is not a directory; name a directory, or drop the trailing /", dst)
		case errors.Is(err, fs.ErrNotExist) && fi.IsDir():
			// dst/ names the directory to make.
		case errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("cannot copy into %s: it does not exist in the sandbox; make the directory first, or drop the trailing /", dst)
		case err != nil:
			return "", err
		}
	}
	switch {
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return "", hostError("copy", src, err)
		}
		defer in.Close()
		if ar := f.archiver(); ar != nil && fi.Size() >= f.archiveMin() {
			if where, ok, err := f.copyFileInByArchive(ctx, ar, in, fi, dst, name); ok {
				return where, err
			}
		}
		resp, err := f.call(ctx, fswire.Request{Op: fswire.OpWrite, Path: dst, Into: name, Mode: uint32(fi.Mode().Perm())}, struct{ io.Reader }{in}, true, nil)
		return resp.Path, err
	case fi.IsDir():
		root, err := os.OpenRoot(src)
		if err != nil {
			return "", hostError("copy", src, err)
		}
		defer root.Close()
		pr, pw := io.Pipe()
		go func() {
			pw.CloseWithError(fswire.Pack(pw, root, fswire.Jail{Dir: src, Where: "the directory " + src}, "."))
		}()
		resp, err := f.call(ctx, fswire.Request{Op: fswire.OpUnpack, Path: dst, Into: name}, pr, true, nil)
		pr.CloseWithError(errors.New("the copy ended")) // a pack still writing stops
		return resp.Path, err
	}
	return "", fmt.Errorf("cannot copy %s: it is not a regular file or a directory (%v)", src, fi.Mode().Type())
}

// hostError words err, met doing what to the host path p.
func hostError(what, p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot %s %s: it does not exist on this host; check the path", what, p)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("cannot %s %s: permission denied on this host", what, p)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("cannot %s %s on this host: %v", what, p, err)
}

// CopyOut copies the sandbox file or directory src to the host at dst,
// as docker cp does: when dst is a directory, src goes in it under its
// own name; else src becomes dst (whose directory must exist). A
// directory onto a file, or a file onto a directory, is refused; a file
// is written whole into a new file renamed into place. Symbolic links in
// a directory are copied as links; none that the sandbox made is
// followed on the host (the tree is written through os.Root). It returns
// the host path written.
func (f *FS) CopyOut(ctx context.Context, src, dst string) (string, error) {
	req := fswire.Request{Op: fswire.OpPack, Path: src}
	ar := f.archiver()
	if ar != nil {
		// A big file is staged, for the provider to copy; the worker
		// removes the staging directory once the session ends, however
		// it does.
		req.Stage, req.StageMin = f.Stage, f.archiveMin()
	}
	s, err := f.start(ctx, req, nil, true)
	if err != nil {
		return "", err
	}
	e := s.resp.Entry
	if e == nil {
		return "", s.finish(errors.New("the worker's answer has no entry"))
	}
	// The name comes from the sandbox, which may be hostile: one path
	// element, or nothing is written.
	if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") {
		return "", s.finish(fmt.Errorf("the sandbox named %s %q, which is not a file name; nothing was copied", src, e.Name))
	}
	target := dst
	fi, err := os.Stat(dst)
	switch {
	case err == nil && fi.IsDir():
		target = filepath.Join(dst, e.Name)
	case err == nil:
	case errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(dst, "/") && e.Type != fswire.TypeDir:
		return "", s.finish(fmt.Errorf("cannot copy into %s: it does not exist on this host; make the directory first", dst))
	case !errors.Is(err, fs.ErrNotExist):
		return "", s.finish(hostError("copy into", dst, err))
	}
	if staged := s.resp.Staged; staged != nil {
		err := f.getStaged(ctx, ar, *e, staged.Name, target)
		ferr := s.finish(nil) // the staging directory goes
		switch {
		case unsupported(err):
			// The provider cannot after all: streamed instead.
			g := *f
			g.Archive = nil
			return g.CopyOut(ctx, src, dst)
		case err != nil:
			return "", err
		}
		return target, ferr
	}
	if e.Type == fswire.TypeDir {
		err = unpackOnHost(s, *e, target)
	} else {
		err = writeOnHost(s, *e, target)
	}
	if err != nil {
		return "", s.finish(err)
	}
	return target, s.finish(nil)
}

// unpackOnHost writes the tree s streams into the host directory target,
// made if it does not exist.
func unpackOnHost(s *session, e Entry, target string) error {
	fi, err := os.Stat(target)
	switch {
	case err == nil && !fi.IsDir():
		return fmt.Errorf("cannot copy directory %s onto %s: it is a file on this host; name a directory, or a path that does not exist yet", e.Name, target)
	case errors.Is(err, fs.ErrNotExist):
		if err := os.Mkdir(target, 0o700); err != nil {
			return hostError("make the directory", target, err)
		}
	case err != nil:
		return hostError("copy into", target, err)
	}
	root, err := os.OpenRoot(target)
	if err != nil {
		return hostError("copy into", target, err)
	}
	defer root.Close()
	if err := fswire.Unpack(s.br, root, fswire.Jail{Dir: target, Where: "the directory " + target}, "."); err != nil {
		return err
	}
	if err := os.Chmod(target, e.FileMode().Perm()); err != nil {
		return hostError("set the mode of", target, err)
	}
	_ = os.Chtimes(target, e.MTime, e.MTime)
	return nil
}

// writeOnHost writes the file s streams to the host path target, whole,
// through a new file renamed into place, with e's mode and time; it ends
// s.
func writeOnHost(s *session, e Entry, target string) error {
	return replaceOnHost(e, target, func(out *os.File) error {
		n, err := s.copyFile(out, e.Size)
		if err == nil {
			// The file is in place only once the worker has ended well:
			// its reason, else a short count, fails it.
			if err = s.finish(nil); err == nil && n < e.Size {
				err = fmt.Errorf("the sandbox sent %d of %d bytes", n, e.Size)
			}
		}
		if err != nil {
			return hostError("write", target, err)
		}
		return nil
	})
}

// replaceOnHost writes the host file target whole: fill writes a new
// file beside it, which then gets e's mode and time and is renamed into
// place; on any failure the new file goes and target is as it was.
// fill's error is returned as it is.
func replaceOnHost(e Entry, target string, fill func(*os.File) error) error {
	if fi, err := os.Lstat(target); err == nil && fi.IsDir() {
		return fmt.Errorf("cannot write %s: it is a directory on this host; name a file, or copy into the directory", target)
	}
	tmp := tempBeside(target)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return hostError("write", target, err)
	}
	err = fill(out)
	if err == nil {
		if cerr := out.Chmod(e.FileMode().Perm()); cerr != nil {
			err = hostError("write", target, cerr)
		}
	}
	if cerr := out.Close(); err == nil && cerr != nil {
		err = hostError("write", target, cerr)
	}
	if err == nil {
		_ = os.Chtimes(tmp, e.MTime, e.MTime)
		if rerr := os.Rename(tmp, target); rerr != nil {
			err = hostError("write", target, rerr)
		}
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
