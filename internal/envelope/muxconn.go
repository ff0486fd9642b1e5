package envelope

import (
	"encoding/binary"
	"io"
)

// The layout of a yamux frame header (yamux's spec.md): version (1 byte),
// type (1), flags (2), stream id (4), length (4), big-endian; a data frame
// (type 0) of length N is followed by N bytes of body.
const (
	yamuxHeaderSize = 12
	yamuxTypeData   = 0
)

// joinedWriter is the writer under a yamux session, arranged so that a
// data frame is one write; the bytes are the same. yamux writes each frame
// as its header and then its body, in two writes: down a pipe to a
// container engine, which frames every read it makes of the pipe again,
// and through its API socket, that is twice the reads, wakeups and frames
// for each piece of output. joinedWriter holds back the header of a data
// frame and writes it with the body that follows.
type joinedWriter struct {
	w   io.Writer
	buf []byte // the held header, then room for its body
	// bodyLen is the length of the body the held header announced; 0
	// when no header is held.
	bodyLen int
}

func newJoinedWriter(w io.Writer) *joinedWriter { return &joinedWriter{w: w} }

// Write is called by yamux's send loop alone, one write at a time.
func (j *joinedWriter) Write(p []byte) (int, error) {
	if j.bodyLen > 0 {
		held := j.bodyLen
		j.bodyLen = 0
		if len(p) == held {
			j.buf = append(j.buf[:yamuxHeaderSize], p...)
			n, err := j.w.Write(j.buf)
			if cap(j.buf) > 1<<20 {
				j.buf = nil
			}
			return max(n-yamuxHeaderSize, 0), err
		}
		// Not the body announced: the held header goes first, alone.
		if _, err := j.w.Write(j.buf[:yamuxHeaderSize]); err != nil {
			return 0, err
		}
	}
	if len(p) == yamuxHeaderSize && p[1] == yamuxTypeData {
		if n := binary.BigEndian.Uint32(p[8:12]); n > 0 {
			j.buf = append(j.buf[:0], p...)
			j.bodyLen = int(n)
			return len(p), nil
		}
	}
	return j.w.Write(p)
}
