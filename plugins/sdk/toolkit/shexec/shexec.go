// Package shexec runs a sandbox command through sh so that the provider
// can find and kill everything it starts, on transports whose exec cannot:
// `docker exec` and an SSH session leave a cancelled command running.
//
// The command goes through a small sh wrapper that changes to the working
// directory and reports its pid on stderr, in a line that carries the
// exec's random tag, before it becomes the command.
// The runtime (runc for an exec, sshd for a session) starts it as the leader
// of its own session and process group, so that pid names the group. Its
// environment carries a tag, which descendants that leave the group
// (setsid) keep. Cancelling runs KillArgv through a second exec: SIGTERM to
// the group and the tagged processes, then SIGKILL after the grace period.
//
// It is part of the SDK's optional toolkit (see package toolkit), not of
// the provider contract.
package shexec

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// wrapper changes to the working directory ($2), reports its pid with a
// control line carrying the exec's tag ($1) on stderr, and becomes the
// command; a command that is not there ends it with 127 and a line that
// says so (sh's own, "amelia-exec: 5: exec: X: not found", names the
// wrapper). What a login shell prints before it (rc files) passes through;
// the first control line counts, and it comes before the command runs, so
// the command cannot forge it.
const wrapper = `t=$1 d=$2
shift 2
if [ -n "$d" ]; then cd -- "$d" 2>/dev/null || { echo "amelia-exec:$t:nodir" >&2; exit 125; }; fi
echo "amelia-exec:$t:pid=$$" >&2
command -v "$1" >/dev/null 2>&1 || { echo "$1: command not found" >&2; exit 127; }
exec "$@"`

// reportingWrapper is wrapper for Command.ReportExit: it stays the group's
// leader and reports the command's exit code in a last control line once
// the command ended. The line begins with a byte of its own (RS, \036),
// not at a line's start, so it needs none (NewExitControl finds and takes
// it off wherever it comes). The wrapper lets the signals a cancel sends
// pass (trap runs its action only after the foreground command ends, and
// a caught signal is reset in the subshell), so the line comes after a
// TERM too, and a signal that came before the command started keeps it
// from starting; a KILL ends the wrapper without the line. Its own stderr
// is /dev/null meanwhile: sh would say there that a signal killed the
// command ("Terminated"); the command gets the real one in the subshell
// it becomes.
const reportingWrapper = `t=$1 d=$2
shift 2
if [ -n "$d" ]; then cd -- "$d" 2>/dev/null || { echo "amelia-exec:$t:nodir" >&2; exit 125; }; fi
echo "amelia-exec:$t:pid=$$" >&2
command -v "$1" >/dev/null 2>&1 || { echo "$1: command not found" >&2; exit 127; }
s=
trap 's=129' HUP; trap 's=130' INT; trap 's=143' TERM
exec 3>&2 2>/dev/null
(exec 2>&3 3>&-; [ -z "$s" ] || exit "$s"; exec "$@")
s=$?
printf '\036amelia-exec:%s:exit=%d\n' "$t" "$s" >&3
exit $s`

// KillScript sends signal $1 to the process group $2 (when not 0) and to
// every process whose environment holds the entry $3. Run as the command's
// own user, it may signal its processes without any capability.
const KillScript = `sig=$1 pgid=$2 tag=$3
[ "$pgid" -gt 0 ] && kill -s "$sig" -- "-$pgid" 2>/dev/null
for e in /proc/[0-9]*/environ; do
	if grep -qxzF -- "$tag" "$e" 2>/dev/null; then
		p=${e#/proc/}
		kill -s "$sig" -- "${p%/environ}" 2>/dev/null
	fi
done
exit 0`

// TagEnv is the environment variable that carries an exec's tag; set it
// last, so the request's environment cannot override it.
const TagEnv = "AMELIA_EXEC_ID"

// NewTag returns a fresh exec tag.
func NewTag() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Argv runs argv in dir ("" for the exec's own) through the wrapper, for
// the exec tagged tag.
func Argv(tag, dir string, argv []string) []string {
	return append([]string{"sh", "-c", wrapper, "amelia-exec", tag, dir}, argv...)
}

// Command is an exec as one shell command line, for transports that take
// a string, like SSH: the environment is set by env(1), since servers may
// refuse to set variables themselves.
type Command struct {
	// Dir is the working directory; "" keeps the login's.
	Dir string
	Env map[string]string
	// Tag is the exec's tag (NewTag), set last.
	Tag string
	// Require is a file that must exist for the command to run (a
	// sandbox's marker); without it the exec reports that the sandbox is
	// gone (Control.NoSandbox) and runs nothing.
	Require string
	Argv    []string
	// ReportExit keeps the wrapper running until the command ends and has
	// it report the exit code on stderr (Control.Exit), for a transport
	// that can lose the code, or tells a killed command from its own
	// failure no better than by an exit code of 255 (an ssh client).
	ReportExit bool
}

// Line is the command line.
func (c Command) Line() string {
	var words []string
	if c.Require != "" {
		words = append(words, "[ -e "+Quote(c.Require)+" ] || { echo "+Quote("amelia-exec:"+c.Tag+":nosandbox")+" >&2; exit 125; };")
	}
	words = append(words, "exec", "env")
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		words = append(words, Quote(k+"="+c.Env[k]))
	}
	words = append(words, Quote(Entry(c.Tag)))
	argv := Argv(c.Tag, c.Dir, c.Argv)
	if c.ReportExit {
		argv[2] = reportingWrapper
	}
	for _, a := range argv {
		words = append(words, Quote(a))
	}
	return strings.Join(words, " ")
}

// Entry is the environment entry that tags an exec's processes.
func Entry(tag string) string { return TagEnv + "=" + tag }

// KillArgv signals a process group (pgid 0: none) and the processes whose
// environment holds entry (Entry(tag), or another VAR=value all of a
// sandbox's processes carry) with sig (TERM, KILL).
func KillArgv(sig string, pgid int, entry string) []string {
	return []string{"sh", "-c", KillScript, "amelia-kill", sig, strconv.Itoa(pgid), entry}
}

// KillLine is KillArgv as one shell command line.
func KillLine(sig string, pgid int, entry string) string {
	words := make([]string, 0, 8)
	for _, a := range KillArgv(sig, pgid, entry) {
		words = append(words, Quote(a))
	}
	return strings.Join(words, " ")
}

// Quote makes s one word for sh.
func Quote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@,+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Control passes an exec's stderr on, less the wrapper's control lines,
// which it reads: the exec's pid, or that the working directory or the
// sandbox is missing, and, for NewExitControl, the command's exit code.
// What comes before the first (a login shell's rc files, the transport's
// own errors) passes unchanged; the first counts, and it comes before the
// command runs, so the command cannot forge it. After it, only exit lines
// are taken off, the last counting. A stream without control lines passes
// whole. Write and Finish belong to the stream's one reader; Known, Pid,
// NoDir and NoSandbox may be called from elsewhere.
type Control struct {
	w      io.Writer // nil discards
	prefix []byte    // "amelia-exec:<tag>:"
	mark   []byte    // "\x1eamelia-exec:<tag>:exit=" with NewExitControl
	// line is held back: the current line while it may be the first
	// control line, then what may be an exit line.
	line  []byte
	start bool          // at the start of a line
	first bool          // the first control line was read
	done  bool          // the stream ended
	known chan struct{} // closed once the control line was read (or the stream ended)
	pid   int
	nodir bool
	gone  bool
	exit  int // the last exit line's code; -1 when none came
}

// NewControl reads the control lines of the exec tagged tag off the
// stderr it passes to w.
func NewControl(w io.Writer, tag string) *Control {
	return &Control{w: w, prefix: []byte("amelia-exec:" + tag + ":"), start: true, known: make(chan struct{}), exit: -1}
}

// NewExitControl is NewControl for a Command with ReportExit: it reads
// the exit line too (Exit).
func NewExitControl(w io.Writer, tag string) *Control {
	c := NewControl(w, tag)
	c.mark = []byte("\x1eamelia-exec:" + tag + ":exit=")
	return c
}

func (c *Control) Write(p []byte) (int, error) {
	n := len(p)
	if c.done {
		return n, c.pass(p)
	}
	for len(p) > 0 && !c.first {
		i := bytes.IndexByte(p, '\n')
		if !c.start {
			// Inside a line that is not the control line: pass it on
			// up to its end.
			if i < 0 {
				return n, c.pass(p)
			}
			if err := c.pass(p[:i+1]); err != nil {
				return 0, err
			}
			p, c.start = p[i+1:], true
			continue
		}
		chunk := p
		if i >= 0 {
			chunk = p[:i+1]
		}
		c.line = append(c.line, chunk...)
		p = p[len(chunk):]
		if i >= 0 && c.parse(c.line[:len(c.line)-1]) {
			c.line = c.line[:0]
			break
		}
		if i >= 0 || len(c.line) > len(c.prefix)+len("pid=")+20 || !bytes.HasPrefix(c.prefix, c.line) && !bytes.HasPrefix(c.line, c.prefix) {
			// Not the control line: it passes.
			if err := c.pass(c.line); err != nil {
				return 0, err
			}
			c.start, c.line = i >= 0, c.line[:0]
		}
	}
	if c.mark == nil {
		return n, c.pass(p)
	}
	if err := c.takeExits(p); err != nil {
		return 0, err
	}
	return n, nil
}

// takeExits passes p on, less the exit lines, holding back what may
// begin one.
func (c *Control) takeExits(p []byte) error {
	for len(p) > 0 {
		if len(c.line) == 0 {
			i := bytes.IndexByte(p, c.mark[0])
			if i < 0 {
				return c.pass(p)
			}
			if err := c.pass(p[:i]); err != nil {
				return err
			}
			p = p[i:]
		}
		// An exit line is the mark, three digits at most and a newline.
		chunk := p[:min(len(p), len(c.mark)+4-len(c.line))]
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			chunk = chunk[:i+1]
		}
		c.line = append(c.line, chunk...)
		p = p[len(chunk):]
		switch code, state := c.readExit(); state {
		case exitRead:
			c.exit, c.line = code, c.line[:0]
		case exitNot:
			// Its first byte passes; what follows may begin one.
			held := append([]byte(nil), c.line[1:]...)
			if err := c.pass(c.line[:1]); err != nil {
				return err
			}
			c.line = c.line[:0]
			if err := c.takeExits(held); err != nil {
				return err
			}
		}
	}
	return nil
}

const (
	exitPartial = iota // what is held may still become an exit line
	exitRead
	exitNot
)

// readExit reads the held line as an exit line.
func (c *Control) readExit() (code, state int) {
	l := c.line
	if len(l) <= len(c.mark) {
		if bytes.HasPrefix(c.mark, l) {
			return 0, exitPartial
		}
		return 0, exitNot
	}
	digits, ok := bytes.CutPrefix(l, c.mark)
	if !ok {
		return 0, exitNot
	}
	digits, ended := bytes.CutSuffix(digits, []byte{'\n'})
	if len(digits) > 3 || bytes.ContainsFunc(digits, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, exitNot
	}
	if !ended {
		return 0, exitPartial
	}
	n, err := strconv.Atoi(string(digits))
	if err != nil || n > 255 {
		return 0, exitNot
	}
	return n, exitRead
}

func (c *Control) pass(p []byte) error {
	if c.w == nil || len(p) == 0 {
		return nil
	}
	_, err := c.w.Write(p)
	return err
}

// parse reads the first control line, reporting whether line was one.
func (c *Control) parse(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, c.prefix)
	if !ok {
		return false
	}
	switch v := string(rest); {
	case v == "nodir":
		c.nodir = true
	case v == "nosandbox":
		c.gone = true
	case strings.HasPrefix(v, "pid="):
		pid, err := strconv.Atoi(v[len("pid="):])
		if err != nil {
			return false
		}
		c.pid = pid
	default:
		return false
	}
	c.first = true
	close(c.known)
	return true
}

// Finish passes on what was held back when stderr ends; call it then.
func (c *Control) Finish() {
	if c.done {
		return
	}
	c.done = true
	if !c.first {
		close(c.known)
	}
	_ = c.pass(c.line)
	c.line = nil
}

// Known is closed once the control line was read, or stderr ended.
func (c *Control) Known() <-chan struct{} { return c.known }

// Pid is the exec's pid (the leader of its process group), 0 when unknown.
// Read it after Known is closed.
func (c *Control) Pid() int { return c.pid }

// NoDir reports that the working directory did not exist: the command did
// not run. Read it after the stream ended.
func (c *Control) NoDir() bool { return c.nodir }

// NoSandbox reports that Command.Require did not exist: the command did not
// run. Read it after the stream ended.
func (c *Control) NoSandbox() bool { return c.gone }

// Exit is the command's exit code as the wrapper reported it
// (Command.ReportExit); ok is false when no report came (the wrapper was
// killed, or the command did not run). Read it after the stream ended.
func (c *Control) Exit() (code int, ok bool) { return c.exit, c.exit >= 0 }

// pidWait bounds how long a cancel waits for the exec's pid.
const pidWait = 2 * time.Second

// killWait bounds how long the stream may stay open after SIGKILL.
const killWait = 10 * time.Second

// Stopper is what Stop needs of a transport.
type Stopper struct {
	// Control is the exec's stderr filter.
	Control *Control
	// Ended yields the output's end (the stream's error, nil at EOF).
	Ended <-chan error
	// Signal runs KillArgv(sig, pgid, Entry(tag)) in the sandbox as the
	// exec's user.
	Signal func(sig string, pgid int) error
	// Cut closes the exec's stream, for a command whose output stays open
	// after SIGKILL.
	Cut func()
}

// Stop ends a cancelled exec: SIGTERM to its group and tagged processes,
// SIGKILL once grace is over, then the rest of its output. It returns the
// last signal sent ("" when the exec ended on its own meanwhile) and the
// output's end, and reports a failing signal through warn.
func (s Stopper) Stop(grace time.Duration, warn func(sig string, err error)) (string, error) {
	pid := 0
	select {
	case <-s.Control.Known():
		pid = s.Control.Pid()
	case err := <-s.Ended:
		return "", err
	case <-time.After(pidWait):
	}
	signal := func(sig string) {
		if err := s.Signal(sig, pid); err != nil {
			warn(sig, err)
		}
	}
	signal("TERM")
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-s.Ended:
		return "TERM", err
	case <-t.C:
	}
	signal("KILL")
	t.Reset(killWait)
	select {
	case err := <-s.Ended:
		return "KILL", err
	case <-t.C:
		s.Cut()
		<-s.Ended
		return "KILL", fmt.Errorf("the command's output did not end %v after SIGKILL", killWait)
	}
}

// Signal names the signal that killed an exec Stop ended, from its exit
// code (128+N): "" when the code is not that signal's.
func Signal(sent string, code int) string {
	if n, ok := map[string]int{"TERM": 15, "KILL": 9}[sent]; ok && code == 128+n {
		return sent
	}
	return ""
}

// ttyWrapper changes to the working directory ($1) and becomes the
// command, for an exec on a terminal: it reports nothing on stderr, which
// the terminal would show, so the transport kills a cancelled command by
// its tag alone. A missing directory ends it with 125 and a line saying so.
const ttyWrapper = `if [ -n "$1" ]; then cd -- "$1" 2>/dev/null || { echo "amelia: working directory $1 does not exist in the sandbox" >&2; exit 125; }; fi
shift
exec "$@"`

// TTYLine is the command line for the exec on a terminal: Line without
// the control lines (a missing Require file ends it with 125 and a line
// saying so), for transports that take a string.
func (c Command) TTYLine() string {
	var words []string
	if c.Require != "" {
		words = append(words, "[ -e "+Quote(c.Require)+" ] || { echo 'amelia: the sandbox is gone' >&2; exit 125; };")
	}
	words = append(words, "exec", "env")
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		words = append(words, Quote(k+"="+c.Env[k]))
	}
	words = append(words, Quote(Entry(c.Tag)), "sh", "-c", Quote(ttyWrapper), "amelia-tty", Quote(c.Dir))
	for _, a := range c.Argv {
		words = append(words, Quote(a))
	}
	return strings.Join(words, " ")
}
