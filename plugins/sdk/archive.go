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
// the file's bytes to File. Close waits for the stream's end and says
// whether it was such an archive; Header is then the file's. Through a
// plugin, the plugin's SDK takes the file out of the stream, and a File
// that is an *os.File goes to the plugin process as it is, over the data
// channel, which writes there: the bytes do not pass through the host.
type FileFromArchive struct {
	Name string
	File io.Writer
	// Header is the file's, once Close returned nil.
	Header *tar.Header

	pw     *io.PipeWriter
	done   chan error
	passed bool
}

// Passed records that a transport had the file written without this
// writer (a plugin took it out of the stream and wrote File itself):
// Close then returns nil at once, and Header is h.
func (x *FileFromArchive) Passed(h *tar.Header) {
	x.passed, x.Header = true, h
}

func (x *FileFromArchive) start() {
	if x.pw != nil {
		return
	}
	pr, pw := io.Pipe()
	x.pw, x.done = pw, make(chan error, 1)
	go func() {
		err := x.extract(pr)
		pr.CloseWithError(errNotTheFile)
		x.done <- err
	}()
}

var errNotTheFile = errors.New("the archive holds more than the one file")

func (x *FileFromArchive) extract(r io.Reader) error {
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		return fmt.Errorf("the provider's archive: %w", err)
	}
	if h.Typeflag != tar.TypeReg || h.Name != x.Name {
		return fmt.Errorf("the provider's archive holds %q (type %c), not the regular file %q", h.Name, h.Typeflag, x.Name)
	}
	buf := make([]byte, pipeCopyBuffer*4)
	n, err := io.CopyBuffer(writerOnly{x.File}, readerOnly{tr}, buf)
	if err != nil {
		return fmt.Errorf("write the file %s: %w", x.Name, err)
	}
	if n != h.Size {
		return fmt.Errorf("the provider's archive held %d of the %d bytes of %s", n, h.Size, x.Name)
	}
	if _, err := tr.Next(); err != io.EOF {
		return fmt.Errorf("the provider's archive: %w", errNotTheFile)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 1<<20)) // the engine's padding
	x.Header = h
	return nil
}

// Write takes the next bytes of the tar stream.
func (x *FileFromArchive) Write(p []byte) (int, error) {
	x.start()
	return x.pw.Write(p)
}

// Close ends the stream and waits for the file to be written.
func (x *FileFromArchive) Close() error {
	if x.passed {
		return nil
	}
	x.start()
	x.pw.Close()
	return <-x.done
}
