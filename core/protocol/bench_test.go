package protocol

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// Run the decoding benchmarks on one core to get the single-core figure
// (the garbage collector otherwise works on other cores in parallel):
//
//	go test -run='^$' -bench=. -cpu=1,4 ./core/protocol/

// benchLines is a realistic mix of lines: thinking with ~150 characters of
// content, tool calls and their results, a final result and usage.
var benchLines = []string{
	`{"type":"thinking","content":"I need to look at how the configuration is loaded before changing the retry logic; the loader probably lives in config/loader.py.","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":"sess-7f3a","is_error":false,"model":"claude-sonnet-4","usage":null}`,
	exampleLine,
	`{"type":"tool_result","content":null,"tool_name":"read_file","tool_input":null,"tool_output":"import os\nimport json\n\n\ndef load(path: str) -> dict:\n    with open(path) as f:\n        return json.load(f)\n","tool_call_id":"call_1","session_id":"sess-7f3a","is_error":false,"model":"m","usage":null}`,
	`{"type":"thinking","content":"The loader reads the file once at startup. Retries should wrap only the network call, so I will add a small helper with exponential backoff — naïve but fine.","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":"sess-7f3a","is_error":false,"model":"claude-sonnet-4","usage":null}`,
	`{"type":"tool_call","content":null,"tool_name":"edit_file","tool_input":{"path":"src/client.py","old":"resp = session.get(url)","new":"resp = retry(lambda: session.get(url), attempts=3)"},"tool_output":null,"tool_call_id":"call_2","session_id":"sess-7f3a","is_error":false,"model":"m","usage":null}`,
	`{"type":"tool_result","content":null,"tool_name":"edit_file","tool_input":null,"tool_output":"ok","tool_call_id":"call_2","session_id":"sess-7f3a","is_error":false,"model":"m","usage":null}`,
	`{"type":"thinking","content":"Now run the tests to check that nothing else depends on the old behaviour of the client, especially the timeout handling in tests/test_client.py.","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":"sess-7f3a","is_error":false,"model":"claude-sonnet-4","usage":null}`,
	`{"type":"tool_call","content":null,"tool_name":"execute","tool_input":{"command":"pytest -q tests/test_client.py","timeout":120},"tool_output":null,"tool_call_id":"call_3","session_id":"sess-7f3a","is_error":false,"model":"m","usage":null}`,
	`{"type":"result","content":"Added retries with backoff around the network call; tests pass.","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":"sess-7f3a","is_error":false,"model":"m","usage":null}`,
	`{"type":"usage","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":"sess-7f3a","is_error":false,"model":"claude-sonnet-4","usage":{"input_tokens":48213,"output_tokens":2210,"cache_read_tokens":40960,"cache_creation_tokens":1024,"cost_usd":0.0421,"duration_ms":83412,"num_turns":9,"model":"claude-sonnet-4"}}`,
}

// loopReader reads data over and over, without allocating.
type loopReader struct {
	data []byte
	off  int
}

func (r *loopReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.data[r.off:])
		n += c
		r.off = (r.off + c) % len(r.data)
	}
	return n, nil
}

func benchInput(lines []string) []byte {
	return []byte(strings.Join(lines, "\n") + "\n")
}

// reportLines reports the decoding rate in lines per second.
func reportLines(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range []struct {
		name  string
		lines []string
	}{
		{"mix", benchLines},
		{"tool_call", []string{exampleLine}},
		{"thinking", []string{benchLines[0]}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			data := benchInput(bc.lines)
			b.SetBytes(int64(len(data) / len(bc.lines)))
			dec := NewDecoder(&loopReader{data: data})
			b.ReportAllocs()
			for b.Loop() {
				if _, err := dec.Decode(); err != nil {
					b.Fatal(err)
				}
			}
			reportLines(b)
		})
	}
}

// BenchmarkDecodeStdlib is the baseline: encoding/json reading the same mix
// into an equivalent struct, one line at a time.
func BenchmarkDecodeStdlib(b *testing.B) {
	data := benchInput(benchLines)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines = lines[:len(lines)-1]
	b.SetBytes(int64(len(data) / len(lines)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var m stdMessage
		if err := json.Unmarshal(lines[i], &m); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % len(lines)
	}
	reportLines(b)
}

func BenchmarkEncode(b *testing.B) {
	var msgs []*AgenticMessage
	dec := NewDecoder(bytes.NewReader(benchInput(benchLines)))
	for {
		m, err := dec.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	enc := NewEncoder(io.Discard)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := enc.Encode(msgs[i]); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % len(msgs)
	}
	reportLines(b)
}

// BenchmarkDecodeSideBySide decodes the same mix with this package and with
// encoding/json, in alternating batches, and reports both rates and their
// ratio in one line (run it with -cpu=1 for the single-core figure).
func BenchmarkDecodeSideBySide(b *testing.B) {
	const batch = 1000
	data := benchInput(benchLines)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines = lines[:len(lines)-1]
	dec := NewDecoder(&loopReader{data: data})
	var ours, std time.Duration
	for b.Loop() {
		start := time.Now()
		for range batch {
			if _, err := dec.Decode(); err != nil {
				b.Fatal(err)
			}
		}
		mid := time.Now()
		for i := range batch {
			var m stdMessage
			if err := json.Unmarshal(lines[i%len(lines)], &m); err != nil {
				b.Fatal(err)
			}
		}
		ours, std = ours+mid.Sub(start), std+time.Since(mid)
	}
	n := float64(b.N * batch)
	b.ReportMetric(n/ours.Seconds(), "lines/s")
	b.ReportMetric(n/std.Seconds(), "stdlib-lines/s")
	b.ReportMetric(std.Seconds()/ours.Seconds(), "x-stdlib")
	b.ReportMetric(0, "ns/op") // per batch pair: meaningless here
}
