package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecoder feeds arbitrary input to the Decoder and to UnmarshalJSON.
// Neither may panic; every message that decodes must encode, and read back
// as the same message, whose encoding is the same bytes again. As a second
// opinion, whatever decodes is also read by encoding/json into a map, which
// must give the same values.
func FuzzDecoder(f *testing.F) {
	for _, line := range goldenLines(f) {
		f.Add(line)
	}
	for _, s := range []string{
		"",
		"\n\r\n  \n",
		exampleLine + "\r\n" + exampleLine,
		`{"type":"foo"}`,
		`{"type":"tool_call","tool_input":[1,2]}`,
		`{"type":"usage","usage":{"input_tokens":1.5,"cost_usd":"x"}}`,
		`{"type":"usage","usage":{"input_tokens":1e3,"output_tokens":-0.0,"cost_usd":1e400}}`,
		`{"type":"thinking","content":"\ud800\udc00\ud800\u00"}`,
		`{"type":"tool_call","tool_input":{"a":"\udc00\ud83d\ude00","b":[{}]}}`,
		"{\"type\":\"thinking\",\"content\":\"\xff\xfe\u2028\x7f\"}",
		`{"type":"thinking",}`,
		`{"type":"thinking"} {}`,
		`{"type":"result","usage":{"model":"a"},"usage":{"num_turns":1},"TYPE":"x"}`,
		`{"type":"result","x":` + strings.Repeat("[", 199) + strings.Repeat("]", 199) + `}`,
		`[` + strings.Repeat(`{"a":`, 300),
		`null`,
		`{"type":"thinking","content":"a\u0000b","is_error":true,"session_id":"s"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// As a stream of lines.
		for _, max := range []int{DefaultMaxLineBytes, 40} {
			dec := NewDecoder(bytes.NewReader(data), WithMaxLineBytes(max))
			for n := 0; ; n++ {
				if n > len(data)+1 {
					t.Fatalf("more results than bytes")
				}
				m, err := dec.Decode()
				if err == io.EOF {
					break
				}
				if err != nil {
					var le *LineError
					if !errors.As(err, &le) || le.Line != dec.Line() || len(le.Prefix) > PrefixBytes {
						t.Fatalf("bad error %#v (line %d)", err, dec.Line())
					}
					if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrLineTooLong) {
						t.Fatalf("unexpected error %v", err)
					}
					continue
				}
				checkRoundTrip(t, m)
			}
		}

		// As one document.
		var m AgenticMessage
		err := m.UnmarshalJSON(data)
		if isNull(data) {
			return
		}
		var std map[string]any
		stdErr := unmarshalNumbers(data, &std)
		if err != nil {
			if stdErr == nil && strings.Contains(err.Error(), "invalid JSON") {
				t.Fatalf("encoding/json reads what we call invalid JSON: %v", err)
			}
			return
		}
		checkRoundTrip(t, &m)
		if stdErr != nil {
			t.Fatalf("decoded, but encoding/json fails: %v", stdErr)
		}
		compareWithStd(t, &m, std)
	})
}

// checkRoundTrip checks that m encodes, reads back as itself, and encodes to
// the same bytes again.
func checkRoundTrip(t *testing.T, m *AgenticMessage) {
	t.Helper()
	b1, err := AppendJSON(nil, m)
	if err != nil {
		t.Fatalf("decoded message does not encode: %v\n%#v", err, m)
	}
	if !json.Valid(b1) || !utf8.Valid(b1) || bytes.IndexByte(b1, '\n') >= 0 {
		t.Fatalf("bad encoding %q", b1)
	}
	m2, err := NewDecoder(bytes.NewReader(b1)).Decode()
	if err != nil {
		t.Fatalf("encoding does not decode: %v\n%s", err, b1)
	}
	if want := normalize(m); !reflect.DeepEqual(m2, want) {
		t.Fatalf("re-decoded message differs:\n%#v\n%#v\n%s", m2, want, b1)
	}
	b2, err := AppendJSON(nil, m2)
	if err != nil || !bytes.Equal(b1, b2) {
		t.Fatalf("second encoding differs: %v\n%s\n%s", err, b1, b2)
	}
}

// normalize returns m as it reads back after encoding: a cost that is not
// finite is written as null.
func normalize(m *AgenticMessage) *AgenticMessage {
	if m.Usage == nil || m.Usage.CostUSD == nil {
		return m
	}
	if c := *m.Usage.CostUSD; math.IsInf(c, 0) || math.IsNaN(c) {
		n, u := *m, *m.Usage
		u.CostUSD = nil
		n.Usage = &u
		return &n
	}
	return m
}

func unmarshalNumbers(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("data after the value")
	}
	return nil
}

// compareWithStd checks m against the same document read by encoding/json.
func compareWithStd(t *testing.T, m *AgenticMessage, std map[string]any) {
	t.Helper()
	if std["type"] != string(m.Type) {
		t.Fatalf("type %q, encoding/json reads %v", m.Type, std["type"])
	}
	for key, p := range map[string]*string{
		"content": m.Content, "tool_name": m.ToolName, "tool_output": m.ToolOutput,
		"tool_call_id": m.ToolCallID, "session_id": m.SessionID, "model": m.Model,
	} {
		compareString(t, key, p, std)
	}
	if v, _ := std["is_error"].(bool); v != m.IsError {
		t.Fatalf("is_error %v, encoding/json reads %v", m.IsError, std["is_error"])
	}
	if m.ToolInput == nil {
		if std["tool_input"] != nil {
			t.Fatalf("tool_input nil, encoding/json reads %v", std["tool_input"])
		}
	} else {
		var ti any
		if err := unmarshalNumbers(m.ToolInput, &ti); err != nil || !reflect.DeepEqual(ti, std["tool_input"]) {
			t.Fatalf("tool_input %s (%v), encoding/json reads %#v", m.ToolInput, err, std["tool_input"])
		}
	}
	su, _ := std["usage"].(map[string]any)
	if (m.Usage == nil) != (su == nil) {
		t.Fatalf("usage %v, encoding/json reads %v", m.Usage, std["usage"])
	}
	if m.Usage == nil {
		return
	}
	u := m.Usage
	compareString(t, "usage.model", u.Model, su)
	for key, p := range map[string]*int64{
		"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "cache_read_tokens": u.CacheReadTokens,
		"cache_creation_tokens": u.CacheCreationTokens, "duration_ms": u.DurationMs, "num_turns": u.NumTurns,
	} {
		n, _ := su[key].(json.Number)
		switch {
		case p == nil && n == "":
		case p == nil || n == "":
			t.Fatalf("usage.%s %v, encoding/json reads %v", key, p, su[key])
		default:
			if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
				if i != *p {
					t.Fatalf("usage.%s %d, encoding/json reads %s", key, *p, n)
				}
			} else if f, _ := strconv.ParseFloat(string(n), 64); f != float64(*p) {
				t.Fatalf("usage.%s %d, encoding/json reads %s", key, *p, n)
			}
		}
	}
	n, _ := su["cost_usd"].(json.Number)
	if (u.CostUSD == nil) != (n == "") {
		t.Fatalf("usage.cost_usd %v, encoding/json reads %v", u.CostUSD, su["cost_usd"])
	}
	if n != "" {
		if f, _ := strconv.ParseFloat(string(n), 64); f != *u.CostUSD {
			t.Fatalf("usage.cost_usd %v, encoding/json reads %s", *u.CostUSD, n)
		}
	}
}

func compareString(t *testing.T, key string, p *string, std map[string]any) {
	t.Helper()
	key = strings.TrimPrefix(key, "usage.")
	s, ok := std[key].(string)
	if (p == nil) == ok || (p != nil && *p != s) {
		t.Fatalf("%s %v, encoding/json reads %#v", key, p, std[key])
	}
}

// FuzzToolInput checks the compaction of tool_input against json.Compact.
func FuzzToolInput(f *testing.F) {
	for _, s := range []string{
		`{}`, ` { "a" : [ 1 , 2.5e-3 , true , null , "x" ] } `, `null`, `[]`, `{"a":}`,
		`{"s":"\ud800\u0041\udfff\ud83d\ude00"}`, "{\"s\":\"\xff\"}", `{"a":{"b":{"c":[[[]]]}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := appendCompactToolInput(nil, data)
		var want bytes.Buffer
		stdErr := json.Compact(&want, data)
		if err != nil {
			if stdErr == nil && strings.Contains(err.Error(), "invalid JSON") {
				t.Fatalf("json.Compact takes what we call invalid: %v", err)
			}
			return
		}
		if stdErr != nil {
			t.Fatalf("compacted %s, but json.Compact fails: %v", got, stdErr)
		}
		if !utf8.Valid(got) || !json.Valid(got) {
			t.Fatalf("bad output %q", got)
		}
		if utf8.Valid(data) && !bytes.Contains(data, []byte(`\u`)) && !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("got %s, json.Compact gives %s", got, want.Bytes())
		}
		// Compacting is idempotent.
		again, err := appendCompactToolInput(nil, got)
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("compacting again: %s, %v", again, err)
		}
	})
}

// FuzzAppendString checks string escaping: the output is valid JSON, reads
// back (with encoding/json and with the parser) as the input with invalid
// UTF-8 replaced, and escapes nothing but '"', '\\' and control characters.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "\x00\x1f\x7f", "\u2028<>&é😀", "\xff\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		var want string
		stdOut, _ := json.Marshal(s)
		if err := json.Unmarshal(stdOut, &want); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%q reads as %q, want %q", b, got, want)
		}
		p := parser{data: b}
		dec, err := p.appendString(nil)
		if err != nil || string(dec) != want || p.pos != len(b) {
			t.Fatalf("parser reads %q as %q, %v", b, dec, err)
		}
		// Apart from escapes, the output is the input's valid UTF-8.
		for i := 1; i < len(b)-1; i++ {
			if b[i] < 0x20 {
				t.Fatalf("raw control character in %q", b)
			}
			if b[i] == '\\' {
				i++
				if !strings.ContainsRune(`"\btnfru`, rune(b[i])) {
					t.Fatalf("unexpected escape in %q", b)
				}
			}
		}
	})
}
