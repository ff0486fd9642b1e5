package protocol

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// DefaultMaxLineBytes is the longest line a [Decoder] accepts unless told
// otherwise with [WithMaxLineBytes].
const DefaultMaxLineBytes = 16 << 20

// PrefixBytes is how much of a bad line a [LineError] keeps and shows.
const PrefixBytes = 200

// readBufferSize is the size of a Decoder's read buffer. Lines that fit in it
// are parsed where they lie; longer ones are gathered in a second buffer.
const readBufferSize = 64 << 10

// A DecoderOption configures a [Decoder].
type DecoderOption func(*Decoder)

// WithMaxLineBytes sets the longest line, not counting its line ending, that
// a Decoder accepts. A longer line is never held in memory whole: the Decoder
// reports it as soon as it has read n+2 of its bytes and skips the rest. A
// value of n <= 0 means [DefaultMaxLineBytes].
func WithMaxLineBytes(n int) DecoderOption {
	return func(d *Decoder) {
		if n <= 0 {
			n = DefaultMaxLineBytes
		}
		n = min(n, math.MaxInt-2)
		d.max = n
	}
}

// A Decoder reads messages from a stream of JSON lines. It is not safe for
// concurrent use.
//
// Lines end with "\n" or "\r\n"; the last line need not end at all. Blank
// lines (nothing but spaces, tabs and carriage returns) are skipped. Every
// error about a line, and every error of the underlying reader, is a
// *[LineError] naming the line; after one the Decoder can go on with the next
// line.
type Decoder struct {
	r    *bufio.Reader
	max  int
	line int
	p    parser

	pending  []byte // the start of a line longer than the read buffer, or of one cut short by a read error
	skipping bool   // the rest of an over-long line is yet to be skipped
}

// NewDecoder returns a Decoder that reads from r.
func NewDecoder(r io.Reader, opts ...DecoderOption) *Decoder {
	d := &Decoder{max: DefaultMaxLineBytes}
	for _, o := range opts {
		o(d)
	}
	d.r = bufio.NewReaderSize(r, readBufferSize)
	return d
}

// Line returns the number of the last line read, counting from 1 and
// including blank lines; 0 before the first.
func (d *Decoder) Line() int {
	return d.line
}

// Decode reads the next message. At the end of the input it returns io.EOF.
//
// A line that is not a valid message gives a *[LineError] matching
// [ErrInvalid]; one longer than the limit a *LineError matching
// [ErrLineTooLong]; an error of the underlying reader a *LineError wrapping
// it. In all cases the next call goes on with the next line (or, after a
// read error, tries again to read the rest of the current one).
func (d *Decoder) Decode() (*AgenticMessage, error) {
	for {
		line, err := d.readLine()
		if err != nil {
			return nil, err
		}
		if isBlank(line) {
			continue
		}
		m, err := d.p.parseMessage(line)
		d.p.shrink()
		if err != nil {
			return nil, newLineError(d.line, line, err)
		}
		return m, nil
	}
}

// readLine returns the next line, without its line ending. The line is
// valid until the next call.
func (d *Decoder) readLine() ([]byte, error) {
	if d.skipping {
		for {
			_, err := d.r.ReadSlice('\n')
			if err == nil {
				break
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF {
				d.skipping = false
				return nil, io.EOF
			}
			return nil, newLineError(d.line, nil, fmt.Errorf("read: %w", err))
		}
		d.skipping = false
	}
	for {
		chunk, err := d.r.ReadSlice('\n')
		switch {
		case err == nil || (err == io.EOF && len(d.pending)+len(chunk) > 0):
			// A whole line; at the end of the input, one without "\n".
			line := chunk
			if len(d.pending) > 0 {
				d.pending = append(d.pending, chunk...)
				line = d.pending
				d.pending = shrink(d.pending)
			}
			d.line++
			if n := len(line); n > 0 && line[n-1] == '\n' {
				line = line[:n-1]
			}
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			if len(line) > d.max {
				return nil, newLineError(d.line, line, &tooLongError{d.max})
			}
			return line, nil
		case err == bufio.ErrBufferFull:
			// Allow one byte more than the limit: it may be the '\r' of "\r\n".
			if len(d.pending)+len(chunk) > d.max+1 {
				return nil, d.tooLong(chunk)
			}
			d.pending = append(d.pending, chunk...)
		case err == io.EOF:
			return nil, io.EOF
		default:
			if len(d.pending)+len(chunk) > d.max+1 {
				// Report the line as too long; the read error is dropped,
				// a reader that keeps failing reports it again.
				return nil, d.tooLong(chunk)
			}
			// Keep what was read, so that a retry can finish the line.
			d.pending = append(d.pending, chunk...)
			return nil, newLineError(d.line+1, d.pending, fmt.Errorf("read: %w", err))
		}
	}
}

// tooLong reports the current line, of which d.pending and chunk have been
// read, as too long, and arranges for the rest of it to be skipped.
func (d *Decoder) tooLong(chunk []byte) error {
	d.line++
	d.skipping = true
	var prefix [PrefixBytes]byte
	n := copy(prefix[:], d.pending)
	n += copy(prefix[n:], chunk)
	d.pending = shrink(d.pending)
	return newLineError(d.line, prefix[:n], &tooLongError{d.max})
}

// shrink empties buf for reuse, or drops it if it grew too large to keep.
func shrink(buf []byte) []byte {
	if cap(buf) > maxKeptBuffer {
		return nil
	}
	return buf[:0]
}

// isBlank reports whether line holds nothing but spaces, tabs and carriage
// returns.
func isBlank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// A LineError is an error about one line of the input: a line that is not a
// valid message, a line that is too long, or an error of the underlying
// reader while reading it.
type LineError struct {
	Line   int    // the number of the line, counting from 1
	Prefix []byte // the first PrefixBytes bytes of the line (or of what was read of it)
	Err    error
}

func newLineError(line int, data []byte, err error) *LineError {
	if len(data) > PrefixBytes {
		data = data[:PrefixBytes]
	}
	return &LineError{Line: line, Prefix: append([]byte(nil), data...), Err: err}
}

// Error returns "line N: " followed by the error and, if there is one, ": "
// and the line's prefix, such as
//
//	line 3: invalid message: unknown type "foo" (allowed: thinking, tool_call, tool_result, result, usage): {"type":"foo",...
//
// Bytes of the prefix that are not printable (control characters other
// than tab, invalid UTF-8) are shown as \xNN escapes, so that a line from the
// sandbox cannot play tricks with the terminal the message is printed on.
func (e *LineError) Error() string {
	b := make([]byte, 0, 64+len(e.Prefix))
	b = append(b, "line "...)
	b = strconv.AppendInt(b, int64(e.Line), 10)
	b = append(b, ": "...)
	if e.Err != nil {
		b = append(b, e.Err.Error()...)
	}
	if len(e.Prefix) > 0 {
		b = append(b, ": "...)
		b = appendPrintable(b, e.Prefix)
	}
	return string(b)
}

// Unwrap returns e.Err.
func (e *LineError) Unwrap() error { return e.Err }

// appendPrintable appends s with control characters (but tab), DEL and
// invalid UTF-8 written as \xNN. A multi-byte character cut short at the end
// of s is escaped the same way.
func appendPrintable(dst, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\t') || c == 0x7f {
				dst = append(dst, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xF])
			} else {
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if (r == utf8.RuneError && size == 1) || (r >= 0x80 && r < 0xA0) {
			// Invalid UTF-8 or a C1 control character.
			for _, c := range s[i : i+size] {
				dst = append(dst, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xF])
			}
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

// tooLongError is the error for a line longer than the limit.
type tooLongError struct{ limit int }

func (e *tooLongError) Error() string {
	return "longer than the " + strconv.Itoa(e.limit) + "-byte limit"
}

func (e *tooLongError) Is(target error) bool { return target == ErrLineTooLong }
