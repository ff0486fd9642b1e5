package cli

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/amelia-sandbox/amelia/core/config"
	"github.com/amelia-sandbox/amelia/core/runview"
)

// masker keeps what amelia prints from showing the values the loaded
// config got from ${VAR}s and environment overrides (config.Redact):
// whatever says them — an error, a provider's problem, a plugin's log
// record — they are written as written. Every command's stdout and
// stderr go through it (app.run); only the streams that are not amelia's
// own words (the worker's messages, a command's output in the sandbox)
// bypass it.
type masker struct {
	config atomic.Pointer[config.Config] // nil until a config is loaded
}

// use masks the values of c from now on.
func (m *masker) use(c *config.Config) { m.config.Store(c) }

// String is s with the config's hidden values written as written.
func (m *masker) String(s string) string {
	if c := m.config.Load(); c != nil {
		return c.Redact(s)
	}
	return s
}

// Writer masks what is written to w. Each Write is masked on its own:
// amelia writes a line, a log record or a table cell in one.
func (m *masker) Writer(w io.Writer) io.Writer { return maskWriter{w, m} }

type maskWriter struct {
	w io.Writer
	m *masker
}

func (mw maskWriter) Write(p []byte) (int, error) {
	s := mw.m.String(string(p))
	if s == string(p) {
		return mw.w.Write(p)
	}
	if _, err := io.WriteString(mw.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Err is err with its message masked; errors.Is and errors.As see err.
func (m *masker) Err(err error) error {
	if err == nil {
		return nil
	}
	if msg := m.String(err.Error()); msg != err.Error() {
		return maskedError{msg, err}
	}
	return err
}

type maskedError struct {
	msg string
	err error
}

func (e maskedError) Error() string { return e.msg }
func (e maskedError) Unwrap() error { return e.err }

// View masks the errors a run's view shows, in its phases and its
// summary, and a live view's notices: the host's own words. The worker's
// messages go through as they are. A live view stays one.
func (m *masker) View(v runview.View) runview.View {
	if l, ok := v.(runview.Live); ok {
		return maskedLive{maskedView{v, m}, l}
	}
	return maskedView{v, m}
}

type maskedLive struct {
	maskedView
	live runview.Live
}

func (v maskedLive) Notice(text string) { v.live.Notice(v.m.String(text)) }

type maskedView struct {
	runview.View
	m *masker
}

func (v maskedView) PhaseEnd(name string, d time.Duration, err error) {
	v.View.PhaseEnd(name, d, v.m.Err(err))
}

func (v maskedView) Summary(s runview.Summary) {
	s.Err = v.m.Err(s.Err)
	v.View.Summary(s)
}
