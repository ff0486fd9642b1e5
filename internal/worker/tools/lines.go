package tools

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

const (
	readerSize = 32 << 10 // bufio buffer for reading files
	sniffLen   = 8 << 10  // a NUL byte in this many first bytes means binary
)

// getReader returns a pooled reader on r; give it back with putReader.
func (s *Set) getReader(r io.Reader) *bufio.Reader {
	br := s.readers.Get().(*bufio.Reader)
	br.Reset(r)
	return br
}

func (s *Set) putReader(br *bufio.Reader) {
	br.Reset(nil)
	s.readers.Put(br)
}

// isBinary reports whether br's stream looks binary: a NUL byte in its
// first sniffLen bytes. It reports the read error, if any, and whether the
// stream is empty.
func isBinary(br *bufio.Reader) (binary, empty bool, err error) {
	head, err := br.Peek(sniffLen)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, false, err
	}
	return bytes.IndexByte(head, 0) >= 0, len(head) == 0, nil
}

// lineReader reads lines of any length while keeping at most max bytes
// of each.
type lineReader struct {
	br  *bufio.Reader
	buf *[]byte // for lines longer than br's buffer; nil until needed
	max int
	s   *Set
}

// next returns the next line without its "\n", cut to at most max bytes
// (cut reports that), or io.EOF after the last line. The line is valid
// until the next call.
func (lr *lineReader) next() (line []byte, cut bool, err error) {
	chunk, err := lr.br.ReadSlice('\n')
	if err == nil && len(chunk) <= lr.max+1 {
		return chunk[:len(chunk)-1], false, nil // the common case: no copy
	}
	if lr.buf == nil {
		lr.buf = lr.s.lineBuf.Get().(*[]byte)
	}
	buf := (*lr.buf)[:0]
	defer func() { *lr.buf = buf[:0] }()
	read := false
	for {
		read = read || len(chunk) > 0
		done := err == nil
		if done {
			chunk = chunk[:len(chunk)-1]
		}
		if room := lr.max - len(buf); len(chunk) > room {
			buf = append(buf, chunk[:room]...)
			cut = true
		} else {
			buf = append(buf, chunk...)
		}
		switch {
		case done:
			return buf, cut, nil
		case errors.Is(err, bufio.ErrBufferFull):
			chunk, err = lr.br.ReadSlice('\n')
		case errors.Is(err, io.EOF):
			if !read {
				return nil, false, io.EOF
			}
			return buf, cut, nil
		default:
			return nil, false, err
		}
	}
}

// release gives the line buffer back to the pool.
func (lr *lineReader) release() {
	if lr.buf != nil {
		lr.s.lineBuf.Put(lr.buf)
		lr.buf = nil
	}
}
