package datachan

import (
	"bufio"
	"encoding/binary"
	"net"
)

// The layout of a yamux frame header (yamux's spec.md): version (1 byte),
// type (1), flags (2), stream id (4), length (4), big-endian; a data frame
// (type 0) of length N is followed by N bytes of body.
const (
	frameHeaderSize = 12
	frameTypeData   = 0
)

// readBuffer is what one read of the socket may take in: several frames
// of pipe-sized output.
const readBuffer = 1 << 20

// frameConn is the socket under a yamux session, arranged so that a frame
// costs fewer system calls; the bytes on the wire are the same. yamux
// writes each frame as its header and then its body, in two writes, and
// reads through a 4 KiB buffer, so a frame of pipe-sized output cost four
// system calls. frameConn holds back the header of a data frame and
// writes it with the body that follows in one writev, and reads through a
// large buffer that takes in several frames at once.
type frameConn struct {
	net.Conn
	r *bufio.Reader
	// header is a data frame's header held back for its body, whose
	// length is bodyLen.
	header  [frameHeaderSize]byte
	held    bool
	bodyLen int
}

func newFrameConn(c net.Conn) *frameConn {
	return &frameConn{Conn: c, r: bufio.NewReaderSize(c, readBuffer)}
}

func (c *frameConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Write is called by yamux's send loop alone, one write at a time.
func (c *frameConn) Write(p []byte) (int, error) {
	if c.held {
		c.held = false
		if len(p) == c.bodyLen {
			bufs := net.Buffers{c.header[:], p}
			n, err := bufs.WriteTo(c.Conn)
			return max(int(n)-frameHeaderSize, 0), err
		}
		// Not the body announced: the held header goes first, alone.
		if _, err := c.Conn.Write(c.header[:]); err != nil {
			return 0, err
		}
	}
	if len(p) == frameHeaderSize && p[1] == frameTypeData {
		if n := binary.BigEndian.Uint32(p[8:12]); n > 0 {
			copy(c.header[:], p)
			c.held, c.bodyLen = true, int(n)
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}
