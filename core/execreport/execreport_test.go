package execreport

import (
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The stderr tail keeps the last bytes and the last lines, on one
// printable line.
func TestStderr(t *testing.T) {
	var s Stderr
	for i := range 2000 {
		s.Write([]byte("line " + strings.Repeat("x", i%7) + "\n"))
	}
	s.Write([]byte("the \x1b[31mend\xff\n"))
	if len(s.buf) > TailBytes {
		t.Errorf("kept %d bytes", len(s.buf))
	}
	tail := s.Tail()
	if !strings.HasSuffix(tail, ` | the \x1b[31mend\xff`) || strings.Count(tail, " | ") != TailLines-1 {
		t.Errorf("Tail = %q", tail)
	}
	if note := s.Note(); note != "; its stderr ends: "+tail {
		t.Errorf("Note = %q", note)
	}
	s.Write([]byte(strings.Repeat("y", 3*TailBytes)))
	if len(s.buf) != TailBytes {
		t.Errorf("kept %d bytes of a big write", len(s.buf))
	}
	var empty Stderr
	if empty.Note() != "" || empty.Tail() != "" {
		t.Errorf("no stderr: Note %q, Tail %q", empty.Note(), empty.Tail())
	}
}

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		st   sdk.ExitStatus
		want string
	}{
		{sdk.ExitStatus{Code: 3}, "exit status 3"},
		{sdk.ExitStatus{Code: 137, Signal: "KILL"}, "exit status 137 (signal KILL)"},
		{sdk.ExitStatus{Code: 143, Signal: "TERM", TimedOut: true}, "exit status 143 (signal TERM, timed out)"},
		{sdk.ExitStatus{Code: 130, Canceled: true}, "exit status 130 (cancelled)"},
	} {
		if got := Status(c.st); got != c.want {
			t.Errorf("Status(%+v) = %q, want %q", c.st, got, c.want)
		}
	}
}

func TestPrintable(t *testing.T) {
	if got := Printable("ok\ttab \x1b[2J\r\n\xff é \u0085"); got != `ok`+"\t"+`tab \x1b[2J\x0d\x0a\xff é \u0085` {
		t.Errorf("Printable = %q", got)
	}
}
