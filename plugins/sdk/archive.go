package sdk

import (
	"archive/tar"
	"bytes"
	"errors"
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

// FileFromArchive is what a host gives Archiver.GetArchive to take one
// regular file out of the tar stream the provider writes: it takes the
// stream, which must hold exactly that file, named Name, and writes only
// the file's bytes to File, as they come (no copy in between). Close says
// whether it was such an archive; Header is then the file's. Through a
// plugin, the plugin's SDK takes the file out of the stream, and a File
// that is an *os.File goes to the plugin process as it is, over the data
// channel, which writes there: the bytes do not pass through the host.
type FileFromArchive struct {
	Name string
	File io.Writer
	// Header is the file's, once Close returned nil.
	Header *tar.Header

	state  int // fileHeader, fileBody, fileEnd
	head   []byte
	h      *tar.Header
	left   int64
	ended  int64 // bytes after the file (its padding and the archive's end)
	err    error
	passed bool
}

const (
	fileHeader = iota
	fileBody
	fileEnd
)

// maxArchiveHead bounds a header (with its PAX records), and what may
// follow the file (padding, the end, an engine's record padding).
const maxArchiveHead = 1 << 20

var errNotTheFile = errors.New("the archive holds more than the one file")

// Passed records that a transport had the file written without this
// writer (a plugin took it out of the stream and wrote File itself):
// Close then returns nil at once, and Header is h.
func (x *FileFromArchive) Passed(h *tar.Header) {
	x.passed, x.Header = true, h
}

// countingReader counts what is read of it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// Write takes the next bytes of the tar stream.
func (x *FileFromArchive) Write(p []byte) (int, error) {
	if x.err != nil {
		return 0, x.err
	}
	n := len(p)
	if x.state == fileHeader {
		x.head = append(x.head, p...)
		cr := &countingReader{r: bytes.NewReader(x.head)}
		h, err := tar.NewReader(cr).Next()
		switch {
		case (err == io.EOF || err == io.ErrUnexpectedEOF) && len(x.head) < maxArchiveHead:
			return n, nil // the header is still to come
		case err != nil:
			x.err = fmt.Errorf("the provider's archive: %w", err)
			return 0, x.err
		case h.Typeflag != tar.TypeReg || h.Name != x.Name:
			x.err = fmt.Errorf("the provider's archive holds %q (type %c), not the regular file %q", h.Name, h.Typeflag, x.Name)
			return 0, x.err
		}
		x.h, x.left, x.state = h, h.Size, fileBody
		p = x.head[cr.n:]
		x.head = nil
	}
	if x.state == fileBody {
		k := int(min(x.left, int64(len(p))))
		if k > 0 {
			if _, err := x.File.Write(p[:k]); err != nil {
				x.err = fmt.Errorf("write the file %s: %w", x.Name, err)
				return 0, x.err
			}
		}
		x.left -= int64(k)
		p = p[k:]
		if x.left == 0 {
			x.state = fileEnd
		}
	}
	if x.state == fileEnd {
		// The padding and the end are zeros; a second entry is not.
		x.ended += int64(len(p))
		if x.ended > maxArchiveHead || bytes.ContainsFunc(p, func(r rune) bool { return r != 0 }) {
			x.err = fmt.Errorf("the provider's archive: %w", errNotTheFile)
			return 0, x.err
		}
	}
	return n, nil
}

// Close checks that the stream held the whole file.
func (x *FileFromArchive) Close() error {
	switch {
	case x.passed:
		return nil
	case x.err != nil:
		return x.err
	case x.state == fileHeader:
		return errors.New("the provider's archive held no file")
	case x.state == fileBody:
		return fmt.Errorf("the provider's archive held %d of the %d bytes of %s", x.h.Size-x.left, x.h.Size, x.Name)
	}
	x.Header = x.h
	return nil
}
