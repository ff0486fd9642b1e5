//go:build corpus

package protocol

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"unicode/utf8"
)

// rndString returns a short string rich in characters that need care:
// control characters, quotes, invalid UTF-8, U+2028, DEL, astral runes.
func rndString(r *rand.Rand) string {
	n := r.IntN(20)
	var b []byte
	for range n {
		switch r.IntN(6) {
		case 0:
			b = append(b, byte(r.IntN(0x20)))
		case 1:
			b = append(b, `"\/<>&`[r.IntN(6)])
		case 2:
			b = append(b, byte(r.IntN(256))) // may be invalid
		case 3:
			b = utf8.AppendRune(b, rune(0x80+r.IntN(0x3000)))
		case 4:
			b = utf8.AppendRune(b, []rune{0x2028, 0x2029, 0x7f, 0xfeff, 0x1F600, 0x10FFFF, 0xFFFD}[r.IntN(7)])
		default:
			b = append(b, byte(0x20+r.IntN(0x5f)))
		}
	}
	return string(b)
}

// rndFloat returns floats of all magnitudes, NaN and ±Inf included.
func rndFloat(r *rand.Rand) float64 {
	switch r.IntN(4) {
	case 0:
		return math.Float64frombits(r.Uint64())
	case 1:
		return float64(r.IntN(1000000)) / math.Pow(10, float64(r.IntN(12)))
	case 2:
		return r.Float64() * math.Pow(10, float64(r.IntN(40)-20))
	}
	return []float64{0, math.Copysign(0, -1), 1e16, 1e-5, 1e-6, math.Inf(1), math.NaN(), 123}[r.IntN(8)]
}

// rndValue appends a random JSON value, in pydantic's form.
func rndValue(r *rand.Rand, dst []byte, depth int) []byte {
	k := r.IntN(8)
	if depth > 4 {
		k = r.IntN(5)
	}
	switch k {
	case 0:
		return AppendString(dst, rndString(r))
	case 1:
		return strconv.AppendInt(dst, r.Int64()>>r.IntN(64), 10)
	case 2:
		return appendFloat(dst, rndFloat(r))
	case 3:
		return append(dst, []string{"true", "false", "null"}[r.IntN(3)]...)
	case 4:
		return append(dst, "12345678901234567890123456789"...)
	case 5, 6:
		return rndObject(r, dst, depth+1)
	default:
		dst = append(dst, '[')
		for i := range r.IntN(4) {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = rndValue(r, dst, depth+1)
		}
		return append(dst, ']')
	}
}

// rndObject appends a random JSON object with distinct keys.
func rndObject(r *rand.Rand, dst []byte, depth int) []byte {
	dst = append(dst, '{')
	for i := range r.IntN(5) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, strconv.Itoa(i)+rndString(r))
		dst = append(dst, ':')
		dst = rndValue(r, dst, depth)
	}
	return append(dst, '}')
}

// TestWriteCorpus writes random messages, encoded by this package, to the
// file named by $PROTOCOL_CORPUS, for testdata/check_lines.py to check that
// pydantic reads every line and writes it back byte for byte:
//
//	PROTOCOL_CORPUS=/tmp/corpus.jsonl go test -tags corpus -run TestWriteCorpus ./core/protocol/
//	python3 core/protocol/testdata/check_lines.py /tmp/corpus.jsonl
//
// The tool_input objects are built the way pydantic writes them (floats
// with appendFloat, strings with AppendString, no repeated keys), so that
// the whole line must come back unchanged.
func TestWriteCorpus(t *testing.T) {
	path := os.Getenv("PROTOCOL_CORPUS")
	if path == "" {
		t.Fatal("set PROTOCOL_CORPUS to the file to write")
	}
	r := rand.New(rand.NewPCG(1, 2))
	types := []MessageType{Thinking, ToolCall, ToolResult, Result, Usage}
	sp := func() *string {
		if r.IntN(3) == 0 {
			return nil
		}
		return new(rndString(r))
	}
	ip := func() *int64 {
		if r.IntN(3) == 0 {
			return nil
		}
		return new(r.Int64() >> r.IntN(64) * int64(1-2*r.IntN(2)))
	}
	var out []byte
	for range 30000 {
		m := &AgenticMessage{Type: types[r.IntN(5)], Content: sp(), ToolName: sp(), ToolOutput: sp(), ToolCallID: sp(), SessionID: sp(), IsError: r.IntN(2) == 0, Model: sp()}
		if r.IntN(2) == 0 {
			m.ToolInput = rndObject(r, nil, 1)
		}
		if r.IntN(2) == 0 {
			u := &DriverUsage{InputTokens: ip(), OutputTokens: ip(), CacheReadTokens: ip(), CacheCreationTokens: ip(), DurationMs: ip(), NumTurns: ip(), Model: sp()}
			if r.IntN(4) > 0 {
				u.CostUSD = new(rndFloat(r))
			}
			m.Usage = u
		}
		var err error
		out, err = AppendJSON(out, m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, '\n')
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}
