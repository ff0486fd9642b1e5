package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

// serveGolden returns the lines of testdata/serve.jsonl, written by pydantic
// (gen_golden.py serve): requests without their prefix, then frames.
func serveGolden(t testing.TB) (requests, frames [][]byte) {
	t.Helper()
	data, err := os.ReadFile("testdata/serve.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for line := range bytes.SplitSeq(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
		if bytes.HasPrefix(line, []byte(`{"mode":`)) {
			requests = append(requests, line)
		} else {
			frames = append(frames, line)
		}
	}
	if len(requests) < 4 || len(frames) < 10 {
		t.Fatalf("serve.jsonl: %d requests, %d frames", len(requests), len(frames))
	}
	return requests, frames
}

func prefixed(payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	return append(b, payload...)
}

// Requests pydantic wrote read back and are written again byte for byte;
// several in one stream are read one by one, however the reads are cut.
func TestRequestGoldenRoundTrip(t *testing.T) {
	requests, _ := serveGolden(t)
	var stream []byte
	for _, line := range requests {
		stream = append(stream, prefixed(line)...)
	}
	for name, r := range map[string]io.Reader{
		"whole":        bytes.NewReader(stream),
		"byte by byte": iotest.OneByteReader(bytes.NewReader(stream)),
	} {
		t.Run(name, func(t *testing.T) {
			for i, line := range requests {
				req, err := ReadRequest(r)
				if err != nil {
					t.Fatalf("request %d: %v", i+1, err)
				}
				got, err := AppendRequest(nil, req)
				if err != nil {
					t.Fatal(err)
				}
				if want := prefixed(line); !bytes.Equal(got, want) {
					t.Errorf("request %d:\n got %q\nwant %q", i+1, got, want)
				}
			}
			if _, err := ReadRequest(r); err != io.EOF {
				t.Errorf("after the last request: %v, want io.EOF", err)
			}
		})
	}
}

func TestReadRequestValues(t *testing.T) {
	for _, tt := range []struct {
		name, json string
		want       Request
	}{
		{"minimal", `{"mode":"generate","prompt":"p","model":"m"}`, Request{Mode: ModeGenerate, Prompt: "p", Model: "m"}},
		{"all", `{"schema_path":"a:B","mode":"agentic","prompt":"é\n","model":"m","cwd":"/w","instructions":"i","max_turns":3}`,
			Request{Mode: ModeAgentic, Prompt: "é\n", Model: "m", Cwd: new("/w"), Instructions: new("i"), SchemaPath: new("a:B"), MaxTurns: 3}},
		{"nulls and unknown keys", ` {"mode":"agentic","x":[{}],"prompt":"","model":"","cwd":null,"max_turns":null} `,
			Request{Mode: ModeAgentic}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadRequest(bytes.NewReader(prefixed([]byte(tt.json))))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func TestReadRequestErrors(t *testing.T) {
	good := prefixed([]byte(`{"mode":"generate","prompt":"p","model":"m"}`))
	big := binary.BigEndian.AppendUint32(nil, MaxRequestBytes+1)
	for _, tt := range []struct {
		name  string
		input []byte
		is    error
		want  string
	}{
		{"prefix cut", good[:3], ErrRequestTruncated, "the input ends after 3 bytes of the length prefix"},
		{"payload cut", good[:20], ErrRequestTruncated, "the input ends after 16 of its 44 bytes"},
		{"zero length", []byte{0, 0, 0, 0}, ErrInvalid, "request length 0: want 1 to 67108864 bytes"},
		{"too long", append(big, '{'), ErrInvalid, "request length 67108865"},
		{"unknown mode", prefixed([]byte(`{"mode":"serve","prompt":"p","model":"m"}`)), ErrInvalid, `unknown mode "serve" (allowed: agentic, generate)`},
		{"mode case", prefixed([]byte(`{"mode":"Agentic","prompt":"p","model":"m"}`)), ErrInvalid, `unknown mode "Agentic"`},
		{"no prompt", prefixed([]byte(`{"mode":"agentic","model":"m"}`)), ErrInvalid, "prompt is required, a string"},
		{"null model", prefixed([]byte(`{"mode":"agentic","prompt":"p","model":null}`)), ErrInvalid, "model is required, a string"},
		{"key case", prefixed([]byte(`{"MODE":"agentic","prompt":"p","model":"m"}`)), ErrInvalid, "mode is required"},
		{"prompt number", prefixed([]byte(`{"mode":"agentic","prompt":1,"model":"m"}`)), ErrInvalid, "prompt must be a string or null, got number"},
		{"max_turns negative", prefixed([]byte(`{"mode":"agentic","prompt":"p","model":"m","max_turns":-1}`)), ErrInvalid, "max_turns must be an integer from 0"},
		{"not an object", prefixed([]byte(`["agentic"]`)), ErrInvalid, "a request must be a JSON object, got array"},
		{"not JSON", prefixed([]byte(`{"mode":`)), ErrInvalid, "invalid JSON"},
		{"not UTF-8", prefixed([]byte("{\"mode\":\"agentic\",\"prompt\":\"\xff\",\"model\":\"m\"}")), ErrInvalid, "not UTF-8"},
		{"trailing bytes in the payload", prefixed([]byte(`{"mode":"agentic","prompt":"p","model":"m"}x`)), ErrInvalid, "after the object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadRequest(bytes.NewReader(tt.input))
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error matching %v with %q", err, tt.is, tt.want)
			}
		})
	}
}

// A length prefix that promises more than comes costs only what comes.
func TestReadRequestLyingPrefix(t *testing.T) {
	in := append(binary.BigEndian.AppendUint32(nil, MaxRequestBytes), `{"mode":`...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := ReadRequest(bytes.NewReader(in)); !errors.Is(err, ErrRequestTruncated) {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("reading a 12-byte request that claims 64 MiB allocated %d bytes", n)
	}
}

func TestAppendRequestErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		req  Request
		want string
	}{
		{"no mode", Request{Prompt: "p", Model: "m"}, `unknown mode ""`},
		{"negative max turns", Request{Mode: ModeAgentic, MaxTurns: -1}, "max_turns -1 is negative"},
		{"too long", Request{Mode: ModeGenerate, Prompt: strings.Repeat("x", MaxRequestBytes)}, "larger than the 67108864-byte limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("keep")
			got, err := AppendRequest(dst, &tt.req)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || string(got) != "keep" {
				t.Errorf("got %q, %v; want %q kept and an error with %q", got, err, "keep", tt.want)
			}
		})
	}
}

// The frames pydantic wrote are the frames this package writes, and
// FrameDecoder reads them.
func TestFrameGolden(t *testing.T) {
	_, frames := serveGolden(t)
	var msgs, errs, dones int
	for i, line := range frames {
		var std struct {
			Frame string  `json:"frame"`
			Msg   *string `json:"msg"`
			Error *string `json:"error"`
		}
		if err := json.Unmarshal(line, &std); err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		var got []byte
		switch std.Frame {
		case "msg":
			got = AppendMsgFrame(nil, []byte(*std.Msg))
		case "error":
			got = AppendErrorFrame(nil, *std.Error)
		case "done":
			got = AppendDoneFrame(nil)
		}
		if want := append(bytes.Clone(line), '\n'); !bytes.Equal(got, want) {
			t.Errorf("frame %d:\n got %s\nwant %s", i+1, got, want)
		}

		f, err := NewFrameDecoder(bytes.NewReader(line)).Decode()
		if std.Frame == "msg" && !json.Valid([]byte(*std.Msg)) {
			// A msg that is no message: the frame is fine, what it carries is not.
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "msg: invalid message") {
				t.Errorf("frame %d carries no message, but: %v", i+1, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", i+1, err)
		}
		if string(f.Kind) != std.Frame || !reflect.DeepEqual(f.Error, std.Error) {
			t.Errorf("frame %d: got %+v", i+1, f)
		}
		switch f.Kind {
		case FrameMsg:
			msgs++
			b, err := AppendJSON(nil, f.Msg)
			if err != nil || string(b) != *std.Msg {
				t.Errorf("frame %d: its message reads as\n%s, %v\nwant\n%s", i+1, b, err, *std.Msg)
			}
		case FrameError:
			errs++
		case FrameDone:
			dones++
		}
	}
	if msgs < 10 || errs != 2 || dones != 1 {
		t.Errorf("%d msg, %d error, %d done frames checked", msgs, errs, dones)
	}
}

func TestFrameDecoderErrors(t *testing.T) {
	msg := AppendMsgFrame(nil, []byte(`{"type":"result","content":"ok"}`))
	for _, tt := range []struct {
		name, line string
		is         error
		want       string
	}{
		{"not JSON", `<frame>`, ErrInvalid, "invalid JSON"},
		{"no kind", `{"msg":null}`, ErrInvalid, "missing frame (allowed: msg, error, done)"},
		{"unknown kind", `{"frame":"end"}`, ErrInvalid, `unknown frame "end"`},
		{"kind number", `{"frame":1}`, ErrInvalid, "frame must be a string or null, got number"},
		{"msg object", `{"frame":"msg","msg":{"type":"result"}}`, ErrInvalid, "msg must be a string or null, got object"},
		{"msg not a message", `{"frame":"msg","msg":"{\"type\":\"nope\"}"}`, ErrInvalid, `msg: invalid message: unknown type "nope"`},
		{"msg too long", `{"frame":"msg","msg":"{\"type\":\"result\",\"content\":\"` + strings.Repeat("x", 100) + `\"}"}`, ErrLineTooLong, "msg: longer than the 64-byte limit"},
		{"frame too long", `{"frame":"msg","x":"` + strings.Repeat("x", 300) + `"}`, ErrLineTooLong, "longer than the 192-byte limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			input := string(msg) + tt.line + "\n" + string(msg)
			fd := NewFrameDecoder(strings.NewReader(input), WithMaxLineBytes(64))
			if _, err := fd.Decode(); err != nil {
				t.Fatal(err)
			}
			_, err := fd.Decode()
			var le *LineError
			if !errors.As(err, &le) || le.Line != 2 || !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a line 2 error matching %v with %q", err, tt.is, tt.want)
			}
			// The next frame reads.
			if f, err := fd.Decode(); err != nil || f.Kind != FrameMsg {
				t.Errorf("after the error: %+v, %v", f, err)
			}
			if _, err := fd.Decode(); err != io.EOF {
				t.Errorf("at the end: %v", err)
			}
		})
	}
}

// A message of the limit's length always fits in a frame, whatever it
// holds.
func TestFrameLimitFitsTheMessage(t *testing.T) {
	const limit = 256
	// The longest message within the limit whose content is all quotes,
	// each written \" in the message and \\\" in the frame.
	var line []byte
	for n := 0; ; n++ {
		c := strings.Repeat(`"`, n)
		b, err := AppendJSON(nil, &AgenticMessage{Type: Result, Content: &c})
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > limit {
			break
		}
		line = b
	}
	frame := AppendMsgFrame(nil, line)
	f, err := NewFrameDecoder(bytes.NewReader(frame), WithMaxLineBytes(limit)).Decode()
	if err != nil {
		t.Fatalf("a %d-byte message in a %d-byte frame: %v", len(line), len(frame), err)
	}
	if f.Msg.Type != Result {
		t.Errorf("got %+v", f.Msg)
	}
}

// FuzzFrameDecoder feeds arbitrary output of a serve worker (which the
// host does not trust) to a FrameDecoder. It may not panic, and every frame
// it reads is written again as a frame that reads back the same.
func FuzzFrameDecoder(f *testing.F) {
	_, frames := serveGolden(f)
	for _, line := range frames {
		f.Add(append(line, '\n'))
	}
	f.Add([]byte(`{"frame":"msg","msg":"{\"type\":\"result\"}"}` + "\n" + `{"frame":"done"}`))
	f.Add([]byte(`{"frame":"msg","msg":"` + strings.Repeat(`\"`, 40) + `"}`))
	f.Add([]byte(`{"frame":"error","error":"\ud800"}{"frame":"done"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fd := NewFrameDecoder(bytes.NewReader(data), WithMaxLineBytes(256))
		for {
			fr, err := fd.Decode()
			if err == io.EOF {
				return
			}
			if err != nil {
				var le *LineError
				if !errors.As(err, &le) {
					t.Fatalf("an error that is no LineError: %v", err)
				}
				continue
			}
			var again []byte
			switch fr.Kind {
			case FrameMsg:
				if fr.Msg == nil {
					continue
				}
				line, err := AppendJSON(nil, fr.Msg)
				if err != nil {
					t.Fatalf("a message that decoded does not encode: %v", err)
				}
				again = AppendMsgFrame(nil, line)
			case FrameError:
				again = AppendErrorFrame(nil, deref(fr.Error))
			case FrameDone:
				again = AppendDoneFrame(nil)
			}
			back, err := NewFrameDecoder(bytes.NewReader(again), WithMaxLineBytes(1<<20)).Decode()
			if err != nil || back.Kind != fr.Kind || (fr.Kind == FrameError && deref(back.Error) != deref(fr.Error)) ||
				(fr.Kind == FrameMsg && !reflect.DeepEqual(back.Msg, fr.Msg)) {
				t.Fatalf("frame %q reads back as %+v, %v", again, back, err)
			}
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// FuzzReadRequest: ReadRequest may not panic on any input, and a request
// it reads is written again as one that reads back the same.
func FuzzReadRequest(f *testing.F) {
	requests, _ := serveGolden(f)
	for _, line := range requests {
		f.Add(prefixed(line))
	}
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0, 0, 0})
	f.Add(prefixed([]byte(`{"mode":"agentic","prompt":"\ud800","model":"m","max_turns":7}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		for {
			req, err := ReadRequest(r)
			if err != nil {
				return
			}
			b, err := AppendRequest(nil, req)
			if err != nil {
				t.Fatalf("a request that read does not write: %v", err)
			}
			back, err := ReadRequest(bytes.NewReader(b))
			if err != nil || !reflect.DeepEqual(back, req) {
				t.Fatalf("%q reads back as %+v, %v; want %+v", b, back, err, req)
			}
		}
	})
}
