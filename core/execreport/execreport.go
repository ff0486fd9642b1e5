// Package execreport turns how a command in a sandbox ended — its exit
// status and the end of its stderr — into the one line an error message
// carries. The text comes from the sandbox, so it is made printable first:
// a command cannot move the cursor of the terminal its error is shown on.
package execreport

import (
	"bytes"
	"fmt"
	"strings"
	"sync"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Bounds of what a Stderr keeps and a Tail quotes.
const (
	// TailBytes is how much of the end of stderr is kept, whatever a
	// command prints.
	TailBytes = 4 << 10
	// TailLines is how many of its last lines a Tail quotes.
	TailLines = 8
)

// Stderr keeps the last TailBytes written to it. It is safe for concurrent
// use, so it can be read while the command still writes.
type Stderr struct {
	mu  sync.Mutex
	buf []byte
}

func (s *Stderr) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p) >= TailBytes {
		s.buf = append(s.buf[:0], p[len(p)-TailBytes:]...)
		return len(p), nil
	}
	if over := len(s.buf) + len(p) - TailBytes; over > 0 {
		s.buf = append(s.buf[:0], s.buf[over:]...)
	}
	s.buf = append(s.buf, p...)
	return len(p), nil
}

// Bytes is what was kept, as written: the last TailBytes.
func (s *Stderr) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.buf)
}

// Tail is the last TailLines non-blank lines kept, trimmed, made printable
// and joined by " | ": one line.
func (s *Stderr) Tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var lines []string
	for l := range bytes.SplitSeq(s.buf, []byte("\n")) {
		if l := strings.TrimSpace(string(l)); l != "" {
			lines = append(lines, Printable(l))
		}
	}
	if len(lines) > TailLines {
		lines = lines[len(lines)-TailLines:]
	}
	return strings.Join(lines, " | ")
}

// Note is "; its stderr ends: TAIL" to append to an error, or "" when the
// command wrote nothing to stderr.
func (s *Stderr) Note() string { return s.NoteAs("stderr") }

// NoteAs is Note for a buffer that holds what: "; its output ends: TAIL"
// for a command's stdout and stderr together.
func (s *Stderr) NoteAs(what string) string {
	if t := s.Tail(); t != "" {
		return "; its " + what + " ends: " + t
	}
	return ""
}

// Status says how a command ended: "exit status 3", "exit status 137
// (signal KILL)", "exit status 124 (timed out)", "exit status 130
// (cancelled)".
func Status(st sdk.ExitStatus) string {
	s := fmt.Sprintf("exit status %d", st.Code)
	var notes []string
	if st.Signal != "" {
		notes = append(notes, "signal "+st.Signal)
	}
	if st.TimedOut {
		notes = append(notes, "timed out")
	}
	if st.Canceled {
		notes = append(notes, "cancelled")
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	return s
}

// Printable makes text from the sandbox safe to print: invalid UTF-8 and
// control characters (but tab) become \xNN or \uNNNN escapes.
func Printable(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\uFFFD' && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case (r < 0x20 && r != '\t') || (r >= 0x7f && r < 0xa0):
			if r < 0x80 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
