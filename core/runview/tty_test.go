package runview

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
)

var sgr = regexp.MustCompile(`\x1b\[[0-9;]*m`)

// TestNoColor: without colour the output has no SGR sequence and shows
// the same screen.
func TestNoColor(t *testing.T) {
	for _, s := range scripts {
		colored := renderTTY(t, s.events(), false)
		plain := renderTTY(t, s.events(), true)
		if sgr.Match(plain) {
			t.Errorf("%s: colour with NoColor: %q", s.name, sgr.Find(plain))
		}
		if !sgr.Match(colored) {
			t.Errorf("%s: no colour without NoColor", s.name)
		}
		if a, b := screen(t, colored, testWidth), screen(t, plain, testWidth); a != b {
			t.Errorf("%s: screens differ:\n%s\n---\n%s", s.name, a, b)
		}
	}
}

// TestSpinner runs the real ticker on synctest's fake clock: the spinner
// turns and the elapsed time shows while a phase runs, nothing is drawn
// while nothing runs, and Close stops the goroutine (synctest.Test fails if
// it were left behind).
func TestSpinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out sdktest.Buffer
		v := NewTTY(&out, TTYOptions{Width: 80, NoColor: true})
		time.Sleep(time.Second) // nothing runs: no output
		synctest.Wait()
		if out.String() != "" {
			t.Errorf("output while nothing runs: %q", out.String())
		}
		v.PhaseStart("agent")
		time.Sleep(1250 * time.Millisecond)
		synctest.Wait()
		got := out.String()
		for _, frame := range spinnerFrames[:3] {
			if !strings.Contains(got, eraseLine+frame+" agent") {
				t.Errorf("frame %s not drawn: %q", frame, got)
			}
		}
		if !strings.HasSuffix(got, " agent 1s") {
			t.Errorf("live line does not end with the elapsed time: %q", got)
		}
		v.PhaseEnd("agent", 1250*time.Millisecond, nil)
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(out.String(), eraseLine+"✓ agent 1.2s\n") {
			t.Errorf("output does not end with the finished phase: %q", out.String())
		}
	})
}

func TestTTYConcurrent(t *testing.T) {
	var out sdktest.Buffer
	v := NewTTY(&out, TTYOptions{Width: 80, NoColor: true, Tick: time.Microsecond})
	v.PhaseStart("agent")
	const goroutines, each = 8, 50
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("call_%d_%d", g, i)
				v.Message(callMsg(id, "read_file", fmt.Sprintf(`{"file_path":"f%d_%d.go"}`, g, i)))
				v.Message(thinkingMsg("hmm"))
				v.Notice(fmt.Sprintf("amelia: warning: w%d_%d", g, i))
				v.Message(resultMsg(id, "read_file", "ok", false))
			}
		})
	}
	wg.Wait()
	v.PhaseEnd("agent", time.Second, nil)
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	scr := screen(t, []byte(out.String()), 80)
	for g := range goroutines {
		for i := range each {
			if n := strings.Count(scr, fmt.Sprintf("✓ read_file f%d_%d.go\n", g, i)); n != 1 {
				t.Fatalf("f%d_%d.go shown %d times:\n%s", g, i, n, scr)
			}
			if n := strings.Count(scr, fmt.Sprintf("\namelia: warning: w%d_%d\n", g, i)); n != 1 {
				t.Fatalf("warning w%d_%d shown %d times on a line of its own:\n%s", g, i, n, scr)
			}
		}
	}
	if strings.Contains(scr, "no result") || strings.Contains(scr, "⟨live⟩") {
		t.Errorf("a call or the live line was left over:\n%s", scr)
	}
}

// TestToolPairing: results are paired with their calls by tool_call_id,
// whatever their order; a result without its call still gets a line.
func TestToolPairing(t *testing.T) {
	got := screenOf(t, 80,
		callMsg("a", "read_file", `{"file_path":"a.go"}`),
		callMsg("b", "execute", `{"command":"make"}`),
		resultMsg("b", "execute", "boom\n[Command failed with exit code 2]", true),
		resultMsg("a", "read_file", "package a", false),
		resultMsg("zz", "glob", "", false),
	)
	want := "✗ execute make (exit 2)\n✓ read_file a.go\n✓ glob\n"
	if got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestSummaryUsageFallback: a summary without usage shows the last usage
// message; one without cost or turns leaves them out.
func TestSummaryUsageFallback(t *testing.T) {
	var out bytes.Buffer
	v := NewTTY(&out, TTYOptions{Width: 80, NoColor: true, Tick: -1})
	v.Message(&protocol.AgenticMessage{Type: protocol.Usage, Usage: &protocol.DriverUsage{
		InputTokens: new(int64(1234567)), OutputTokens: new(int64(89))}})
	v.Summary(Summary{Branch: "amelia/x", Pushed: true, Wall: 90 * time.Second, Err: errors.New("push: rejected")})
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	want := `╭─ ✗ failed ──────────────────────╮
│ branch    amelia/x (pushed)     │
│ changes   none                  │
│ tokens    1,234,567 in · 89 out │
│ wall      1m30s                 │
│ error     push: rejected        │
╰─────────────────────────────────╯
`
	if got := screen(t, out.Bytes(), 80); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestUntrustedText: escape sequences and control characters from the
// agent, its tools or an error never reach the terminal.
func TestUntrustedText(t *testing.T) {
	evil := "a\x1b[2J\x1b]0;title\x07b\x1bPdcs\x1b\\c\rd\x08e\u009b31mf\x1b"
	var out bytes.Buffer
	v := NewTTY(&out, TTYOptions{Width: 80, NoColor: true, Tick: -1})
	v.PhaseStart(evil)
	v.Message(thinkingMsg(evil))
	input, err := json.Marshal(map[string]string{"command": evil})
	if err != nil {
		t.Fatal(err)
	}
	v.Message(callMsg(evil, evil, string(input)))
	v.Message(resultMsg(evil, evil, evil, true))
	v.Message(answerMsg(evil, true))
	v.PhaseEnd(evil, 0, errors.New(evil))
	v.Summary(Summary{Workflow: evil, Branch: evil, DiffStat: evil, Err: errors.New(evil)})
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	plain := sgr.ReplaceAll(bytes.ReplaceAll(out.Bytes(), []byte(eraseLine), nil), nil)
	for _, c := range plain {
		if (c < 0x20 && c != '\n') || c == 0x7f {
			t.Fatalf("control character %#x written: %q", c, plain)
		}
	}
	if strings.Contains(string(plain), "title") || strings.Contains(string(plain), "dcs") {
		t.Errorf("escape sequence contents written: %q", plain)
	}
	screen(t, out.Bytes(), 80) // no escape but colours and line erasure
}

// screenOf is the screen after msgs on a TTY view without colour.
func screenOf(t *testing.T, width int, msgs ...*protocol.AgenticMessage) string {
	t.Helper()
	var out bytes.Buffer
	v := NewTTY(&out, TTYOptions{Width: width, NoColor: true, Tick: -1})
	for _, m := range msgs {
		v.Message(m)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	return screen(t, out.Bytes(), width)
}

func TestNewPicksJSONForNonTerminals(t *testing.T) {
	for _, jsonMode := range []bool{false, true} {
		var out bytes.Buffer
		v := New(&out, jsonMode)
		if _, ok := v.(*jsonView); !ok {
			t.Errorf("New(buffer, %v) = %T, want the JSON view", jsonMode, v)
		}
		v.Close()
	}
}
