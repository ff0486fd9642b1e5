package protocol

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"unicode/utf8"
)

// AppendJSON appends the JSON form of m to dst, exactly as pydantic's
// model_dump_json() writes it (no trailing newline), and returns the extended
// buffer. It fails, leaving dst's contents unchanged, if m.Type is not one of
// the five message types or m.ToolInput is not a JSON object, nil or null;
// the error matches [ErrInvalid].
func AppendJSON(dst []byte, m *AgenticMessage) ([]byte, error) {
	if m == nil {
		return dst, invalidf("nil message")
	}
	if !m.Type.Valid() {
		return dst, invalidf("unknown type %s (allowed: %s)", quoteTrunc([]byte(m.Type)), allowedTypes)
	}
	start := len(dst)
	dst = append(dst, `{"type":"`...)
	dst = append(dst, m.Type...)
	dst = append(dst, `","content":`...)
	dst = appendStringPtr(dst, m.Content)
	dst = append(dst, `,"tool_name":`...)
	dst = appendStringPtr(dst, m.ToolName)
	dst = append(dst, `,"tool_input":`...)
	if len(m.ToolInput) == 0 {
		dst = append(dst, "null"...)
	} else {
		var err error
		dst, err = appendCompactToolInput(dst, m.ToolInput)
		if err != nil {
			return dst[:start], err
		}
	}
	dst = append(dst, `,"tool_output":`...)
	dst = appendStringPtr(dst, m.ToolOutput)
	dst = append(dst, `,"tool_call_id":`...)
	dst = appendStringPtr(dst, m.ToolCallID)
	dst = append(dst, `,"session_id":`...)
	dst = appendStringPtr(dst, m.SessionID)
	if m.IsError {
		dst = append(dst, `,"is_error":true,"model":`...)
	} else {
		dst = append(dst, `,"is_error":false,"model":`...)
	}
	dst = appendStringPtr(dst, m.Model)
	dst = append(dst, `,"usage":`...)
	if m.Usage == nil {
		dst = append(dst, "null}"...)
	} else {
		dst = appendUsage(dst, m.Usage)
		dst = append(dst, '}')
	}
	return dst, nil
}

// appendCompactToolInput appends the compacted JSON text raw, which must be
// a JSON object or null.
func appendCompactToolInput(dst, raw []byte) ([]byte, error) {
	p := parser{data: raw}
	p.skipSpace()
	if p.pos < len(raw) && raw[p.pos] != '{' && raw[p.pos] != 'n' {
		if k, ok := kindOf(raw[p.pos]); ok {
			return dst, invalidf("tool_input must be a JSON object or null, got %s", k)
		}
	}
	start := len(dst)
	dst, err := p.appendCompact(dst, 2)
	if err == nil {
		p.skipSpace()
		if p.pos < len(raw) {
			err = p.syntaxError("after the value")
		}
	}
	if err != nil {
		if ie, ok := err.(*invalidError); ok {
			err = invalidf("tool_input: %s", ie.msg)
		}
		return dst[:start], err
	}
	return dst, nil
}

// appendUsage appends the JSON object for u.
func appendUsage(dst []byte, u *DriverUsage) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = appendIntPtr(dst, u.InputTokens)
	dst = append(dst, `,"output_tokens":`...)
	dst = appendIntPtr(dst, u.OutputTokens)
	dst = append(dst, `,"cache_read_tokens":`...)
	dst = appendIntPtr(dst, u.CacheReadTokens)
	dst = append(dst, `,"cache_creation_tokens":`...)
	dst = appendIntPtr(dst, u.CacheCreationTokens)
	dst = append(dst, `,"cost_usd":`...)
	dst = appendFloatPtr(dst, u.CostUSD)
	dst = append(dst, `,"duration_ms":`...)
	dst = appendIntPtr(dst, u.DurationMs)
	dst = append(dst, `,"num_turns":`...)
	dst = appendIntPtr(dst, u.NumTurns)
	dst = append(dst, `,"model":`...)
	dst = appendStringPtr(dst, u.Model)
	if u.hasContext() {
		dst = append(dst, `,"context_tokens":`...)
		dst = appendIntPtr(dst, u.ContextTokens)
		dst = append(dst, `,"context_window_tokens":`...)
		dst = appendIntPtr(dst, u.ContextWindowTokens)
		dst = append(dst, `,"context_utilization":`...)
		dst = appendFloatPtr(dst, u.ContextUtilization)
		dst = append(dst, `,"context_warning_threshold":`...)
		dst = appendFloatPtr(dst, u.ContextWarningThreshold)
		dst = append(dst, `,"context_window_warning":`...)
		switch {
		case u.ContextWindowWarning == nil:
			dst = append(dst, "null"...)
		case *u.ContextWindowWarning:
			dst = append(dst, "true"...)
		default:
			dst = append(dst, "false"...)
		}
	}
	return append(dst, '}')
}

func appendFloatPtr(dst []byte, v *float64) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	return appendFloat(dst, *v)
}

func appendIntPtr(dst []byte, v *int64) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	return strconv.AppendInt(dst, *v, 10)
}

func appendStringPtr(dst []byte, s *string) []byte {
	if s == nil {
		return append(dst, "null"...)
	}
	return AppendString(dst, *s)
}

const hexDigits = "0123456789abcdef"

// plainASCII[c] is true for the ASCII bytes that are written as they are
// inside a JSON string: everything but '"', '\\' and the control characters.
// (pydantic, like serde_json, writes DEL as it is.)
var plainASCII = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// AppendString appends s as a JSON string escaped as pydantic escapes it:
// '"', '\\' and the control characters below U+0020 are escaped (\b \t \n
// \f \r in their short forms, the others as \u00xx in lowercase hex),
// everything else is written as raw UTF-8. Invalid UTF-8 is replaced by
// U+FFFD.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if plainASCII[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\r':
				dst = append(dst, '\\', 'r')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendFloat appends f formatted as pydantic formats floats: the shortest
// digits that read back as f, laid out in fixed notation with at least one
// digit after the point (0.00001, 123.0, 9999999999999998.0) when the decimal
// exponent of the first digit is in [-5, 15], and in scientific notation
// otherwise, with no point for a single digit, an explicit sign and no
// padding in the exponent (1e-6, 1.5e+300, 1e+16). NaN and ±Inf, which JSON
// cannot express, are written as null, as pydantic does by default.
//
// This is the layout of the Rust crate ryu (which pydantic-core uses) plus
// the "+" of positive exponents.
func appendFloat(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	// Shortest round-trip digits: "-d.ddde±xx".
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	if b[0] == '-' {
		dst = append(dst, '-')
		b = b[1:]
	}
	e := len(b) - 1
	for b[e] != 'e' {
		e--
	}
	exp, _ := strconv.Atoi(string(b[e+1:]))
	var digits [20]byte
	d := append(digits[:0], b[0])
	if e > 1 {
		d = append(d, b[2:e]...)
	}
	n := len(d)
	point := exp + 1 // the decimal point comes after this many digits
	switch {
	case n <= point && point <= 16:
		dst = append(dst, d...)
		for range point - n {
			dst = append(dst, '0')
		}
		return append(dst, '.', '0')
	case 0 < point && point <= 16:
		dst = append(dst, d[:point]...)
		dst = append(dst, '.')
		return append(dst, d[point:]...)
	case -5 < point && point <= 0:
		dst = append(dst, '0', '.')
		for range -point {
			dst = append(dst, '0')
		}
		return append(dst, d...)
	default:
		dst = append(dst, d[0])
		if n > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if exp >= 0 {
			dst = append(dst, '+')
		}
		return strconv.AppendInt(dst, int64(exp), 10)
	}
}

// maxKeptBuffer is the largest line buffer an Encoder keeps between lines.
const maxKeptBuffer = 1 << 20

// An Encoder writes messages as JSON lines. It is safe for concurrent use:
// each line is written whole, with a single Write call, so lines from
// different goroutines never interleave.
type Encoder struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// NewEncoder returns an Encoder that writes to w.
func NewEncoder(w io.Writer) *Encoder {
	return &Encoder{w: w}
}

// Encode writes m as one line, its JSON form (see [AppendJSON]) followed by
// "\n", with a single call of the underlying writer's Write. If m is invalid
// nothing is written.
func (e *Encoder) Encode(m *AgenticMessage) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	b, err := AppendJSON(e.buf[:0], m)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if cap(b) <= maxKeptBuffer {
		e.buf = b
	}
	n, err := e.w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("write message: %w", err)
	}
	return nil
}
