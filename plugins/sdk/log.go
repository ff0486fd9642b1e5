package sdk

import (
	"io"
	"log/slog"
)

// ProgressKey is the attribute that marks a log record as progress the
// user should see while they wait (a sandbox being created, an image
// being pulled): the amelia CLI shows such Info records even when it shows
// no other logs.
const ProgressKey = "amelia.progress"

// Progress logs msg at Info as progress the user sees, with args as the
// record's other attributes.
func Progress(l *slog.Logger, msg string, args ...any) {
	l.Info(msg, append([]any{ProgressKey, true}, args...)...)
}

// NewLogger returns the logger a plugin process should use: JSON lines on w
// (the plugin's stderr) in the shape go-plugin parses, so each record reaches
// the host's log with its level, message and attributes.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				// The only layout go-plugin's parser accepts.
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				return slog.String("@level", hclogLevelName(a.Value.Any().(slog.Level)))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	}))
}

func hclogLevelName(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}
