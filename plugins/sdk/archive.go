package sdk

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"time"
)

// FileArchive is the tar stream of one regular file, read from Body: what
// a host gives Archiver.PutArchive to put one file. Read makes the stream
// (the header, Size bytes of Body as they are, the end), with no tar
// writer copying the bytes. Through a plugin, the host sends the header's
// fields and Body's bytes, and the plugin's SDK gives its provider this
// stream again; a Body that is an *os.File goes to the plugin process as
// it is, over the data channel, which reads it there: its bytes do not
// pass through the host process.
type FileArchive struct {
	// Name is the entry's name, one path element.
	Name string
	// Mode is its permission bits; UID and GID its numeric owner.
	Mode     fs.FileMode
	UID, GID int
	ModTime  time.Time
	// Size is how many bytes of Body the file has; a Body that ends
	// sooner is an error.
	Size int64
	// Body is the file's bytes, from its current offset.
	Body io.Reader

	r   io.Reader
	err error
}

// header is the entry's tar header.
func (a *FileArchive) header() ([]byte, error) {
	if a.Name == "" || a.Name == "." || a.Name == ".." || bytes.ContainsAny([]byte(a.Name), "/\x00") {
		return nil, Errorf(ErrInvalid, "archive file name %q is not one path element", a.Name)
	}
	if a.Size < 0 {
		return nil, Errorf(ErrInvalid, "archive file %s has a negative size", a.Name)
	}
	var head bytes.Buffer
	err := tar.NewWriter(&head).WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: a.Name, Size: a.Size, Mode: int64(a.Mode.Perm()),
		Uid: a.UID, Gid: a.GID, ModTime: a.ModTime, Format: tar.FormatPAX,
	})
	return head.Bytes(), err
}

func (a *FileArchive) Read(p []byte) (int, error) {
	if a.r == nil && a.err == nil {
		head, err := a.header()
		if err != nil {
			a.err = err
		} else {
			pad := (512 - a.Size%512) % 512
			a.r = io.MultiReader(bytes.NewReader(head), &sizedBody{a: a, r: io.LimitReader(a.Body, a.Size)}, bytes.NewReader(make([]byte, pad+1024)))
		}
	}
	if a.err != nil {
		return 0, a.err
	}
	return a.r.Read(p)
}

// sizedBody reads a file's bytes and fails when they end before Size.
type sizedBody struct {
	a   *FileArchive
	r   io.Reader
	got int64
}

func (s *sizedBody) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.got += int64(n)
	if err == io.EOF && s.got < s.a.Size {
		s.a.err = fmt.Errorf("archive file %s: it ended after %d of its %d bytes (it shrank while being copied)", s.a.Name, s.got, s.a.Size)
		return n, s.a.err
	}
	return n, err
}
