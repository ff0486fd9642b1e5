package main_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/core/runview/runviewtest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// End-to-end tests of `amelia run` as a user at a terminal sees it: the
// built binary on a real pseudo-terminal (stdin, stdout and stderr, as its
// controlling terminal in a session of its own), the live view and the log
// drawn on the same screen, Ctrl-C typed on the terminal.

// termWidth is the width of the test terminal.
const termWidth = 100

// terminal is amelia running on a pseudo-terminal, and all it drew.
type terminal struct {
	cmd  *exec.Cmd
	ptmx *os.File      // the terminal's other end: what is drawn, and the keyboard
	done chan struct{} // closed when amelia has ended and its output is read

	mu    sync.Mutex
	out   bytes.Buffer
	ready chan struct{} // closed and replaced whenever output arrives
}

// startOnTerminal starts amelia with args on a new terminal and reads
// what it draws until it ends.
func (h *host) startOnTerminal(t *testing.T, args ...string) *terminal {
	t.Helper()
	ptmx, pts := runviewtest.OpenPTY(t, termWidth)
	tm := &terminal{cmd: h.command(args...), ptmx: ptmx, done: make(chan struct{}), ready: make(chan struct{})}
	tm.cmd.Stdin, tm.cmd.Stdout, tm.cmd.Stderr = pts, pts, pts
	// Its own session with the terminal as its controlling one, so that a
	// Ctrl-C typed there goes to its process group, as in a shell.
	tm.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := tm.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tm.cmd.Process.Kill()
		<-tm.done
	})
	// Only amelia holds the terminal now: reading ends once it has ended.
	pts.Close()
	go func() {
		defer close(tm.done)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			tm.mu.Lock()
			tm.out.Write(buf[:n])
			close(tm.ready)
			tm.ready = make(chan struct{})
			tm.mu.Unlock()
			if err != nil { // EIO once no process has the terminal open
				break
			}
		}
		tm.cmd.Wait()
	}()
	return tm
}

// waitFor returns once the terminal's output holds s, failing the test if
// amelia ends first (waitForMatch).
func (tm *terminal) waitFor(t *testing.T, s string) {
	t.Helper()
	tm.waitForMatch(t, regexp.MustCompile(regexp.QuoteMeta(s)))
}

// ctrlC types Ctrl-C on the terminal: its line discipline sends SIGINT to
// the foreground process group, amelia's.
func (tm *terminal) ctrlC(t *testing.T) {
	t.Helper()
	if _, err := tm.ptmx.Write([]byte{0x03}); err != nil {
		t.Fatalf("type Ctrl-C: %v", err)
	}
}

// end waits for amelia to end and returns its exit code and the screen it
// left.
func (tm *terminal) end(t *testing.T, what string) (int, []string) {
	t.Helper()
	select {
	case <-tm.done:
	case <-t.Context().Done():
		t.Fatalf("the test ended before amelia did, after %s:\n%s", what, tm.screen(t))
	}
	lines, err := runviewtest.Screen(tm.output())
	if err != nil {
		t.Fatalf("the terminal's output: %v", err)
	}
	return tm.cmd.ProcessState.ExitCode(), lines
}

func (tm *terminal) output() []byte {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return bytes.Clone(tm.out.Bytes())
}

// screen is the screen so far, for failure messages.
func (tm *terminal) screen(t *testing.T) string {
	lines, err := runviewtest.Screen(tm.output())
	if err != nil {
		return err.Error() + "\n" + string(tm.output())
	}
	return strings.Join(lines, "\n")
}

// isolatesNothing is the warning a run on the local provider logs while
// its sandbox phase spins.
const isolatesNothing = "amelia: warning: provider local isolates nothing"

// checkScreen checks what every run on the terminal must leave: the
// warning logged during the sandbox phase on lines of its own, above the
// live line, once; no live line left over; and the summary box, followed
// by exactly the lines after (what stderr says at the end). It returns
// the box's lines.
func checkScreen(t *testing.T, lines []string, after ...string) []string {
	t.Helper()
	screen := strings.Join(lines, "\n")
	if n := strings.Count(screen, isolatesNothing); n != 1 {
		t.Errorf("the warning is on the screen %d times, want once:\n%s", n, screen)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, isolatesNothing) }) {
		t.Errorf("the warning does not start a line of its own (it was written into the spinner line):\n%s", screen)
	}
	if strings.Contains(screen, runviewtest.LiveMark) {
		t.Errorf("a live line is left on the screen:\n%s", screen)
	}
	top := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "╭─ ") })
	bottom := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "╰") })
	if top < 0 || bottom < top {
		t.Fatalf("no summary box:\n%s", screen)
	}
	if got := lines[bottom+1:]; !slices.Equal(got, after) {
		t.Errorf("after the summary box:\n%q\nwant:\n%q\nscreen:\n%s", got, after, screen)
	}
	return lines[top : bottom+1]
}

// row is the text of the summary box's row label, or "" when it has none;
// a value wrapped on several lines is joined with spaces.
func row(box []string, label string) string {
	var text []string
	in := false
	for _, l := range box[1 : len(box)-1] {
		l = strings.TrimSuffix(strings.TrimPrefix(l, "│ "), " │")
		name, value := strings.TrimSpace(l[:min(len(l), 10)]), strings.TrimSpace(l[min(len(l), 10):])
		switch {
		case name == label:
			in = true
			text = append(text, value)
		case in && name == "":
			text = append(text, value)
		default:
			in = false
		}
	}
	return strings.Join(text, " ")
}

// Ctrl-C typed while the agent runs a command: one interrupted state on
// the whole screen (the phase, the box; nowhere "failed" or "context
// canceled"), no error row, the box saying what was cleaned up, what is
// left and where the work is kept, and one line after it. The warning
// logged during the sandbox phase is on a line of its own.
func TestTerminalRunInterrupted(t *testing.T) {
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("wip.txt", "half done\n")}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{executeCall("sleep 296.5")}},
		llmtest.Turn{Text: "interrupted"},
	)
	tm := h.startOnTerminal(t, "run", "--workflow", "stop-me", "sleep a long time")
	tm.waitFor(t, "execute sleep 296.5")
	tm.ctrlC(t)
	code, lines := tm.end(t, "Ctrl-C")
	screen := strings.Join(lines, "\n")
	if code != 130 {
		t.Errorf("exit %d after Ctrl-C, want 130:\n%s", code, screen)
	}
	// pgrep exits 1 when nothing matches; anything else is no answer.
	out, err := exec.Command("pgrep", "-f", "sleep 296.5").Output()
	if ee := (*exec.ExitError)(nil); err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
		t.Errorf("pgrep, looking for the agent's command: %v", err)
	}
	if len(out) != 0 {
		t.Errorf("the agent's command is still running after Ctrl-C: pids %s", out)
	}
	box := checkScreen(t, lines, "amelia: interrupted; the agent was stopped")
	for _, bad := range []string{"context canceled", "failed", "✗ agent"} {
		if strings.Contains(screen, bad) {
			t.Errorf("the screen says %q:\n%s", bad, screen)
		}
	}
	interrupted := slices.IndexFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "■ agent ") && strings.HasSuffix(l, " (interrupted)")
	})
	if interrupted < 0 {
		t.Errorf("no line shows the agent phase interrupted:\n%s", screen)
	}
	// While the agent stops, the screen says what amelia waits for.
	const stopping = "amelia: stopping the agent: waiting for it and the commands it started to end"
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, stopping) }); i < 0 || i > interrupted {
		t.Errorf("no line above the interrupted phase says %q:\n%s", stopping, screen)
	}
	if !strings.HasPrefix(box[0], "╭─ ■ interrupted ─") {
		t.Errorf("the box's title: %q, want interrupted", box[0])
	}
	for label, want := range map[string]string{
		"error":   "",
		"cleaned": "tunnel, proxy, plugin",
		"left":    "sandbox " + h.sandboxName(t, "e2e") + " on provider local (running; amelia stop --profile e2e removes it)",
		"kept":    "amelia/stop-me in sandbox e2e",
		"recover": "amelia results --profile e2e stop-me",
	} {
		if got := row(box, label); got != want {
			t.Errorf("the box's %s row: %q, want %q\n%s", label, got, want, strings.Join(box, "\n"))
		}
	}
	h.bringsBackKept(t, "stop-me", screen, "wip.txt", "half done")
}

// A run whose model fails after the agent wrote a file: its error once on
// the screen, in the box (and the agent's own account of it, once, in the
// transcript), nothing after the box, exit 1.
func TestTerminalRunFailed(t *testing.T) {
	const marker = "model-refused-the-request"
	h := newHost(t, llmtest.Options{},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{writeCall("wip.txt", "written before the 400\n")}},
		llmtest.Turn{Status: 400, Error: marker})
	tm := h.startOnTerminal(t, "run", "--workflow", "refused", "do it")
	code, lines := tm.end(t, "the run")
	screen := strings.Join(lines, "\n")
	if code != 1 {
		t.Errorf("exit %d, want 1:\n%s", code, screen)
	}
	box := checkScreen(t, lines)
	if !strings.HasPrefix(box[0], "╭─ ✗ failed ─") {
		t.Errorf("the box's title: %q, want failed", box[0])
	}
	if got := row(box, "error"); !strings.HasPrefix(got, "agent: the agent failed: ") || !strings.Contains(got, marker) {
		t.Errorf("the box's error row: %q, want the agent's failure", got)
	}
	if n := strings.Count(screen, "the agent failed"); n != 1 {
		t.Errorf("the run's error is on the screen %d times, want once:\n%s", n, screen)
	}
	// The agent's own failed result, and the box.
	if n := strings.Count(screen, marker); n != 2 {
		t.Errorf("the model's error is on the screen %d times, want twice (the agent's message, the box):\n%s", n, screen)
	}
	if i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "✗ agent ") }); i < 0 || strings.HasPrefix(lines[i+1], "  ") {
		t.Errorf("the agent phase is not marked failed on a line of its own:\n%s", screen)
	}
	for label, want := range map[string]string{
		"cleaned": "tunnel, proxy, plugin",
		"left":    "sandbox " + h.sandboxName(t, "e2e") + " on provider local (running; amelia stop --profile e2e removes it)",
		"recover": "amelia results --profile e2e refused",
	} {
		if got := row(box, label); got != want {
			t.Errorf("the box's %s row: %q, want %q", label, got, want)
		}
	}
	h.bringsBackKept(t, "refused", screen, "wip.txt", "written before the 400")
}
