package runview

import (
	"io"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// TTYOptions configures [NewTTY].
type TTYOptions struct {
	// Width is the terminal's width in columns. Zero asks the terminal w
	// writes to before each event, so a resized window is followed, and
	// uses 80 when w is not a terminal.
	Width int
	// NoColor leaves out colours and bold; the spinner and the rewritten
	// live line stay.
	NoColor bool
	// Tick is how often the spinner turns: zero means every 100 ms. A
	// negative Tick starts no goroutine: the spinner then moves only when
	// an event redraws it, which makes the output a function of the events
	// (for tests).
	Tick time.Duration
	// Now is the clock for the elapsed time of a running phase; nil means
	// time.Now.
	Now func() time.Time
}

// Terminal control: return to the start of the line and erase it.
const eraseLine = "\r\x1b[2K"

// SGR parameters of the few styles the display uses.
const (
	sgrBold   = "1"
	sgrDim    = "2"
	sgrRed    = "31"
	sgrGreen  = "32"
	sgrYellow = "33"
	sgrCyan   = "36"
)

// Marks that start a finished line.
const (
	markDone        = "✓"
	markFailed      = "✗"
	markInterrupted = "■"
	markUnfinished  = "–"
	markPhase       = "▸"
)

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// ttyView is the live display; see NewTTY.
type ttyView struct {
	mu     sync.Mutex
	w      io.Writer
	opts   TTYOptions
	now    func() time.Time
	buf    []byte   // the output of the event being shown
	frame  int      // the spinner's frame
	live   bool     // the live line is on screen and must be erased first
	phases []*phase // running phases, in start order
	calls  []toolCall
	usage  *protocol.DriverUsage // the last usage message
	cmds   commands              // the agent's commands, for the summary
	err    error                 // the first write error; nothing is written after it
	closed bool
	stop   chan struct{} // closed by Close to stop the ticker; nil without one
	done   chan struct{} // closed when the ticker has stopped
}

// phase is a running phase.
type phase struct {
	name   string
	start  time.Time
	headed bool // its "▸ name" line is out, above the messages it contains
}

// toolCall is a tool call still waiting for its result.
type toolCall struct {
	id      *string
	name    string
	subject string
}

// NewTTY returns the live display for a person at a terminal: the running
// phase or tool call on one line with a spinner, rewritten in place; a line
// per finished phase ("✓ workspace 0.4s", "✗ workspace 1.2s" when it
// failed, "■ agent 7.7s (interrupted)") and per finished tool call
// ("✓ write_file main.go", "✗ execute go test ./... (exit 1)"); the
// agent's text wrapped to the width; notices above the live line; and a box
// with the summary, which is where a failed run's error is shown, once.
// Everything the agent or its tools wrote is stripped of control characters
// first, so it cannot drive the terminal.
//
// Unless opts.Tick is negative, a goroutine turns the spinner until Close.
func NewTTY(w io.Writer, opts TTYOptions) Live {
	v := &ttyView{w: w, opts: opts, now: opts.Now}
	if v.now == nil {
		v.now = time.Now
	}
	if opts.Tick >= 0 {
		tick := opts.Tick
		if tick == 0 {
			tick = 100 * time.Millisecond
		}
		v.stop, v.done = make(chan struct{}), make(chan struct{})
		go v.spin(tick)
	}
	return v
}

// spin turns the spinner every tick until Close.
func (v *ttyView) spin(tick time.Duration) {
	defer close(v.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
			v.tick()
		}
	}
}

// tick advances the spinner and redraws the live line.
func (v *ttyView) tick() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || !v.running() {
		return
	}
	v.frame = (v.frame + 1) % len(spinnerFrames)
	v.begin()
	v.end()
}

// draw runs f between begin and end, under the lock, unless the view is
// closed.
func (v *ttyView) draw(f func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	v.begin()
	f()
	v.end()
}

func (v *ttyView) PhaseStart(name string) {
	v.draw(func() { v.phases = append(v.phases, &phase{name: name, start: v.now()}) })
}

func (v *ttyView) PhaseEnd(name string, d time.Duration, err error) {
	v.draw(func() { v.phaseEnded(name, d, err) })
}

func (v *ttyView) phaseEnded(name string, d time.Duration, err error) {
	for i := len(v.phases) - 1; i >= 0; i-- {
		if v.phases[i].name == name {
			v.phases = append(v.phases[:i], v.phases[i+1:]...)
			break
		}
	}
	// A failure's error is shown once, in the summary box: the run's error
	// says which phase failed and why.
	text := oneLine(name) + " " + formatDuration(d)
	switch {
	case err == nil:
		v.line(0, v.paint(sgrGreen, markDone)+" "+text)
	case interrupted(err):
		v.line(0, v.paint(sgrYellow, markInterrupted)+" "+text+" (interrupted)")
	default:
		v.line(0, v.paint(sgrRed, markFailed)+" "+text)
	}
}

func (v *ttyView) Notice(text string) {
	v.draw(func() {
		for _, l := range wrap(sanitize(text), v.cols()) {
			v.line(0, l)
		}
	})
}

func (v *ttyView) Message(m *protocol.AgenticMessage) {
	if m != nil {
		v.draw(func() { v.message(m) })
	}
}

func (v *ttyView) message(m *protocol.AgenticMessage) {
	v.cmds.see(m)
	switch m.Type {
	case protocol.Thinking:
		v.text(deref(m.Content), sgrDim, false)
	case protocol.Result:
		v.text(deref(m.Content), "", m.IsError)
	case protocol.ToolCall:
		name := oneLine(deref(m.ToolName))
		v.calls = append(v.calls, toolCall{id: clone(m.ToolCallID), name: name, subject: toolSubject(name, m.ToolInput)})
	case protocol.ToolResult:
		v.toolResult(m)
	case protocol.Usage:
		v.usage = cloneUsage(m.Usage)
	}
}

// text shows the agent's text wrapped, below the running phase; a failed
// result is marked and red.
func (v *ttyView) text(s, sgr string, failed bool) {
	lines := wrap(sanitize(s), v.cols()-v.indent()-2)
	if len(lines) == 0 {
		return
	}
	v.header()
	for i, l := range lines {
		switch {
		case failed && i == 0:
			v.line(v.indent(), v.paint(sgrRed, markFailed+" "+l))
		case failed:
			v.line(v.indent(), v.paint(sgrRed, "  "+l))
		default:
			v.line(v.indent(), v.paint(sgr, l))
		}
	}
}

// toolResult shows the tool call that m answers as finished.
func (v *ttyView) toolResult(m *protocol.AgenticMessage) {
	call := toolCall{name: oneLine(deref(m.ToolName))}
	for i, c := range v.calls {
		// The worker always sets tool_call_id; without one, the oldest call
		// of the same tool is the best guess.
		if (m.ToolCallID != nil && c.id != nil && *c.id == *m.ToolCallID) ||
			(m.ToolCallID == nil && c.name == call.name) {
			call = c
			v.calls = append(v.calls[:i], v.calls[i+1:]...)
			break
		}
	}
	cols := v.cols() - v.indent() - 2 // after the mark
	mark, sgr, reason := markDone, sgrGreen, ""
	if m.IsError {
		mark, sgr = markFailed, sgrRed
		reason = " (" + truncate(failureReason(deref(m.ToolOutput)), max(cols/2, 10)) + ")"
	}
	text := call.name
	if call.subject != "" {
		text = truncate(call.name+" "+call.subject, cols-textWidth(reason))
	}
	v.header()
	v.line(v.indent(), v.paint(sgr, mark)+" "+text+reason)
}

func (v *ttyView) Summary(s Summary) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	if s.Usage == nil {
		s.Usage = v.usage
	}
	v.begin()
	for _, l := range v.box(s) {
		v.line(0, l)
	}
	v.end()
}

func (v *ttyView) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return v.err
	}
	v.begin()
	for _, c := range v.calls {
		const note = " (no result)"
		text := truncate(strings.TrimSpace(c.name+" "+c.subject), v.cols()-v.indent()-2-len(note))
		v.line(v.indent(), markUnfinished+" "+text+note)
	}
	now := v.now()
	for _, p := range v.phases {
		v.line(0, markUnfinished+" "+oneLine(p.name)+" "+formatDuration(now.Sub(p.start))+" (unfinished)")
	}
	v.calls, v.phases = nil, nil
	v.end()
	v.closed = true
	err := v.err
	v.mu.Unlock()
	if v.stop != nil {
		close(v.stop)
		<-v.done
	}
	return err
}

// begin starts the output of an event: the live line is erased so that
// finished lines take its place. v.mu is held, as in all methods below.
func (v *ttyView) begin() {
	v.buf = v.buf[:0]
	if v.live {
		v.buf = append(v.buf, eraseLine...)
		v.live = false
	}
}

// end draws the live line again, if anything is running, and writes the
// event's output with one Write.
func (v *ttyView) end() {
	if v.running() {
		v.buf = append(v.buf, v.liveLine()...)
		v.live = true
	}
	if len(v.buf) > 0 && v.err == nil {
		v.err = writeAll(v.w, v.buf)
	}
	if cap(v.buf) > maxKeptBuffer {
		v.buf = nil
	}
}

// running reports whether a phase or tool call is running.
func (v *ttyView) running() bool { return len(v.phases) > 0 || len(v.calls) > 0 }

// liveLine is the spinner and what is running: the innermost phase, its
// elapsed time once it is long enough to matter, and the latest tool call.
// It is cut to the width: a line that wrapped could not be erased.
func (v *ttyView) liveLine() string {
	var parts []string
	if len(v.phases) > 0 {
		p := v.phases[len(v.phases)-1]
		s := oneLine(p.name)
		if d := v.now().Sub(p.start); d >= time.Second {
			s += " " + d.Truncate(time.Second).String()
		}
		parts = append(parts, s)
	}
	if len(v.calls) > 0 {
		c := v.calls[len(v.calls)-1]
		parts = append(parts, strings.TrimSpace(c.name+" "+c.subject))
	}
	return v.paint(sgrCyan, spinnerFrames[v.frame]) + " " + truncate(strings.Join(parts, " · "), v.cols()-2)
}

// header puts out the "▸ name" line of the innermost phase before the first
// message shown inside it.
func (v *ttyView) header() {
	if len(v.phases) == 0 {
		return
	}
	p := v.phases[len(v.phases)-1]
	if !p.headed {
		p.headed = true
		v.line(0, v.paint(sgrBold, markPhase+" "+oneLine(p.name)))
	}
}

// indent is the indentation of messages: under a phase, two columns.
func (v *ttyView) indent() int {
	if len(v.phases) > 0 {
		return 2
	}
	return 0
}

// line appends one finished line.
func (v *ttyView) line(indent int, s string) {
	if s != "" {
		v.buf = append(v.buf, strings.Repeat(" ", indent)...)
	}
	v.buf = append(v.buf, s...)
	v.buf = append(v.buf, '\n')
}

// paint wraps s in the SGR style sgr, unless colour is off.
func (v *ttyView) paint(sgr, s string) string {
	if v.opts.NoColor || sgr == "" || s == "" {
		return s
	}
	return "\x1b[" + sgr + "m" + s + "\x1b[0m"
}

// cols is the number of columns a line may use: one less than the width,
// so that no terminal wraps a full line by itself.
func (v *ttyView) cols() int {
	w := v.opts.Width
	if w <= 0 {
		if tw, ok := terminalWidth(v.w); ok && tw > 0 {
			w = tw
		} else {
			w = 80
		}
	}
	return max(w, 24) - 1
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func clone[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// cloneUsage copies u deeply: the view keeps it past the call.
func cloneUsage(u *protocol.DriverUsage) *protocol.DriverUsage {
	if u == nil {
		return nil
	}
	return &protocol.DriverUsage{
		InputTokens:         clone(u.InputTokens),
		OutputTokens:        clone(u.OutputTokens),
		CacheReadTokens:     clone(u.CacheReadTokens),
		CacheCreationTokens: clone(u.CacheCreationTokens),
		CostUSD:             clone(u.CostUSD),
		DurationMs:          clone(u.DurationMs),
		NumTurns:            clone(u.NumTurns),
		Model:               clone(u.Model),
	}
}
