package docker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// demuxBuffer is the most one read of an exec's attached stream takes.
// The engine frames output in pieces of up to 32 KiB; stdcopy.StdCopy
// reads and writes each piece on its own, which for bulk output is two
// system calls, and a wake-up of the host on the other side of the data
// channel, per 32 KiB.
const demuxBuffer = 1 << 20

// demuxOutput copies the output of an exec's attached stream r, in which
// the engine frames stdout and stderr (stdcopy's format: an 8-byte
// header, the stream and a big-endian length, before each piece), to
// stdout and stderr, as stdcopy.StdCopy does: Stdin's pieces go to
// stdout, a Systemerr piece is an error, and the stream's end, even
// inside a piece, ends it without one (where StdCopy drops the piece cut
// short, this has written what came of it). Unlike StdCopy, it takes in all
// the stream holds, up to demuxBuffer, at each read, and writes the
// consecutive stdout pieces of it in one write; the order of writes to
// stdout and stderr is the stream's.
func demuxOutput(stdout, stderr io.Writer, r io.Reader) (written int64, err error) {
	buf := make([]byte, demuxBuffer)
	var (
		end     int // buf[:end] holds what was read and is not yet used
		stream  stdcopy.StdType
		left    int    // bytes of the current piece not yet seen
		sysErr  []byte // a Systemerr piece's message, as it comes
		pending [2]int // buf[pending[0]:pending[1]]: stdout not yet written
	)
	flush := func() error {
		if pending[1] > pending[0] {
			n, err := stdout.Write(buf[pending[0]:pending[1]])
			written += int64(n)
			if err != nil {
				return err
			}
		}
		pending = [2]int{}
		return nil
	}
	for {
		n, rerr := r.Read(buf[end:])
		end += n
		pos := 0
		for pos < end {
			if left == 0 {
				if end-pos < stdoutFrameHeader {
					break // the rest of the header is still to come
				}
				h := buf[pos : pos+stdoutFrameHeader]
				stream, left = stdcopy.StdType(h[0]), int(binary.BigEndian.Uint32(h[4:]))
				pos += stdoutFrameHeader
				switch stream {
				case stdcopy.Stdin, stdcopy.Stdout, stdcopy.Stderr:
				case stdcopy.Systemerr:
					if left == 0 {
						return written, errors.New("error from daemon in stream: (no message)")
					}
				default:
					return written, fmt.Errorf("unrecognized stream in the exec's output: %d", stream)
				}
				continue
			}
			k := min(left, end-pos)
			piece := buf[pos : pos+k]
			switch stream {
			case stdcopy.Stdin, stdcopy.Stdout:
				// Moved down to the end of the stdout already pending
				// (over the header in between), to go in one write.
				if pending[1] == pending[0] {
					pending = [2]int{pos, pos + k}
				} else {
					pending[1] += copy(buf[pending[1]:], piece)
				}
			case stdcopy.Stderr:
				if err := flush(); err != nil {
					return written, err
				}
				m, err := stderr.Write(piece)
				written += int64(m)
				if err != nil {
					return written, err
				}
			case stdcopy.Systemerr:
				sysErr = append(sysErr, piece[:min(k, max(0, 4096-len(sysErr)))]...)
			}
			pos += k
			left -= k
			if left == 0 && stream == stdcopy.Systemerr {
				if err := flush(); err != nil {
					return written, err
				}
				return written, fmt.Errorf("error from daemon in stream: %s", sysErr)
			}
		}
		if err := flush(); err != nil {
			return written, err
		}
		// Only part of a header can be left: it moves to the front.
		end = copy(buf, buf[pos:end])
		if rerr == io.EOF {
			return written, nil
		}
		if rerr != nil {
			return written, rerr
		}
	}
}
