package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// exampleLine is the reference line of the protocol.
const exampleLine = `{"type":"tool_call","content":null,"tool_name":"read_file","tool_input":{"path":"a.py"},"tool_output":null,"tool_call_id":"call_1","session_id":null,"is_error":false,"model":"m","usage":null}`

// goldenLines returns the lines of testdata/pydantic.jsonl, written by
// pydantic (see testdata/gen_golden.py).
func goldenLines(t testing.TB) [][]byte {
	t.Helper()
	data, err := os.ReadFile("testdata/pydantic.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(data, []byte("\n")) {
		t.Fatal("pydantic.jsonl does not end with a newline")
	}
	return bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n"))
}

// stdMessage mirrors AgenticMessage for encoding/json, as an independent
// reading of the same lines.
type stdMessage struct {
	Type       string          `json:"type"`
	Content    *string         `json:"content"`
	ToolName   *string         `json:"tool_name"`
	ToolInput  json.RawMessage `json:"tool_input"`
	ToolOutput *string         `json:"tool_output"`
	ToolCallID *string         `json:"tool_call_id"`
	SessionID  *string         `json:"session_id"`
	IsError    bool            `json:"is_error"`
	Model      *string         `json:"model"`
	Usage      *stdUsage       `json:"usage"`
}

type stdUsage struct {
	InputTokens         *int64   `json:"input_tokens"`
	OutputTokens        *int64   `json:"output_tokens"`
	CacheReadTokens     *int64   `json:"cache_read_tokens"`
	CacheCreationTokens *int64   `json:"cache_creation_tokens"`
	CostUSD             *float64 `json:"cost_usd"`
	DurationMs          *int64   `json:"duration_ms"`
	NumTurns            *int64   `json:"num_turns"`
	Model               *string  `json:"model"`

	ContextTokens           *int64   `json:"context_tokens"`
	ContextWindowTokens     *int64   `json:"context_window_tokens"`
	ContextUtilization      *float64 `json:"context_utilization"`
	ContextWarningThreshold *float64 `json:"context_warning_threshold"`
	ContextWindowWarning    *bool    `json:"context_window_warning"`
}

// fromStd converts a message read by encoding/json from line, with
// tool_input compacted.
func fromStd(t testing.TB, s *stdMessage, line []byte) *AgenticMessage {
	t.Helper()
	m := &AgenticMessage{
		Type: MessageType(s.Type), Content: s.Content, ToolName: s.ToolName, ToolOutput: s.ToolOutput,
		ToolCallID: s.ToolCallID, SessionID: s.SessionID, IsError: s.IsError, Model: s.Model,
	}
	if len(s.ToolInput) > 0 && string(s.ToolInput) != "null" {
		var buf bytes.Buffer
		if err := json.Compact(&buf, s.ToolInput); err != nil {
			t.Fatal(err)
		}
		m.ToolInput = buf.Bytes()
	}
	if su := s.Usage; su != nil {
		m.Usage = &DriverUsage{
			InputTokens: su.InputTokens, OutputTokens: su.OutputTokens, CacheReadTokens: su.CacheReadTokens,
			CacheCreationTokens: su.CacheCreationTokens, CostUSD: su.CostUSD, DurationMs: su.DurationMs,
			NumTurns: su.NumTurns, Model: su.Model,
			ContextTokens: su.ContextTokens, ContextWindowTokens: su.ContextWindowTokens,
			ContextUtilization: su.ContextUtilization, ContextWarningThreshold: su.ContextWarningThreshold,
			ContextWindowWarning: su.ContextWindowWarning,
		}
		// Whether the context keys were there, null or not.
		var keys struct{ Usage map[string]json.RawMessage }
		if err := json.Unmarshal(line, &keys); err != nil {
			t.Fatal(err)
		}
		for k := range keys.Usage {
			if strings.HasPrefix(k, "context_") {
				m.Usage.ContextFields = true
			}
		}
	}
	return m
}

func TestGoldenRoundTrip(t *testing.T) {
	lines := goldenLines(t)
	if !bytes.Equal(lines[0], []byte(exampleLine)) {
		t.Fatalf("the first golden line is not the example:\n%s", lines[0])
	}
	data, _ := os.ReadFile("testdata/pydantic.jsonl")
	dec := NewDecoder(bytes.NewReader(data))
	for i, line := range lines {
		m, err := dec.Decode()
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if dec.Line() != i+1 {
			t.Errorf("Line() = %d, want %d", dec.Line(), i+1)
		}
		got, err := AppendJSON(nil, m)
		if err != nil {
			t.Fatalf("line %d: encode: %v", i+1, err)
		}
		if !bytes.Equal(got, line) {
			t.Errorf("line %d does not round-trip:\n got %s\nwant %s", i+1, got, line)
		}

		// encoding/json reads the same values.
		var s stdMessage
		if err := json.Unmarshal(line, &s); err != nil {
			t.Fatalf("line %d: encoding/json: %v", i+1, err)
		}
		if want := fromStd(t, &s, line); !reflect.DeepEqual(m, want) {
			t.Errorf("line %d: decoded\n%s\nencoding/json reads\n%s", i+1, dump(m), dump(want))
		}

		// MarshalJSON and UnmarshalJSON agree with the Decoder and AppendJSON.
		var m2 AgenticMessage
		if err := json.Unmarshal(line, &m2); err != nil {
			t.Fatalf("line %d: UnmarshalJSON: %v", i+1, err)
		}
		if !reflect.DeepEqual(&m2, m) {
			t.Errorf("line %d: UnmarshalJSON gives\n%s\nDecode gives\n%s", i+1, dump(&m2), dump(m))
		}
		if b, err := m2.MarshalJSON(); err != nil || !bytes.Equal(b, line) {
			t.Errorf("line %d: MarshalJSON = %s, %v", i+1, b, err)
		}
	}
	if _, err := dec.Decode(); err != io.EOF {
		t.Fatalf("after the last line: %v, want io.EOF", err)
	}
}

func TestGoldenEncoder(t *testing.T) {
	lines := goldenLines(t)
	var buf bytes.Buffer
	enc := NewEncoder(&buf)
	for _, line := range lines {
		var m AgenticMessage
		if err := m.UnmarshalJSON(line); err != nil {
			t.Fatal(err)
		}
		if err := enc.Encode(&m); err != nil {
			t.Fatal(err)
		}
	}
	want, _ := os.ReadFile("testdata/pydantic.jsonl")
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("Encoder output differs from pydantic.jsonl")
	}
}

// TestFloatGolden checks appendFloat against what pydantic writes for the
// floats of testdata/floats.txt.
func TestFloatGolden(t *testing.T) {
	f, err := os.Open("testdata/floats.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	n := 0
	for s.Scan() {
		repr, want, ok := strings.Cut(s.Text(), "\t")
		if !ok {
			t.Fatalf("bad line %q", s.Text())
		}
		v, err := strconv.ParseFloat(repr, 64)
		if err != nil {
			t.Fatal(err)
		}
		n++
		if got := string(appendFloat(nil, v)); got != want {
			t.Errorf("%s: got %s, pydantic writes %s", repr, got, want)
		}
		if want == "null" {
			continue
		}
		// And it reads back as the same float.
		line := `{"type":"usage","usage":{"cost_usd":` + want + `}}`
		var m AgenticMessage
		if err := m.UnmarshalJSON([]byte(line)); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if got := *m.Usage.CostUSD; got != v || math.Signbit(got) != math.Signbit(v) {
			t.Errorf("%s reads as %v, want %v", want, got, v)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("only %d floats", n)
	}
}

func TestAppendFloat(t *testing.T) {
	for _, tt := range []struct {
		in   float64
		want string
	}{
		{0.003, "0.003"},
		{0, "0.0"},
		{math.Copysign(0, -1), "-0.0"},
		{123, "123.0"},
		{1e-7, "1e-7"},
		{1e-6, "1e-6"},
		{0.00001, "0.00001"},
		{0.000012345, "0.000012345"},
		{1e15, "1000000000000000.0"},
		{1e16, "1e+16"},
		{1.2345678901234568e+16, "1.2345678901234568e+16"},
		{1234567890123456.8, "1234567890123456.8"},
		{0.30000000000000004, "0.30000000000000004"},
		{1.5e+300, "1.5e+300"},
		{-2.5e-300, "-2.5e-300"},
		{5e-324, "5e-324"},
		{math.MaxFloat64, "1.7976931348623157e+308"},
		{math.NaN(), "null"},
		{math.Inf(1), "null"},
		{math.Inf(-1), "null"},
	} {
		if got := string(appendFloat(nil, tt.in)); got != tt.want {
			t.Errorf("appendFloat(%v) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, tt := range []struct {
		in, want string
	}{
		{"", `""`},
		{"plain", `"plain"`},
		{`"q" \ /`, `"\"q\" \\ /"`},
		{"\x00\x01\b\t\n\v\f\r\x1b\x1f", `"\u0000\u0001\b\t\n\u000b\f\r\u001b\u001f"`},
		{"<>&", `"<>&"`},
		{"\u2028\u2029\x7f\u0085", "\"\u2028\u2029\x7f\u0085\""},
		{"é中😀", `"é中😀"`},
		{"bad \xff\xfe utf8 \xe2\x82", "\"bad \uFFFD\uFFFD utf8 \uFFFD\uFFFD\""},
		{"\ufffd", "\"\ufffd\""},
	} {
		if got := string(AppendString(nil, tt.in)); got != tt.want {
			t.Errorf("AppendString(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestDecodeExample(t *testing.T) {
	m, err := NewDecoder(strings.NewReader(exampleLine + "\n")).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if m.Type != ToolCall {
		t.Errorf("Type = %q", m.Type)
	}
	if m.ToolName == nil || *m.ToolName != "read_file" {
		t.Errorf("ToolName = %v", m.ToolName)
	}
	if string(m.ToolInput) != `{"path":"a.py"}` {
		t.Errorf("ToolInput = %s", m.ToolInput)
	}
	if m.ToolCallID == nil || *m.ToolCallID != "call_1" {
		t.Errorf("ToolCallID = %v", m.ToolCallID)
	}
	if m.Model == nil || *m.Model != "m" {
		t.Errorf("Model = %v", m.Model)
	}
	if m.Content != nil || m.ToolOutput != nil || m.SessionID != nil || m.Usage != nil || m.IsError {
		t.Errorf("unexpected fields set: %s", dump(m))
	}
}

func TestDecodeValues(t *testing.T) {
	for _, tt := range []struct {
		name, line string
		want       *AgenticMessage
	}{
		{"minimal", `{"type":"thinking"}`, &AgenticMessage{Type: Thinking}},
		{"spaces", " { \"type\" :\t\"result\" , \"content\" : \"ok\" } ", &AgenticMessage{Type: Result, Content: new("ok")}},
		{"unknown keys", `{"extra":{"a":[1,{"b":null}],"c":"\u00e9"},"type":"result","more":[true,false,-1.5e3],"n":null}`,
			&AgenticMessage{Type: Result}},
		{"type last", `{"content":"x","type":"usage"}`, &AgenticMessage{Type: Usage, Content: new("x")}},
		{"repeated key, last wins", `{"type":"thinking","content":"a","content":"b","type":"result"}`,
			&AgenticMessage{Type: Result, Content: new("b")}},
		{"repeated key, null wins", `{"type":"result","content":"a","content":null}`, &AgenticMessage{Type: Result}},
		{"all null", `{"type":"thinking","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":null}`,
			&AgenticMessage{Type: Thinking}},
		{"is_error", `{"type":"tool_result","is_error":true}`, &AgenticMessage{Type: ToolResult, IsError: true}},
		{"escapes", `{"type":"thinking","content":"\"\\\/\b\f\n\r\t\u00e9\u4e2d\ud83d\ude00\u2028"}`,
			&AgenticMessage{Type: Thinking, Content: new("\"\\/\b\f\n\r\t\u00e9\u4e2d\U0001F600\u2028")}},
		{"escaped key and type", `{"typ\u0065":"t\u0068inking"}`, &AgenticMessage{Type: Thinking}},
		{"lone surrogates", `{"type":"thinking","content":"a\ud800b\udc00c\ud800"}`,
			&AgenticMessage{Type: Thinking, Content: new("a\uFFFDb\uFFFDc\uFFFD")}},
		{"invalid UTF-8", "{\"type\":\"thinking\",\"content\":\"a\xffb\xe2\x82\"}",
			&AgenticMessage{Type: Thinking, Content: new("a\uFFFDb\uFFFD\uFFFD")}},
		{"raw DEL and U+2028", "{\"type\":\"thinking\",\"content\":\"\x7f\u2028\"}",
			&AgenticMessage{Type: Thinking, Content: new("\x7f\u2028")}},
		{"empty strings", `{"type":"result","content":"","model":""}`, &AgenticMessage{Type: Result, Content: new(""), Model: new("")}},
		{"tool_input compacted", "{\"type\":\"tool_call\",\"tool_input\": { \"b\" : [ 1 , 2 ] ,\t\r\"a\" : { } , \"s\":\" x \" } }",
			&AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`{"b":[1,2],"a":{},"s":" x "}`)}},
		{"tool_input escapes kept", `{"type":"tool_call","tool_input":{"s":"\u00e9\/\u003c\ud83d\ude00"}}`,
			&AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`{"s":"\u00e9\/\u003c\ud83d\ude00"}`)}},
		{"tool_input lone surrogate", `{"type":"tool_call","tool_input":{"s":"\ud800x\uDC00\ud800\u0041"}}`,
			&AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`{"s":"\ufffdx\ufffd\ufffd\u0041"}`)}},
		{"tool_input invalid UTF-8", "{\"type\":\"tool_call\",\"tool_input\":{\"s\":\"\xff\"}}",
			&AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage("{\"s\":\"\uFFFD\"}")}},
		{"usage", `{"type":"usage","usage":{"input_tokens":1,"output_tokens":-2,"cache_read_tokens":0,"cache_creation_tokens":9223372036854775807,"cost_usd":0.25,"duration_ms":-9223372036854775808,"num_turns":3,"model":"x"}}`,
			&AgenticMessage{Type: Usage, Usage: &DriverUsage{InputTokens: new(int64(1)), OutputTokens: new(int64(-2)),
				CacheReadTokens: new(int64(0)), CacheCreationTokens: new(int64(math.MaxInt64)), CostUSD: new(0.25),
				DurationMs: new(int64(math.MinInt64)), NumTurns: new(int64(3)), Model: new("x")}}},
		{"usage empty", `{"type":"usage","usage":{}}`, &AgenticMessage{Type: Usage, Usage: &DriverUsage{}}},
		{"usage unknown keys", `{"type":"usage","usage":{"x":[{}],"num_turns":2,"y":null}}`,
			&AgenticMessage{Type: Usage, Usage: &DriverUsage{NumTurns: new(int64(2))}}},
		{"integral floats for ints", `{"type":"usage","usage":{"input_tokens":1.0,"output_tokens":1e3,"num_turns":-0.0,"duration_ms":2.5E1}}`,
			&AgenticMessage{Type: Usage, Usage: &DriverUsage{InputTokens: new(int64(1)), OutputTokens: new(int64(1000)),
				NumTurns: new(int64(0)), DurationMs: new(int64(25))}}},
		{"int cost", `{"type":"usage","usage":{"cost_usd":5}}`, &AgenticMessage{Type: Usage, Usage: &DriverUsage{CostUSD: new(5.0)}}},
		{"huge cost", `{"type":"usage","usage":{"cost_usd":-1e400}}`, &AgenticMessage{Type: Usage, Usage: &DriverUsage{CostUSD: new(math.Inf(-1))}}},
		{"tiny cost", `{"type":"usage","usage":{"cost_usd":1e-400}}`, &AgenticMessage{Type: Usage, Usage: &DriverUsage{CostUSD: new(0.0)}}},
		{"longest numbers", `{"type":"tool_call","x":-1` + strings.Repeat("0", 4298) + `,"tool_input":{"n":[1` + strings.Repeat("0", 4299) + `,1.` + strings.Repeat("0", 5000) + `]}}`,
			&AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`{"n":[1` + strings.Repeat("0", 4299) + `,1.` + strings.Repeat("0", 5000) + `]}`)}},
		{"usage model and message model", `{"type":"usage","model":"a","usage":{"model":"b"}}`,
			&AgenticMessage{Type: Usage, Model: new("a"), Usage: &DriverUsage{Model: new("b")}}},
		{"usage context fields", `{"type":"usage","usage":{"context_tokens":7,"context_window_tokens":8.0,"context_utilization":1,"context_warning_threshold":0.8,"context_window_warning":true}}`,
			&AgenticMessage{Type: Usage, Usage: &DriverUsage{ContextTokens: new(int64(7)), ContextWindowTokens: new(int64(8)),
				ContextUtilization: new(1.0), ContextWarningThreshold: new(0.8), ContextWindowWarning: new(true), ContextFields: true}}},
		{"usage one context field null", `{"type":"usage","usage":{"num_turns":1,"context_window_warning":null}}`,
			&AgenticMessage{Type: Usage, Usage: &DriverUsage{NumTurns: new(int64(1)), ContextFields: true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewDecoder(strings.NewReader(tt.line)).Decode()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, tt.want) {
				t.Errorf("got\n%s\nwant\n%s", dump(m), dump(tt.want))
			}
		})
	}
}

func TestDecoderLines(t *testing.T) {
	const (
		a = `{"type":"thinking","content":"a"}`
		b = `{"type":"result","content":"b"}`
	)
	for _, tt := range []struct {
		name, input string
		want        []string // contents
		lines       []int    // Line() after each message
		finalLine   int
	}{
		{"empty", "", nil, nil, 0},
		{"one", a + "\n", []string{"a"}, []int{1}, 1},
		{"no final newline", a + "\n" + b, []string{"a", "b"}, []int{1, 2}, 2},
		{"CRLF", a + "\r\n" + b + "\r\n", []string{"a", "b"}, []int{1, 2}, 2},
		{"CRLF without final newline", a + "\r\n" + b + "\r", []string{"a", "b"}, []int{1, 2}, 2},
		{"blank lines", "\n \n\t\r\n" + a + "\n\n  \n" + b + "\n\n", []string{"a", "b"}, []int{4, 7}, 8},
		{"only blank lines", "\n\n \n", nil, nil, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dec := NewDecoder(strings.NewReader(tt.input))
			var got []string
			var lines []int
			for {
				m, err := dec.Decode()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, *m.Content)
				lines = append(lines, dec.Line())
			}
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(lines, tt.lines) {
				t.Errorf("got %q at lines %v, want %q at lines %v", got, lines, tt.want, tt.lines)
			}
			if dec.Line() != tt.finalLine {
				t.Errorf("final Line() = %d, want %d", dec.Line(), tt.finalLine)
			}
			if _, err := dec.Decode(); err != io.EOF {
				t.Errorf("Decode after EOF: %v", err)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	const good = `{"type":"result","content":"fine"}`
	for _, tt := range []struct {
		name, line, want string
	}{
		{"bad type", `{"type":"foo","content":"x"}`,
			`invalid message: unknown type "foo" (allowed: thinking, tool_call, tool_result, result, usage)`},
		{"empty type", `{"type":""}`, `invalid message: unknown type ""`},
		{"type case", `{"type":"Thinking"}`, `unknown type "Thinking"`},
		{"missing type", `{"content":"x"}`, `invalid message: missing type (allowed: thinking, tool_call, tool_result, result, usage)`},
		{"null type", `{"type":null}`, `invalid message: type must be a string, got null`},
		{"number type", `{"type":1}`, `invalid message: type must be a string, got number`},
		{"tool_input array", `{"type":"tool_call","tool_input":[1]}`, `invalid message: tool_input must be a JSON object or null, got array`},
		{"tool_input string", `{"type":"tool_call","tool_input":"{}"}`, `tool_input must be a JSON object or null, got string`},
		{"tool_input number", `{"type":"tool_call","tool_input":0}`, `tool_input must be a JSON object or null, got number`},
		{"content number", `{"type":"result","content":42}`, `invalid message: content must be a string or null, got number`},
		{"tool_name object", `{"type":"result","tool_name":{}}`, `tool_name must be a string or null, got object`},
		{"tool_output bool", `{"type":"result","tool_output":true}`, `tool_output must be a string or null, got boolean`},
		{"tool_call_id array", `{"type":"result","tool_call_id":[]}`, `tool_call_id must be a string or null, got array`},
		{"session_id number", `{"type":"result","session_id":1}`, `session_id must be a string or null, got number`},
		{"model number", `{"type":"result","model":1}`, `model must be a string or null, got number`},
		{"is_error null", `{"type":"result","is_error":null}`, `invalid message: is_error must be true or false, got null`},
		{"is_error number", `{"type":"result","is_error":1}`, `is_error must be true or false, got number`},
		{"is_error string", `{"type":"result","is_error":"true"}`, `is_error must be true or false, got string`},
		{"usage array", `{"type":"usage","usage":[]}`, `invalid message: usage must be an object or null, got array`},
		{"usage int string", `{"type":"usage","usage":{"input_tokens":"12"}}`, `invalid message: usage.input_tokens must be an integer or null, got string`},
		{"usage int fraction", `{"type":"usage","usage":{"num_turns":1.5}}`, `invalid message: usage.num_turns must be an integer, got 1.5`},
		{"usage int too big", `{"type":"usage","usage":{"duration_ms":9223372036854775808}}`,
			`invalid message: usage.duration_ms: 9223372036854775808 is out of range for a 64-bit integer`},
		{"usage int float too big", `{"type":"usage","usage":{"output_tokens":1e19}}`, `usage.output_tokens: 1e19 is out of range`},
		{"usage cost string", `{"type":"usage","usage":{"cost_usd":"0.5"}}`, `invalid message: usage.cost_usd must be a number or null, got string`},
		{"usage model number", `{"type":"usage","usage":{"model":5}}`, `usage.model must be a string or null, got number`},
		{"usage context int fraction", `{"type":"usage","usage":{"context_tokens":0.5}}`, `usage.context_tokens must be an integer, got 0.5`},
		{"usage context float string", `{"type":"usage","usage":{"context_utilization":"1"}}`, `usage.context_utilization must be a number or null, got string`},
		{"usage context bool number", `{"type":"usage","usage":{"context_window_warning":1}}`, `usage.context_window_warning must be true or false, got number`},
		{"not an object", `["type","thinking"]`, `invalid message: a message must be a JSON object, got array`},
		{"a string", `"thinking"`, `a message must be a JSON object, got string`},
		{"truncated", `{"type":"thinking","content":"abc`, `invalid message: invalid JSON: unexpected end of input in string`},
		{"truncated object", `{"type":"thinking"`, `invalid JSON: unexpected end of input after an object member`},
		{"trailing garbage", `{"type":"thinking"} x`, `invalid JSON: unexpected 'x' after the object at column 21`},
		{"two objects", `{"type":"thinking"}{"type":"thinking"}`, `invalid JSON: unexpected '{' after the object at column 20`},
		{"trailing comma", `{"type":"thinking",}`, `invalid JSON: unexpected '}' where a key was expected at column 20`},
		{"missing colon", `{"type" "thinking"}`, `invalid JSON: unexpected '"' after a key`},
		{"single quotes", `{'type':'thinking'}`, `invalid JSON: unexpected '\'' where a key was expected at column 2`},
		{"control char in string", "{\"type\":\"thinking\",\"content\":\"a\x01b\"}", `invalid JSON: unexpected byte 0x01 in string at column 32`},
		{"bad escape", `{"type":"thinking","content":"\x"}`, `invalid JSON: unexpected 'x' in string escape`},
		{"bad unicode escape", `{"type":"thinking","content":"\u12g4"}`, `invalid JSON: unexpected 'g' in \u escape at column 35`},
		{"short unicode escape", `{"type":"thinking","content":"\u12"}`, `invalid JSON: unexpected '"' in \u escape at column 35`},
		{"leading zero", `{"type":"usage","usage":{"num_turns":01}}`, `invalid JSON: unexpected '1' after an object member`},
		{"bad number", `{"type":"usage","usage":{"num_turns":-}}`, `invalid JSON: unexpected '}' in number`},
		{"bad literal", `{"type":"result","is_error":tru}`, `invalid JSON: unexpected '}' in literal`},
		{"NaN", `{"type":"usage","usage":{"cost_usd":NaN}}`, `invalid JSON: unexpected 'N' where a value was expected`},
		{"bad value in unknown key", `{"type":"result","x":[1,]}`, `invalid JSON: unexpected ']' where a value was expected`},
		{"bad tool_input", `{"type":"tool_call","tool_input":{"a":1 "b":2}}`, `invalid JSON: unexpected '"' in object`},
		{"too deep", `{"type":"result","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`,
			`invalid message: nested deeper than 200 levels at column 221`},
		{"integer part too long", `{"type":"result","x":[-1` + strings.Repeat("0", 4299) + `]}`,
			`invalid message: number out of range at column 23 (pydantic reads at most 4300 characters before the decimal point)`},
		{"float integer part too long", `{"type":"tool_call","tool_input":{"a":1` + strings.Repeat("0", 4300) + `.5}}`,
			`invalid message: number out of range at column 39`},
		{"invalid UTF-8 outside strings", "{\"type\":\"result\"}\xff", `invalid JSON: unexpected byte 0xff after the object`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			input := good + "\n" + tt.line + "\n" + good + "\n"
			dec := NewDecoder(strings.NewReader(input))
			if _, err := dec.Decode(); err != nil {
				t.Fatal(err)
			}
			_, err := dec.Decode()
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("got %v (%T), want a *LineError", err, err)
			}
			if le.Line != 2 || dec.Line() != 2 {
				t.Errorf("Line = %d, Decoder.Line() = %d, want 2", le.Line, dec.Line())
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not match ErrInvalid")
			}
			if errors.Is(err, ErrLineTooLong) {
				t.Errorf("error matches ErrLineTooLong")
			}
			prefix := tt.line
			if len(prefix) > PrefixBytes {
				prefix = prefix[:PrefixBytes]
			}
			if string(le.Prefix) != prefix {
				t.Errorf("Prefix = %q, want %q", le.Prefix, prefix)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "line 2: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\ndoes not contain %q", msg, tt.want)
			}
			if !strings.HasSuffix(msg, ": "+string(appendPrintable(nil, []byte(prefix)))) {
				t.Errorf("error %q does not end with the line", msg)
			}
			// The decoder goes on with the next line.
			m, err := dec.Decode()
			if err != nil || *m.Content != "fine" || dec.Line() != 3 {
				t.Fatalf("next line: %v, %v (line %d)", m, err, dec.Line())
			}

			// UnmarshalJSON gives the same error.
			var um AgenticMessage
			if err := um.UnmarshalJSON([]byte(tt.line)); err == nil || err.Error() != le.Err.Error() {
				t.Errorf("UnmarshalJSON: %v, want %v", err, le.Err)
			}
		})
	}
}

func TestLineErrorMessage(t *testing.T) {
	bad := `{"type":"foo","content":"` + strings.Repeat("x", 1024) + `"}`
	_, err := NewDecoder(strings.NewReader("\n\n" + bad + "\n")).Decode()
	var le *LineError
	if !errors.As(err, &le) {
		t.Fatal(err)
	}
	if string(le.Prefix) != bad[:200] {
		t.Errorf("Prefix = %q, want the first 200 bytes", le.Prefix)
	}
	want := `line 3: invalid message: unknown type "foo" (allowed: thinking, tool_call, tool_result, result, usage): ` + bad[:200]
	if err.Error() != want {
		t.Errorf("error\n%s\nwant\n%s", err, want)
	}

	// Unprintable bytes of the prefix are escaped in the message.
	le = &LineError{Line: 1, Prefix: []byte("a\x1b[31m\tb\x7f\xff\u0085é\xe2\x82"), Err: errors.New("e")}
	if got, want := le.Error(), `line 1: e: a\x1b[31m`+"\t"+`b\x7f\xff\xc2\x85é\xe2\x82`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// Without a prefix, no trailing colon.
	le = &LineError{Line: 4, Err: errors.New("read: boom")}
	if got := le.Error(); got != "line 4: read: boom" {
		t.Errorf("got %q", got)
	}
}

func TestOverlongLine(t *testing.T) {
	good := `{"type":"result","content":"fine"}`
	for _, tt := range []struct {
		name    string
		longLen int
	}{
		{"shorter than the read buffer", 300},
		{"longer than the read buffer", 3 * readBufferSize},
	} {
		t.Run(tt.name, func(t *testing.T) {
			long := `{"type":"thinking","content":"` + strings.Repeat("y", tt.longLen) + `"}`
			input := good + "\n" + long + "\n" + good + "\r\n" + long
			dec := NewDecoder(strings.NewReader(input), WithMaxLineBytes(100))
			if _, err := dec.Decode(); err != nil {
				t.Fatal(err)
			}
			for _, line := range []int{2, 4} {
				_, err := dec.Decode()
				var le *LineError
				if !errors.As(err, &le) || !errors.Is(err, ErrLineTooLong) || errors.Is(err, ErrInvalid) {
					t.Fatalf("got %v, want a too-long LineError", err)
				}
				want := fmt.Sprintf("line %d: longer than the 100-byte limit: %s", line, long[:200])
				if le.Line != line || err.Error() != want {
					t.Errorf("got %q\nwant %q", err, want)
				}
				if cap(dec.pending) > 1024 {
					t.Errorf("the decoder holds %d bytes of the long line", cap(dec.pending))
				}
				if line == 2 {
					m, err := dec.Decode()
					if err != nil || *m.Content != "fine" || dec.Line() != 3 {
						t.Fatalf("next line: %v, %v (line %d)", m, err, dec.Line())
					}
				}
			}
			if _, err := dec.Decode(); err != io.EOF {
				t.Fatalf("got %v, want io.EOF", err)
			}
		})
	}

	// The limit does not count the line ending.
	line := `{"type":"result","content":"` + strings.Repeat("z", 70) + `"}`
	for _, input := range []string{line, line + "\n", line + "\r\n"} {
		dec := NewDecoder(strings.NewReader(input), WithMaxLineBytes(len(line)))
		if _, err := dec.Decode(); err != nil {
			t.Errorf("%q: %v", input, err)
		}
		dec = NewDecoder(strings.NewReader(input), WithMaxLineBytes(len(line)-1))
		if _, err := dec.Decode(); !errors.Is(err, ErrLineTooLong) {
			t.Errorf("%q with a limit one less: %v", input, err)
		}
	}
}

func TestMaxLineBytesDefault(t *testing.T) {
	for _, n := range []int{0, -1} {
		if d := NewDecoder(strings.NewReader(""), WithMaxLineBytes(n)); d.max != DefaultMaxLineBytes {
			t.Errorf("WithMaxLineBytes(%d): max = %d", n, d.max)
		}
	}
	if d := NewDecoder(strings.NewReader("")); d.max != 16<<20 {
		t.Errorf("default max = %d", d.max)
	}
	// A line longer than the read buffer but within the limit decodes.
	long := strings.Repeat("é", readBufferSize)
	m, err := NewDecoder(strings.NewReader(`{"type":"thinking","content":"` + long + `"}`)).Decode()
	if err != nil || *m.Content != long {
		t.Fatalf("long line: %v", err)
	}
}

// stepReader returns its steps one Read at a time: data, then err.
type stepReader struct {
	steps []step
}

type step struct {
	data string
	err  error
}

func (r *stepReader) Read(p []byte) (int, error) {
	if len(r.steps) == 0 {
		return 0, io.EOF
	}
	s := r.steps[0]
	r.steps = r.steps[1:]
	return copy(p, s.data), s.err
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := &stepReader{steps: []step{
		{data: `{"type":"result","content":"one"}` + "\n" + `{"type":"thi`, err: boom},
		{data: `nking","content":"two"}` + "\n"},
		{err: boom},
		{data: `{"type":"result","content":"three"}`},
	}}
	dec := NewDecoder(r)
	m, err := dec.Decode()
	if err != nil || *m.Content != "one" {
		t.Fatalf("first: %v, %v", m, err)
	}
	_, err = dec.Decode()
	var le *LineError
	if !errors.As(err, &le) || !errors.Is(err, boom) || le.Line != 2 {
		t.Fatalf("got %v, want boom at line 2", err)
	}
	if got, want := err.Error(), `line 2: read: boom: {"type":"thi`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if errors.Is(err, ErrInvalid) {
		t.Errorf("a read error matches ErrInvalid")
	}
	// The line goes on where it was cut.
	m, err = dec.Decode()
	if err != nil || m.Type != Thinking || *m.Content != "two" || dec.Line() != 2 {
		t.Fatalf("second: %v, %v, line %d", m, err, dec.Line())
	}
	_, err = dec.Decode()
	if !errors.As(err, &le) || !errors.Is(err, boom) || le.Line != 3 || err.Error() != "line 3: read: boom" {
		t.Fatalf("got %v, want boom at line 3", err)
	}
	m, err = dec.Decode()
	if err != nil || *m.Content != "three" || dec.Line() != 3 {
		t.Fatalf("third: %v, %v", m, err)
	}
	if _, err := dec.Decode(); err != io.EOF {
		t.Fatalf("got %v, want io.EOF", err)
	}

	// A line that a read error cuts beyond the limit is reported as too long.
	r = &stepReader{steps: []step{
		{data: `{"type":"thinking","content":"`, err: boom},
		{data: `long"}` + "\n" + `{"type":"result"}`},
	}}
	dec = NewDecoder(r, WithMaxLineBytes(20))
	if _, err := dec.Decode(); !errors.Is(err, ErrLineTooLong) || dec.Line() != 1 {
		t.Fatalf("got %v, want too long at line 1", err)
	}
	if m, err := dec.Decode(); err != nil || m.Type != Result || dec.Line() != 2 {
		t.Fatalf("got %v, %v at line %d, want the result at line 2", m, err, dec.Line())
	}
}

// recordingWriter records every Write call.
type recordingWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func TestEncoderSingleWrite(t *testing.T) {
	w := &recordingWriter{}
	enc := NewEncoder(w)
	msgs := []*AgenticMessage{
		{Type: Thinking, Content: new(strings.Repeat("long ", 10000))},
		{Type: ToolCall, ToolName: new("read_file"), ToolInput: json.RawMessage(`{"path": "a.py"}`), ToolCallID: new("call_1"), Model: new("m")},
		{Type: Usage, Usage: &DriverUsage{InputTokens: new(int64(1))}},
	}
	for _, m := range msgs {
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.writes) != len(msgs) {
		t.Fatalf("%d writes for %d messages", len(w.writes), len(msgs))
	}
	for i, b := range w.writes {
		want, _ := AppendJSON(nil, msgs[i])
		if !bytes.Equal(b, append(want, '\n')) {
			t.Errorf("write %d = %.80q...", i, b)
		}
	}
	if string(w.writes[1]) != exampleLine+"\n" {
		t.Errorf("the example encodes as %s", w.writes[1])
	}
}

// lineCheckingWriter fails the test unless every Write is exactly one line.
// It is not safe for concurrent use on purpose: the Encoder must serialize.
type lineCheckingWriter struct {
	t     *testing.T
	lines [][]byte
}

func (w *lineCheckingWriter) Write(p []byte) (int, error) {
	if bytes.IndexByte(p, '\n') != len(p)-1 {
		w.t.Errorf("a write that is not one line: %.100q", p)
	}
	w.lines = append(w.lines, bytes.Clone(p))
	return len(p), nil
}

func TestEncoderConcurrent(t *testing.T) {
	const goroutines, perGoroutine = 16, 200
	w := &lineCheckingWriter{t: t}
	enc := NewEncoder(w)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				content := fmt.Sprintf("%d/%d/%s", g, i, strings.Repeat("x", (g*i*37)%5000))
				if err := enc.Encode(&AgenticMessage{Type: Thinking, Content: &content}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	if len(w.lines) != goroutines*perGoroutine {
		t.Fatalf("%d lines, want %d", len(w.lines), goroutines*perGoroutine)
	}
	dec := NewDecoder(bytes.NewReader(bytes.Join(w.lines, nil)))
	seen := map[string]bool{}
	for {
		m, err := dec.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		parts := strings.SplitN(*m.Content, "/", 3)
		g, _ := strconv.Atoi(parts[0])
		i, _ := strconv.Atoi(parts[1])
		if len(parts[2]) != (g*i*37)%5000 || strings.Trim(parts[2], "x") != "" {
			t.Errorf("message %d/%d has a bad content", g, i)
		}
		seen[parts[0]+"/"+parts[1]] = true
	}
	if len(seen) != goroutines*perGoroutine {
		t.Errorf("%d distinct messages", len(seen))
	}
}

type failingWriter struct{ n int }

func (w failingWriter) Write(p []byte) (int, error) {
	if w.n < len(p) {
		return w.n, nil
	}
	return len(p), nil
}

func TestEncodeErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    *AgenticMessage
		want string
	}{
		{"nil", nil, "invalid message: nil message"},
		{"no type", &AgenticMessage{}, `invalid message: unknown type "" (allowed: thinking, tool_call, tool_result, result, usage)`},
		{"unknown type", &AgenticMessage{Type: "tool_use"}, `invalid message: unknown type "tool_use" (allowed: thinking, tool_call, tool_result, result, usage)`},
		{"tool_input array", &AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`[1,2]`)},
			"invalid message: tool_input must be a JSON object or null, got array"},
		{"tool_input string", &AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(` "x"`)},
			"invalid message: tool_input must be a JSON object or null, got string"},
		{"tool_input invalid", &AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`{"a":}`)},
			"invalid message: tool_input: invalid JSON: unexpected '}' where a value was expected at column 6"},
		{"tool_input two values", &AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`{} {}`)},
			"invalid message: tool_input: invalid JSON: unexpected '{' after the value at column 4"},
		{"tool_input blank", &AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(`  `)},
			"invalid message: tool_input: invalid JSON: unexpected end of input where a value was expected"},
		{"tool_input too deep", &AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200))},
			"invalid message: tool_input: nested deeper than 200 levels"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &recordingWriter{}
			err := NewEncoder(w).Encode(tt.m)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) {
				t.Errorf("got %v, want %q", err, tt.want)
			}
			if len(w.writes) != 0 {
				t.Errorf("wrote %q", w.writes)
			}
			dst := []byte("prefix")
			got, err := AppendJSON(dst, tt.m)
			if err == nil || string(got) != "prefix" {
				t.Errorf("AppendJSON = %q, %v", got, err)
			}
		})
	}

	// A short write is an error.
	err := NewEncoder(failingWriter{n: 3}).Encode(&AgenticMessage{Type: Result})
	if !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("short write: %v", err)
	}
}

func TestEncodeValues(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    AgenticMessage
		want string
	}{
		{"empty", AgenticMessage{Type: Result},
			`{"type":"result","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":null}`},
		{"tool_input compacted", AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(" {\n \"b\" : [ 1 , {\"c\" : null} ],\t\"a\":\"x y\" }\n")},
			`{"type":"tool_call","content":null,"tool_name":null,"tool_input":{"b":[1,{"c":null}],"a":"x y"},"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":null}`},
		{"tool_input null", AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage(" null ")},
			`{"type":"tool_call","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":null}`},
		{"tool_input sanitized", AgenticMessage{Type: ToolCall, ToolInput: json.RawMessage("{\"s\":\"\xff\\ud800\\u00e9<\"}")},
			`{"type":"tool_call","content":null,"tool_name":null,"tool_input":{"s":"` + "\uFFFD" + `\ufffd\u00e9<"},"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":null}`},
		{"strings", AgenticMessage{Type: Thinking, Content: new("<a href=\"x\">\u2028</a>\n"), IsError: true, Model: new("é")},
			`{"type":"thinking","content":"<a href=\"x\">` + "\u2028" + `</a>\n","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":true,"model":"é","usage":null}`},
		{"usage NaN", AgenticMessage{Type: Usage, Usage: &DriverUsage{CostUSD: new(math.NaN()), NumTurns: new(int64(-3))}},
			`{"type":"usage","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":{"input_tokens":null,"output_tokens":null,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":null,"duration_ms":null,"num_turns":-3,"model":null}}`},
		{"usage with a context field", AgenticMessage{Type: Usage, Usage: &DriverUsage{ContextUtilization: new(0.5)}},
			`{"type":"usage","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":{"input_tokens":null,"output_tokens":null,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":null,"duration_ms":null,"num_turns":null,"model":null,"context_tokens":null,"context_window_tokens":null,"context_utilization":0.5,"context_warning_threshold":null,"context_window_warning":null}}`},
		{"usage with the context keys, all null", AgenticMessage{Type: Usage, Usage: &DriverUsage{ContextFields: true, ContextWindowWarning: new(false)}},
			`{"type":"usage","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":null,"usage":{"input_tokens":null,"output_tokens":null,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":null,"duration_ms":null,"num_turns":null,"model":null,"context_tokens":null,"context_window_tokens":null,"context_utilization":null,"context_warning_threshold":null,"context_window_warning":false}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AppendJSON(nil, &tt.m)
			if err != nil || string(got) != tt.want {
				t.Errorf("got %s, %v\nwant %s", got, err, tt.want)
			}
		})
	}
}

func TestToolInputMatchesCompact(t *testing.T) {
	for _, in := range []string{
		`{}`, ` { } `, `{"a" : [ ] , "b" : { "c" : [ 1 , -2.5e+3 , true , false , null , "x\ty" ] } }`,
		"{\n\t\"k\": \"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0041 \\ud83d\\ude00\"\r\n}",
		`{"é":"中文","<":"&>"}`,
	} {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(in)); err != nil {
			t.Fatal(err)
		}
		got, err := appendCompactToolInput(nil, []byte(in))
		if err != nil || !bytes.Equal(got, want.Bytes()) {
			t.Errorf("%q: got %s, %v; json.Compact gives %s", in, got, err, want.Bytes())
		}
	}
}

func TestMarshalers(t *testing.T) {
	// Inside a larger document, through encoding/json.
	type envelope struct {
		Run string          `json:"run"`
		Msg *AgenticMessage `json:"msg"`
		Use DriverUsage     `json:"use"`
	}
	in := envelope{
		Run: "r1",
		Msg: &AgenticMessage{Type: ToolResult, ToolOutput: new("a<b"), ToolCallID: new("c")},
		Use: DriverUsage{CostUSD: new(0.003), Model: new("m")},
	}
	enc := func(v any) string {
		var buf bytes.Buffer
		e := json.NewEncoder(&buf)
		e.SetEscapeHTML(false)
		if err := e.Encode(v); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(buf.String(), "\n")
	}
	got := enc(in)
	want := `{"run":"r1","msg":{"type":"tool_result","content":null,"tool_name":null,"tool_input":null,"tool_output":"a<b","tool_call_id":"c","session_id":null,"is_error":false,"model":null,"usage":null},"use":{"input_tokens":null,"output_tokens":null,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":0.003,"duration_ms":null,"num_turns":null,"model":"m"}}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	var out envelope
	if err := json.Unmarshal([]byte(got), &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Errorf("got %+v, want %+v", out, in)
	}

	// json.Marshal escapes HTML characters in the output of MarshalJSON, as
	// the package documentation warns.
	b, err := json.Marshal(in.Msg)
	if err != nil || !bytes.Contains(b, []byte(`a\u003cb`)) {
		t.Errorf("json.Marshal = %s, %v", b, err)
	}

	// null leaves the value alone.
	m := AgenticMessage{Type: Result, Content: new("keep")}
	if err := m.UnmarshalJSON([]byte(" null ")); err != nil || *m.Content != "keep" {
		t.Errorf("UnmarshalJSON(null): %v, %v", m.Content, err)
	}
	u := DriverUsage{NumTurns: new(int64(1))}
	if err := u.UnmarshalJSON([]byte("null")); err != nil || *u.NumTurns != 1 {
		t.Errorf("DriverUsage.UnmarshalJSON(null): %v", err)
	}
	// Otherwise it replaces every field.
	if err := m.UnmarshalJSON([]byte(`{"type":"thinking"}`)); err != nil || m.Content != nil || m.Type != Thinking {
		t.Errorf("UnmarshalJSON: %+v, %v", m, err)
	}
	if err := u.UnmarshalJSON([]byte(` {"cost_usd":1e-7} `)); err != nil || u.NumTurns != nil || *u.CostUSD != 1e-7 {
		t.Errorf("DriverUsage.UnmarshalJSON: %+v, %v", u, err)
	}
	if b, _ := u.MarshalJSON(); string(b) != `{"input_tokens":null,"output_tokens":null,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":1e-7,"duration_ms":null,"num_turns":null,"model":null}` {
		t.Errorf("DriverUsage.MarshalJSON = %s", b)
	}
	for _, bad := range []string{`[]`, `{"num_turns":"1"}`, `{"cost_usd":1} x`, `{`} {
		if err := u.UnmarshalJSON([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("DriverUsage.UnmarshalJSON(%s) = %v", bad, err)
		}
	}
	// The error names the key without the "usage." of a nested usage.
	if err := u.UnmarshalJSON([]byte(`{"num_turns":"1"}`)); err == nil || err.Error() != "invalid message: num_turns must be an integer or null, got string" {
		t.Errorf("got %v", err)
	}
}

func TestMessageTypeValid(t *testing.T) {
	for _, mt := range []MessageType{Thinking, ToolCall, ToolResult, Result, Usage} {
		if !mt.Valid() {
			t.Errorf("%q is not valid", mt)
		}
	}
	for _, mt := range []MessageType{"", "tool_use", "THINKING", "result "} {
		if mt.Valid() {
			t.Errorf("%q is valid", mt)
		}
	}
	if allowedTypes != strings.Join([]string{string(Thinking), string(ToolCall), string(ToolResult), string(Result), string(Usage)}, ", ") {
		t.Errorf("allowedTypes = %q", allowedTypes)
	}
}

// dump formats m for test failures.
func dump(m *AgenticMessage) string {
	if m == nil {
		return "<nil>"
	}
	b, err := AppendJSON(nil, m)
	if err != nil {
		return fmt.Sprintf("%+v (%v)", *m, err)
	}
	if m.Usage != nil && m.Usage.CostUSD != nil {
		b = fmt.Appendf(b, " cost=%v", *m.Usage.CostUSD)
	}
	return string(b)
}
