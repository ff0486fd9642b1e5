package runview

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// TestJSONLines checks every line of every script: it parses with
// encoding/json; a worker message is the bytes protocol.AppendJSON writes;
// a host event has the documented keys in order, and a reader that knows
// only AgenticMessages (protocol.Decoder) rejects it as invalid, so it can
// skip it.
func TestJSONLines(t *testing.T) {
	for _, s := range scripts {
		t.Run(s.name, func(t *testing.T) {
			events := s.events()
			out := renderJSON(t, events)
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			var want []string // the lines the events should give, nil for host events
			for _, e := range events {
				switch {
				case e.msg != nil:
					b, err := protocol.AppendJSON(nil, e.msg)
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, string(b))
				case e.start != "", e.end != "", e.summary != nil:
					want = append(want, "")
				}
			}
			if len(lines) != len(want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
			}
			for i, line := range lines {
				var obj map[string]any
				if err := json.Unmarshal([]byte(line), &obj); err != nil {
					t.Errorf("line %d does not parse: %v: %s", i+1, err, line)
				}
				if want[i] != "" {
					if line != want[i] {
						t.Errorf("line %d:\n got %s\nwant %s", i+1, line, want[i])
					}
					continue
				}
				checkHostLine(t, line)
			}
		})
	}
}

// checkHostLine checks the keys of a phase or summary line and that the
// protocol's decoder skips it.
func checkHostLine(t *testing.T, line string) {
	t.Helper()
	keys := map[string][]string{
		"phase":   {"type", "content", "status", "duration_ms", "error"},
		"summary": {"type", "status", "workflow", "branch", "pushed", "diff_stat", "usage", "wall_ms", "error", "last_command", "kept", "cleaned", "left"},
	}
	dec := json.NewDecoder(strings.NewReader(line))
	var got []string
	var typ string
	if _, err := dec.Token(); err != nil { // {
		t.Fatal(err)
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, k.(string))
		var val any
		if err := dec.Decode(&val); err != nil {
			t.Fatal(err)
		}
		if k == "type" {
			typ, _ = val.(string)
		}
	}
	if want := keys[typ]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("keys of %s line: got %v, want %v", typ, got, want)
	}
	_, err := protocol.NewDecoder(strings.NewReader(line + "\n")).Decode()
	if !errors.Is(err, protocol.ErrInvalid) {
		t.Errorf("protocol.Decoder on a %s line: got %v, want an ErrInvalid error", typ, err)
	}
}

// TestJSONShapes pins the phase and summary lines the package documents.
func TestJSONShapes(t *testing.T) {
	var out bytes.Buffer
	v := NewJSON(&out)
	v.PhaseStart("workspace")
	v.PhaseEnd("workspace", 412_700_000, nil)
	v.PhaseEnd("workspace", 412_000_000, errors.New(`clone: "<nope>" & more`))
	v.PhaseEnd("agent", 7_700_000_000, fmt.Errorf("%w; and the agent could not be stopped", context.Canceled))
	v.Summary(Summary{Workflow: "w", Branch: "amelia/w", Pushed: true, DiffStat: "x", Wall: 1500_000_000,
		Usage: &protocol.DriverUsage{CostUSD: new(0.00001)}, Cleaned: []string{"worktree", "proxy"},
		Left: []string{"sandbox dev (running)"}})
	v.Summary(Summary{Err: errors.New("boom")})
	v.Summary(Summary{Err: fmt.Errorf("agent: %w", context.Canceled)})
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"type":"phase","content":"workspace","status":"started","duration_ms":null,"error":null}
{"type":"phase","content":"workspace","status":"done","duration_ms":412,"error":null}
{"type":"phase","content":"workspace","status":"failed","duration_ms":412,"error":"clone: \"<nope>\" & more"}
{"type":"phase","content":"agent","status":"interrupted","duration_ms":7700,"error":"context canceled; and the agent could not be stopped"}
{"type":"summary","status":"done","workflow":"w","branch":"amelia/w","pushed":true,"diff_stat":"x","usage":{"input_tokens":null,"output_tokens":null,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":0.00001,"duration_ms":null,"num_turns":null,"model":null},"wall_ms":1500,"error":null,"last_command":null,"kept":null,"cleaned":["worktree","proxy"],"left":["sandbox dev (running)"]}
{"type":"summary","status":"failed","workflow":null,"branch":null,"pushed":false,"diff_stat":null,"usage":null,"wall_ms":0,"error":"boom","last_command":null,"kept":null,"cleaned":[],"left":[]}
{"type":"summary","status":"interrupted","workflow":null,"branch":null,"pushed":false,"diff_stat":null,"usage":null,"wall_ms":0,"error":"agent: context canceled","last_command":null,"kept":null,"cleaned":[],"left":[]}
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
}

// TestJSONConcurrent writes from many goroutines at once: every line comes
// out whole, with one Write each, and none is lost.
func TestJSONConcurrent(t *testing.T) {
	w := &lineWriter{}
	v := NewJSON(w)
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				switch i % 3 {
				case 0:
					v.Message(thinkingMsg(fmt.Sprintf("g%d i%d", g, i)))
				case 1:
					v.PhaseStart(fmt.Sprintf("g%d", g))
				case 2:
					v.PhaseEnd(fmt.Sprintf("g%d", g), 1, nil)
				}
			}
		})
	}
	wg.Wait()
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != goroutines*each {
		t.Fatalf("%d writes, want %d", len(w.writes), goroutines*each)
	}
	for _, b := range w.writes {
		if !bytes.HasSuffix(b, []byte("\n")) || bytes.Count(b, []byte("\n")) != 1 || !json.Valid(b) {
			t.Fatalf("write is not one JSON line: %q", b)
		}
	}
}

// lineWriter records each Write.
type lineWriter struct {
	mu     sync.Mutex
	writes [][]byte
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// failWriter fails every write after the first n.
type failWriter struct {
	n      int
	writes int
}

func (w *failWriter) Write(p []byte) (int, error) {
	w.writes++
	if w.writes > w.n {
		return 0, io.ErrClosedPipe
	}
	return len(p), nil
}

// TestWriteError: a view whose output has gone away keeps taking events
// without writing and reports the first error from Close. An invalid
// message is skipped and reported, and the stream goes on.
func TestWriteError(t *testing.T) {
	for _, mk := range []struct {
		name string
		new  func(io.Writer) View
	}{
		{"json", NewJSON},
		{"tty", func(w io.Writer) View { return NewTTY(w, TTYOptions{Width: 80, Tick: -1}) }},
	} {
		t.Run(mk.name, func(t *testing.T) {
			w := &failWriter{n: 1}
			v := mk.new(w)
			v.PhaseStart("a")
			v.PhaseEnd("a", 1, nil)
			v.Message(thinkingMsg("x"))
			v.Summary(Summary{})
			err := v.Close()
			if !errors.Is(err, io.ErrClosedPipe) {
				t.Errorf("Close: got %v, want ErrClosedPipe", err)
			}
			if w.writes != 2 {
				t.Errorf("%d writes, want 2 (none after the failed one)", w.writes)
			}
			if err2 := v.Close(); err2 != err {
				t.Errorf("second Close: got %v, want %v", err2, err)
			}
		})
	}
	t.Run("invalid message", func(t *testing.T) {
		var out bytes.Buffer
		v := NewJSON(&out)
		v.Message(&protocol.AgenticMessage{Type: "bogus"})
		v.Message(thinkingMsg("after"))
		if err := v.Close(); !errors.Is(err, protocol.ErrInvalid) {
			t.Errorf("Close: got %v, want ErrInvalid", err)
		}
		if strings.Count(out.String(), "\n") != 1 || !strings.Contains(out.String(), `"after"`) {
			t.Errorf("got %q, want just the valid message", out.String())
		}
	})
}

// TestAfterClose: events after Close are ignored.
func TestAfterClose(t *testing.T) {
	var j, tt bytes.Buffer
	for _, v := range []View{NewJSON(&j), NewTTY(&tt, TTYOptions{Tick: -1})} {
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		v.PhaseStart("x")
		v.Message(thinkingMsg("x"))
		v.Summary(Summary{})
		if l, ok := v.(Live); ok {
			l.Notice("x")
		}
	}
	if j.Len() != 0 || tt.Len() != 0 {
		t.Errorf("wrote after Close: %q, %q", j.String(), tt.String())
	}
}
