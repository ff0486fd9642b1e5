package runview

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// sanitize makes text from the agent, its tools or an error safe to print
// on a terminal: escape sequences could otherwise move the cursor, retitle
// the window or write the clipboard. Escape sequences are removed whole,
// tabs become spaces, newlines stay, and every other control character (C0,
// DEL, C1) is dropped; invalid UTF-8 shows as U+FFFD.
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] == '\x1b' {
			i += escapeLen(s[i:])
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == '\n':
			b.WriteByte('\n')
		case r == '\t':
			b.WriteString("    ")
		case r < 0x20, r == 0x7f, 0x80 <= r && r < 0xa0:
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// escapeLen is the length of the escape sequence at the start of s, which
// starts with ESC (ECMA-48): a CSI sequence up to its final byte; an OSC,
// DCS, SOS, PM or APC string up to BEL or ST; else ESC, its intermediate
// bytes and one final byte. An unterminated sequence runs to the end of s.
func escapeLen(s string) int {
	if len(s) < 2 {
		return len(s)
	}
	switch s[1] {
	case '[':
		for i := 2; i < len(s); i++ {
			if 0x40 <= s[i] && s[i] <= 0x7e {
				return i + 1
			}
		}
		return len(s)
	case ']', 'P', 'X', '^', '_':
		for i := 2; i < len(s); i++ {
			if s[i] == '\a' {
				return i + 1
			}
			if s[i] == '\x1b' && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return len(s)
	}
	i := 1
	for i < len(s) && 0x20 <= s[i] && s[i] <= 0x2f {
		i++
	}
	return min(i+1, len(s))
}

// oneLine is s sanitized with every run of white space, newlines included,
// made a single space: a tool's input on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(sanitize(s)), " ")
}

// runeWidth is the number of terminal columns r takes: 2 for the wide
// East Asian and emoji blocks, else 1. It errs on the wide side, which only
// ever truncates a little more; an underestimate would make the live line
// wrap, and a wrapped line cannot be rewritten in place.
func runeWidth(r rune) int {
	switch {
	case 0x1100 <= r && r <= 0x115f,
		0x2e80 <= r && r <= 0xa4cf,
		0xac00 <= r && r <= 0xd7a3,
		0xf900 <= r && r <= 0xfaff,
		0xfe30 <= r && r <= 0xfe4f,
		0xff00 <= r && r <= 0xff60,
		0xffe0 <= r && r <= 0xffe6,
		0x1f300 <= r && r <= 0x1faff,
		0x20000 <= r && r <= 0x3fffd:
		return 2
	}
	return 1
}

// textWidth is the number of terminal columns of the sanitized text s.
func textWidth(s string) int {
	n := 0
	for _, r := range s {
		n += runeWidth(r)
	}
	return n
}

// truncate shortens s to at most w columns, marking a cut with "…".
func truncate(s string, w int) string {
	if textWidth(s) <= w {
		return s
	}
	if w <= 0 {
		return ""
	}
	n := 0
	for i, r := range s {
		if n+runeWidth(r) > w-1 {
			return s[:i] + "…"
		}
		n += runeWidth(r)
	}
	return s
}

// wrap breaks the sanitized text s into lines of at most width columns at
// spaces, breaking words longer than a line. Each line keeps its leading
// indentation on its continuation lines (lists and code stay readable); runs
// of blank lines become one and blank lines at either end are dropped.
func wrap(s string, width int) []string {
	width = max(width, 8)
	var out []string
	blank := false
	for line := range strings.SplitSeq(strings.TrimRight(s, " \n"), "\n") {
		line = strings.TrimRight(line, " ")
		if line == "" {
			blank = len(out) > 0
			continue
		}
		if blank {
			out = append(out, "")
			blank = false
		}
		body := strings.TrimLeft(line, " ")
		indent := line[:len(line)-len(body)]
		if len(indent) > width/2 {
			indent = indent[:width/2]
		}
		out = append(out, wrapLine(indent, body, width)...)
	}
	return out
}

// wrapLine wraps the words of body after indent.
func wrapLine(indent, body string, width int) []string {
	var out []string
	cur, curW := indent, len(indent)
	fresh := true // nothing but indent in cur
	for _, word := range strings.Fields(body) {
		ww := textWidth(word)
		if !fresh && curW+1+ww > width {
			out = append(out, cur)
			cur, curW, fresh = indent, len(indent), true
		}
		if !fresh {
			cur += " "
			curW++
		}
		// A word wider than a line is cut across lines.
		for curW+ww > width {
			head, rest := cutWidth(word, width-curW)
			out = append(out, cur+head)
			cur, curW = indent, len(indent)
			word, ww = rest, textWidth(rest)
		}
		cur += word
		curW += ww
		fresh = false
	}
	return append(out, cur)
}

// cutWidth splits s after at most w columns, at least one rune.
func cutWidth(s string, w int) (string, string) {
	n := 0
	for i, r := range s {
		if n+runeWidth(r) > w && i > 0 {
			return s[:i], s[i:]
		}
		n += runeWidth(r)
	}
	return s, ""
}

// formatDuration shows d as a person reads it at a glance: 7ms, 0.4s,
// 12.3s, 1m23s, 1h2m3s.
func formatDuration(d time.Duration) string {
	if d < 100*time.Millisecond {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// formatCount writes n with thousands separators: 12,345.
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatCost shows a cost in US dollars with enough digits for small runs.
func formatCost(usd float64) string {
	if usd >= 1 {
		return fmt.Sprintf("$%.2f", usd)
	}
	return fmt.Sprintf("$%.4f", usd)
}
