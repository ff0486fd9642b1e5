package runview

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/runview/runviewtest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testWidth is the terminal width of the TTY goldens: narrow, so that the
// thinking text and a long command have to be wrapped or cut.
const testWidth = 60

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var scripts = []struct {
	name   string
	events func() []event
}{
	{"success", successRun},
	{"failed", failedRun},
	{"kept", keptRun},
	{"interrupted", interruptedRun},
	{"unfinished", unfinishedRun},
	{"warning", warningRun},
	{"command_not_found", commandNotFoundRun},
}

// renderJSON plays events on a JSON view and returns what it wrote.
func renderJSON(t *testing.T, events []event) []byte {
	t.Helper()
	var out bytes.Buffer
	v := NewJSON(&out)
	play(v, newFakeClock(), events)
	if err := v.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return out.Bytes()
}

// renderTTY plays events on a TTY view without a ticker, so the output is
// a function of the events, and returns what it wrote.
func renderTTY(t *testing.T, events []event, noColor bool) []byte {
	t.Helper()
	var out bytes.Buffer
	clk := newFakeClock()
	v := NewTTY(&out, TTYOptions{Width: testWidth, NoColor: noColor, Tick: -1, Now: clk.now})
	play(v, clk, events)
	if err := v.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return out.Bytes()
}

func TestGolden(t *testing.T) {
	for _, s := range scripts {
		t.Run(s.name, func(t *testing.T) {
			raw := renderTTY(t, s.events(), false)
			checkGolden(t, "json_"+s.name+".jsonl", renderJSON(t, s.events()))
			// The raw bytes, escapes and all, and the screen they leave.
			checkGolden(t, "tty_"+s.name+".golden", raw)
			checkGolden(t, "tty_"+s.name+".screen", []byte(screen(t, raw, testWidth)))
		})
	}
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// screen is what a terminal shows after the TTY view wrote out, colours
// dropped (runviewtest.Screen). It fails the test on any escape sequence
// but colours and line erasure, and on a line that would wrap at width.
func screen(t *testing.T, out []byte, width int) string {
	t.Helper()
	lines, err := runviewtest.Screen(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if w := textWidth(strings.TrimSuffix(l, runviewtest.LiveMark)); w >= width {
			t.Errorf("line of %d columns, the width is %d: %q", w, width, l)
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
