package fswire

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// Pack writes the tree under r (not r itself) to w as a tar stream:
// directories, regular files and symbolic links (as links, never
// followed), with their permission bits and modification times; other
// files (sockets, devices, FIFOs) are left out. where names r in
// messages.
func Pack(w io.Writer, r *os.Root, j Jail, base string) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	err := fs.WalkDir(r.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		rel := filepath.Join(base, name)
		if err != nil {
			return j.FSError("read", rel, err)
		}
		if name == "." {
			return nil
		}
		switch {
		case d.Type().IsRegular():
			return packFile(tw, r, j, name, rel)
		case d.IsDir():
			fi, err := d.Info()
			if err != nil {
				return j.FSError("read", rel, err)
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: filepath.ToSlash(name) + "/", Mode: int64(fi.Mode().Perm() | fi.Mode()&(fs.ModeSetgid|fs.ModeSticky)), ModTime: fi.ModTime(), Format: tar.FormatPAX})
		case d.Type()&fs.ModeSymlink != 0:
			target, err := r.Readlink(name)
			if err != nil {
				return j.FSError("read", rel, err)
			}
			fi, err := d.Info()
			if err != nil {
				return j.FSError("read", rel, err)
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: filepath.ToSlash(name), Linkname: target, Mode: 0o777, ModTime: fi.ModTime(), Format: tar.FormatPAX})
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	return err
}

func packFile(tw *tar.Writer, r *os.Root, j Jail, name, rel string) error {
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return j.FSError("read", rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return j.FSError("read", rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil // it changed under us into something not copied
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(name), Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime(), Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
		if errors.Is(err, io.EOF) {
			return errorf("", "cannot read %s: it shrank while being copied; copy it again once nothing writes it", Name(rel))
		}
		return j.FSError("read", rel, err)
	}
	return nil
}

// Unpack writes the tar stream rd into r: directories, regular files and
// symbolic links, with their permission bits and modification times, as
// the uid it runs as. A file replaces a file or link of its name; a
// directory onto a file, or a file onto a directory, is refused. Names
// that leave r, by themselves or through a link, are refused (os.Root).
// base is r's path relative to j's root, for messages.
func Unpack(rd io.Reader, r *os.Root, j Jail, base string) error {
	tr := tar.NewReader(bufio.NewReaderSize(rd, 1<<20))
	type dirMode struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirMode
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errorf(KindBadInput, "cannot unpack into %s: the archive is damaged: %v", Name(base), err)
		}
		name := filepath.Clean(filepath.FromSlash(hdr.Name))
		rel := filepath.Join(base, name)
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return errorf(KindOutside, "cannot unpack %q: it is outside %s", hdr.Name, Name(base))
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := mkdir(r, j, name, rel); err != nil {
				return err
			}
			m := mode
			if hdr.Mode&0o2000 != 0 {
				m |= fs.ModeSetgid
			}
			if hdr.Mode&0o1000 != 0 {
				m |= fs.ModeSticky
			}
			dirs = append(dirs, dirMode{name, m, hdr.ModTime})
		case tar.TypeReg:
			if err := unpackFile(tr, r, j, name, rel, mode, hdr.ModTime); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := replace(r, j, name, rel, func() error { return r.Symlink(hdr.Linkname, name) }); err != nil {
				return err
			}
		}
	}
	// Directories' own modes last: a read-only one would have refused
	// what goes in it.
	for _, d := range slices.Backward(dirs) {
		if err := r.Chmod(d.name, d.mode); err != nil {
			return j.FSError("set the mode of", filepath.Join(base, d.name), err)
		}
		if !d.mtime.IsZero() {
			_ = r.Chtimes(d.name, d.mtime, d.mtime)
		}
	}
	return nil
}

// mkdir makes directory name in r unless it is one already.
func mkdir(r *os.Root, j Jail, name, rel string) error {
	err := r.Mkdir(name, 0o700)
	if err == nil || !errors.Is(err, fs.ErrExist) {
		if err != nil {
			return j.FSError("make the directory", rel, err)
		}
		return nil
	}
	fi, err := r.Lstat(name)
	if err != nil {
		return j.FSError("make the directory", rel, err)
	}
	if !fi.IsDir() {
		return DirOntoFile(rel)
	}
	return nil
}

// DirOntoFile is the error of copying a directory onto the file rel.
func DirOntoFile(rel string) error {
	return errorf(KindNotDir, "cannot copy a directory onto %s: it is a file; name a directory, or a path that does not exist yet", Name(rel))
}

// FileOntoDir is the error of copying a file onto the directory rel.
func FileOntoDir(rel string) error {
	return errorf(KindIsDir, "cannot write %s: it is a directory; name a file, or copy into the directory", Name(rel))
}

// replace runs make, which creates name; when something is there
// already, a file or link is removed first, a directory refused.
func replace(r *os.Root, j Jail, name, rel string, make func() error) error {
	err := make()
	if err == nil || !errors.Is(err, fs.ErrExist) {
		if err != nil {
			return j.FSError("write", rel, err)
		}
		return nil
	}
	fi, err := r.Lstat(name)
	if err != nil {
		return j.FSError("write", rel, err)
	}
	if fi.IsDir() {
		return FileOntoDir(rel)
	}
	if err := r.Remove(name); err != nil {
		return j.FSError("replace", rel, err)
	}
	if err := make(); err != nil {
		return j.FSError("write", rel, err)
	}
	return nil
}

func unpackFile(src io.Reader, r *os.Root, j Jail, name, rel string, mode fs.FileMode, mtime time.Time) error {
	var f *os.File
	err := replace(r, j, name, rel, func() (err error) {
		f, err = r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		return err
	})
	if err != nil {
		return err
	}
	_, err = Copy(f, src)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return j.FSError("write", rel, err)
	}
	if !mtime.IsZero() {
		_ = r.Chtimes(name, mtime, mtime)
	}
	return nil
}

// TempName is a name for a file being written into dir before it is
// renamed into place.
func TempName(dir, base string, n uint64) string {
	return filepath.Join(dir, fmt.Sprintf(".%s.amelia-%016x.tmp", base, n))
}
