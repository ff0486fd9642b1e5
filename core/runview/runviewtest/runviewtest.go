// Package runviewtest helps tests look at what the live view drew: the
// screen a terminal shows after the view's bytes, and (on Linux) a real
// pseudo-terminal to draw on, for tests that run amelia as a user at a
// terminal does.
package runviewtest

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// LiveMark ends the line the cursor is on when the output ends without a
// newline: the live line, still on screen.
const LiveMark = "⟨live⟩"

// Screen is what a terminal shows after out: it applies carriage returns,
// line erasure (CSI 2K) and newlines, and drops colours (SGR). It returns
// the lines, and an error for any other escape sequence or control
// character, which the view must never write. Lines are not wrapped: that
// is for the caller to check against the width.
func Screen(out []byte) ([]string, error) {
	var lines []string
	var cur []rune
	col := 0
	s := string(out)
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == '\x1b':
			end := strings.IndexAny(s, "mK")
			if !strings.HasPrefix(s, "\x1b[") || end < 0 {
				return nil, fmt.Errorf("unexpected escape sequence at %q", s[:min(len(s), 10)])
			}
			seq := s[:end+1]
			switch {
			case seq == "\x1b[2K":
				cur = cur[:0]
			case strings.HasSuffix(seq, "m"):
			default:
				return nil, fmt.Errorf("unexpected escape sequence %q", seq)
			}
			s = s[end+1:]
			continue
		case r == '\r':
			col = 0
		case r == '\n':
			lines = append(lines, string(cur))
			cur, col = cur[:0], 0
		case r < 0x20 || r == 0x7f:
			return nil, fmt.Errorf("control character %U written", r)
		default:
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
		}
		s = s[size:]
	}
	if len(cur) > 0 {
		lines = append(lines, string(cur)+LiveMark)
	}
	return lines, nil
}
