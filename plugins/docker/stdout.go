package docker

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// stdoutReader reads the stdout of an exec out of its attached stream, in
// which the engine frames stdout and stderr (stdcopy's format: an 8-byte
// header, the stream and a big-endian length, before each piece); stderr
// is dropped. It is what stdcopy.StdCopy writes to its stdout writer,
// given to a reader without the pipe and goroutine in between, and
// without copying each piece once more.
type stdoutReader struct {
	r    *bufio.Reader
	left int // bytes of the current stdout piece not yet read
}

// stdoutFrameHeader is the length of the engine's header of a piece.
const stdoutFrameHeader = 8

// stdoutBuffer is what one read of the stream may take in: the client's
// own buffer (4 KiB) made each piece, of up to 32 KiB, two or three reads.
const stdoutBuffer = 256 << 10

// newStdoutReader reads the stdout in r, an exec's attached stream.
func newStdoutReader(r io.Reader) *stdoutReader {
	return &stdoutReader{r: bufio.NewReaderSize(r, stdoutBuffer)}
}

func (s *stdoutReader) Read(p []byte) (int, error) {
	for s.left == 0 {
		var h [stdoutFrameHeader]byte
		if _, err := io.ReadFull(s.r, h[:]); err != nil {
			return 0, err // io.EOF at the end of a piece: the stream's end
		}
		n := int(binary.BigEndian.Uint32(h[4:]))
		switch stdcopy.StdType(h[0]) {
		case stdcopy.Stdout, stdcopy.Stdin: // StdCopy puts Stdin's on stdout too
			s.left = n
		case stdcopy.Stderr:
			if _, err := s.r.Discard(n); err != nil {
				return 0, unexpected(err)
			}
		case stdcopy.Systemerr:
			msg := make([]byte, min(n, 4096))
			if _, err := io.ReadFull(s.r, msg); err != nil {
				return 0, unexpected(err)
			}
			return 0, fmt.Errorf("error from daemon in stream: %s", msg)
		default:
			return 0, fmt.Errorf("unrecognized stream in the exec's output: %d", h[0])
		}
	}
	n, err := s.r.Read(p[:min(len(p), s.left)])
	s.left -= n
	if err == io.EOF && s.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// unexpected is err, with the end of the stream inside a piece named so.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
