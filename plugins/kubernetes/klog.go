package kubernetes

import (
	"context"
	"log/slog"
	"sync"

	"k8s.io/klog/v2"
)

// client-go reports through klog, a logger of the process's own: errors
// of streams the provider ends on purpose ("Copying stdin failed: read on
// closed pipe" when a command session closes), and the like. They go to
// the provider's log at debug level, never to stderr as they are.
var klogOnce sync.Once

// routeKlog sends klog's records to logger at debug level, once per
// process (klog has one logger).
func routeKlog(logger *slog.Logger) {
	klogOnce.Do(func() { klog.SetSlogLogger(slog.New(debugHandler{logger.Handler()})) })
}

// debugHandler hands every record to h at debug level.
type debugHandler struct{ h slog.Handler }

func (d debugHandler) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return debugHandler{d.h.WithAttrs(attrs)}
}

func (d debugHandler) WithGroup(name string) slog.Handler { return debugHandler{d.h.WithGroup(name)} }
