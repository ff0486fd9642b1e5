package runview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// Types of the host's own lines. They are not AgenticMessage types, so a
// reader that knows only those (protocol.Decoder, the Python Amelia's
// pydantic models) rejects these lines and can skip them.
const (
	typePhase   = "phase"
	typeSummary = "summary"
)

// Values of "status" in phase and summary lines.
const (
	statusStarted     = "started"
	statusDone        = "done"
	statusFailed      = "failed"
	statusInterrupted = "interrupted"
)

// phaseLine is the JSON form of PhaseStart and PhaseEnd. Field order is the
// key order; absent values are null, as in the worker's lines.
type phaseLine struct {
	Type       string  `json:"type"`
	Content    string  `json:"content"`
	Status     string  `json:"status"`
	DurationMs *int64  `json:"duration_ms"`
	Error      *string `json:"error"`
}

// summaryLine is the JSON form of Summary.
type summaryLine struct {
	Type     string                `json:"type"`
	Status   string                `json:"status"`
	Workflow *string               `json:"workflow"`
	Branch   *string               `json:"branch"`
	Pushed   bool                  `json:"pushed"`
	DiffStat *string               `json:"diff_stat"`
	Usage    *protocol.DriverUsage `json:"usage"`
	WallMs   int64                 `json:"wall_ms"`
	Error    *string               `json:"error"`
	// LastCommand is the agent's last command when it did not succeed.
	LastCommand *lastCommandLine `json:"last_command"`
	Kept        *keptLine        `json:"kept"`
	Cleaned     []string         `json:"cleaned"`
	Left        []string         `json:"left"`
}

// lastCommandLine is the JSON form of a failedCommand.
type lastCommandLine struct {
	Command  string `json:"command"`
	ExitCode *int   `json:"exit_code"`
	Status   string `json:"status"`
}

// keptLine is the JSON form of Kept.
type keptLine struct {
	Sandbox string `json:"sandbox"`
	Branch  string `json:"branch"`
	Dir     string `json:"dir"`
	Recover string `json:"recover"`
}

// jsonView writes one JSON line per event; see NewJSON.
type jsonView struct {
	mu     sync.Mutex
	w      io.Writer
	buf    bytes.Buffer
	enc    *json.Encoder // writes into buf
	err    error         // the first error; after a write error nothing is written
	broken bool          // a write failed
	closed bool
	cmds   commands // the agent's commands, for the summary
}

// NewJSON returns a view that writes one JSON object per line to w, each
// with a single Write call, for programs to read.
//
// The worker's messages are written exactly as the worker wrote them (the
// bytes of protocol.AppendJSON). The host's events use the same envelope —
// "type" first, a phase's name in "content", every key always present in a
// fixed order, null when absent — with types the worker never writes
// ("phase", "summary"), so a reader that knows only AgenticMessages can skip
// them by type (protocol.Decoder rejects them with protocol.ErrInvalid):
//
//	{"type":"phase","content":"workspace","status":"started","duration_ms":null,"error":null}
//	{"type":"phase","content":"workspace","status":"done","duration_ms":412,"error":null}
//	{"type":"phase","content":"workspace","status":"failed","duration_ms":412,"error":"clone: ..."}
//	{"type":"phase","content":"agent","status":"interrupted","duration_ms":7712,"error":"context canceled"}
//	{"type":"summary","status":"done","workflow":"fix-login-3f9a","branch":"amelia/fix-login-3f9a",
//	 "pushed":false,"diff_stat":" main.go | 2 +-\n 1 file changed, ...","usage":{...},"wall_ms":61234,
//	 "error":null,"last_command":null,"kept":null,"cleaned":["worktree","tunnel","plugin","proxy"],
//	 "left":["sandbox dev (running; amelia stop --profile dev removes it)"]}
//
// (the summary is one line). A phase's or summary's status is "failed" and
// its error set when it failed, and "interrupted" (the error saying how)
// when the run was interrupted. A summary's last_command is null unless the
// agent's last command (a tool call with a "command", the worker's
// execute) did not succeed and the run was not interrupted (its last
// command was then most likely stopped with it): then it is
// {"command","exit_code","status"}, exit_code null for a command that did
// not exit (killed, timed out) and status the worker's words ("failed with
// exit code 127"); the run's own status stays what it was, done when the
// agent ended by itself. A summary's kept is null, or where the work
// of a run that failed or was interrupted after its agent started is kept
// ({"sandbox","branch","dir","recover"}, the last the command that brings
// it back); cleaned lists what the run's cleanups removed or stopped, left
// what the run leaves behind besides kept, each with what becomes of it
// (both lists, possibly empty, never null); its usage is a DriverUsage as
// the worker writes it; empty strings are written as null. Durations are
// whole milliseconds.
func NewJSON(w io.Writer) View {
	v := &jsonView{w: w}
	v.enc = json.NewEncoder(&v.buf)
	// Keep <, > and & as they are, as the worker's lines do.
	v.enc.SetEscapeHTML(false)
	return v
}

func (v *jsonView) PhaseStart(name string) {
	v.write(phaseLine{Type: typePhase, Content: name, Status: statusStarted})
}

func (v *jsonView) PhaseEnd(name string, d time.Duration, err error) {
	l := phaseLine{Type: typePhase, Content: name, Status: statusDone, DurationMs: new(d.Milliseconds())}
	if err != nil {
		l.Status, l.Error = endStatus(err), new(err.Error())
	}
	v.write(l)
}

// endStatus is the status of a phase or run that ended with err, not nil.
func endStatus(err error) string {
	if interrupted(err) {
		return statusInterrupted
	}
	return statusFailed
}

func (v *jsonView) Summary(s Summary) {
	l := summaryLine{
		Type:     typeSummary,
		Status:   statusDone,
		Workflow: nonEmpty(s.Workflow),
		Branch:   nonEmpty(s.Branch),
		Pushed:   s.Pushed,
		DiffStat: nonEmpty(s.DiffStat),
		Usage:    s.Usage,
		WallMs:   s.Wall.Milliseconds(),
		Cleaned:  append([]string{}, s.Cleaned...),
		Left:     append([]string{}, s.Left...),
	}
	if s.Err != nil {
		l.Status, l.Error = endStatus(s.Err), new(s.Err.Error())
	}
	if k := s.Kept; k != nil {
		l.Kept = &keptLine{Sandbox: k.Sandbox, Branch: k.Branch, Dir: k.Dir, Recover: k.Recover}
	}
	v.mu.Lock()
	if f := v.cmds.reported(s); f != nil {
		l.LastCommand = &lastCommandLine{Command: f.command, ExitCode: f.code, Status: f.status}
	}
	v.mu.Unlock()
	v.write(l)
}

func (v *jsonView) Message(m *protocol.AgenticMessage) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.broken {
		return
	}
	v.cmds.see(m)
	v.buf.Reset()
	b, err := protocol.AppendJSON(v.buf.AvailableBuffer(), m)
	if err != nil {
		// One bad message is skipped; the stream goes on.
		v.fail(fmt.Errorf("encode worker message: %w", err))
		return
	}
	v.buf.Write(append(b, '\n'))
	v.flush()
}

// write encodes l as one line and writes it.
func (v *jsonView) write(l any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.broken {
		return
	}
	v.buf.Reset()
	if err := v.enc.Encode(l); err != nil {
		v.fail(fmt.Errorf("encode event: %w", err))
		return
	}
	v.flush()
}

// flush writes buf, which holds one line; v.mu is held.
func (v *jsonView) flush() {
	if err := writeAll(v.w, v.buf.Bytes()); err != nil {
		v.broken = true
		v.fail(err)
	}
	if v.buf.Cap() > maxKeptBuffer {
		v.buf = bytes.Buffer{}
	}
}

// fail remembers err if it is the first; v.mu is held.
func (v *jsonView) fail(err error) {
	if v.err == nil {
		v.err = err
	}
}

func (v *jsonView) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.closed = true
	return v.err
}

// maxKeptBuffer is the largest line buffer a view keeps between events, so
// that one huge tool output does not pin its memory for the rest of the run.
const maxKeptBuffer = 1 << 20

// writeAll writes b with a single Write call.
func writeAll(w io.Writer, b []byte) error {
	n, err := w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("write view: %w", err)
	}
	return nil
}

// nonEmpty returns a pointer to s, or nil (JSON null) if s is empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
