package cli

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/amelia-sandbox/amelia/core/runview"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// newLogger is the CLI's logger on stderr: warnings and errors as short
// "amelia: warning: ..." lines, and providers' progress (sdk.Progress) as
// "amelia: ..." lines; or with --debug everything, plugins' logs included,
// as slog text records.
func newLogger(w io.Writer, debug bool) *slog.Logger {
	if debug {
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(&briefHandler{w: w, mu: &sync.Mutex{}})
}

// logOutput is where the log goes during a run drawn live on a terminal:
// above the view's live area (runview.Live.Notice), so that no record is
// written into its spinner line; once detached, to w.
type logOutput struct {
	mu   sync.Mutex
	w    io.Writer
	live runview.Live // nil once detached
}

// Write takes one record (both handlers write a record with one Write).
func (o *logOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.live == nil {
		return o.w.Write(p)
	}
	o.live.Notice(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// detach sends what is logged from now on to w: the view is about to close.
func (o *logOutput) detach() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.live = nil
}

// briefHandler writes records at warning level and above as one line
// each, and Info records marked as progress as their message alone.
type briefHandler struct {
	w     io.Writer
	mu    *sync.Mutex
	attrs []slog.Attr
	group string
}

func (h *briefHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

// progress reports whether r is marked with sdk.ProgressKey.
func progress(r slog.Record) bool {
	marked := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == sdk.ProgressKey {
			v := a.Value.Resolve()
			marked = v.Kind() == slog.KindBool && v.Bool()
			return false
		}
		return true
	})
	return marked
}

func (h *briefHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("amelia: ")
	if r.Level < slog.LevelWarn {
		if !progress(r) {
			return nil
		}
		b.WriteString(r.Message + "\n")
		h.mu.Lock()
		defer h.mu.Unlock()
		_, err := io.WriteString(h.w, b.String())
		return err
	}
	if r.Level >= slog.LevelError {
		b.WriteString("error: ")
	} else {
		b.WriteString("warning: ")
	}
	b.WriteString(r.Message)
	write := func(a slog.Attr) bool {
		v := a.Value.Resolve().String()
		if strings.ContainsAny(v, " \t\n\"=") || v == "" {
			v = strconv.Quote(v)
		}
		b.WriteString(" " + a.Key + "=" + v)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(func(a slog.Attr) bool {
		if h.group != "" {
			a.Key = h.group + "." + a.Key
		}
		return write(a)
	})
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *briefHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		if h.group != "" {
			a.Key = h.group + "." + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

func (h *briefHandler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}
