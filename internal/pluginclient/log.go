package pluginclient

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// levelTrace is hclog's trace level in slog terms.
const levelTrace = slog.LevelDebug - 4

// hostLogger adapts the host's slog.Logger to the hclog.Logger go-plugin
// wants, so the plugin's stderr and go-plugin's own messages land in the
// host's log. It also keeps the last error lines (a panic, typically) so a
// crash can be explained in the error the host returns.
type hostLogger struct {
	l    *slog.Logger
	name string
	args []any
	tail *errorTail
}

var _ hclog.Logger = (*hostLogger)(nil)

func newHostLogger(l *slog.Logger) *hostLogger {
	return &hostLogger{l: l, tail: &errorTail{}}
}

func (h *hostLogger) Log(level hclog.Level, msg string, args ...any) {
	var sl slog.Level
	switch level {
	case hclog.Trace:
		sl = levelTrace
	case hclog.Debug, hclog.NoLevel:
		sl = slog.LevelDebug
	case hclog.Info:
		sl = slog.LevelInfo
	case hclog.Warn:
		sl = slog.LevelWarn
	default:
		sl = slog.LevelError
		h.tail.add(msg)
	}
	if !h.l.Enabled(context.Background(), sl) {
		return
	}
	h.l.Log(context.Background(), sl, msg, append(append([]any(nil), h.args...), args...)...)
}

func (h *hostLogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hostLogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hostLogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hostLogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hostLogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hostLogger) enabled(l slog.Level) bool { return h.l.Enabled(context.Background(), l) }
func (h *hostLogger) IsTrace() bool             { return h.enabled(levelTrace) }
func (h *hostLogger) IsDebug() bool             { return h.enabled(slog.LevelDebug) }
func (h *hostLogger) IsInfo() bool              { return h.enabled(slog.LevelInfo) }
func (h *hostLogger) IsWarn() bool              { return h.enabled(slog.LevelWarn) }
func (h *hostLogger) IsError() bool             { return h.enabled(slog.LevelError) }
func (h *hostLogger) ImpliedArgs() []any        { return h.args }
func (h *hostLogger) Name() string              { return h.name }

func (h *hostLogger) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

// Named keeps the name for Name() only: the host's logger already says which
// plugin a record comes from.
func (h *hostLogger) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (h *hostLogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel is a no-op: the level belongs to the host's slog handler.
func (h *hostLogger) SetLevel(hclog.Level) {}

func (h *hostLogger) GetLevel() hclog.Level {
	for _, l := range []struct {
		s slog.Level
		h hclog.Level
	}{{levelTrace, hclog.Trace}, {slog.LevelDebug, hclog.Debug}, {slog.LevelInfo, hclog.Info}, {slog.LevelWarn, hclog.Warn}} {
		if h.enabled(l.s) {
			return l.h
		}
	}
	return hclog.Error
}

func (h *hostLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hostLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineLogger{log: h, level: hclog.Info}
}

// lineLogger logs each line written to it; go-plugin's SyncStdout/SyncStderr
// (what a plugin writes to os.Stdout/os.Stderr after the handshake) use it.
type lineLogger struct {
	log   *hostLogger
	level hclog.Level
	mu    sync.Mutex
	buf   []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.log.Log(w.level, string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

// errorTail keeps the last few error-level lines a plugin wrote.
type errorTail struct {
	mu    sync.Mutex
	lines []string
}

const tailLines = 20

func (t *errorTail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, line)
	if len(t.lines) > tailLines {
		t.lines = t.lines[len(t.lines)-tailLines:]
	}
}

// reason picks the line that best explains a crash: a panic or fatal error
// if there is one, else the last error line.
func (t *errorTail) reason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return l
		}
	}
	if len(t.lines) > 0 {
		return t.lines[len(t.lines)-1]
	}
	return ""
}
