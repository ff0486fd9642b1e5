package daytonatest

import (
	"errors"
	"io"
	"sync"
)

// errWindowFull ends a write that waited on a full channel window until
// the session ended.
var errWindowFull = errors.New("the session ended while its channel window was full")

// window is the SSH channel window of a session through Daytona's hops.
// Each hop copies the channel's data and never reads its extended data
// (stderr), which x/crypto/ssh still counts against the window: so stdout
// flows (the client reads it and gives the window back) until a window's
// worth of stderr is unread; from then on nothing flows, stdout or
// stderr, and the command blocks on its next write once its pipes fill,
// until the session ends.
type window struct {
	mu      sync.Mutex
	free    int // bytes stderr may still take; negative: no limit
	dropped int
	stalled bool
	ended   <-chan struct{} // the session ended
	stall   func()          // called once, on the first blocked write
}

func (w *window) droppedBytes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// stallLocked blocks a write of which n bytes went through until the
// session ends. It is called with w.mu held, and releases it.
func (w *window) stallLocked(n int) (int, error) {
	first := !w.stalled
	w.stalled = true
	w.mu.Unlock()
	if first && w.stall != nil {
		w.stall()
	}
	<-w.ended
	return n, errWindowFull
}

// windowWriter is one stream of a session through its window: stdout to
// dst, or stderr (dst nil), which is dropped.
type windowWriter struct {
	w   *window
	dst io.Writer
}

func (ww *windowWriter) Write(p []byte) (int, error) {
	w := ww.w
	w.mu.Lock()
	if ww.dst != nil {
		if w.free == 0 {
			return w.stallLocked(0)
		}
		w.mu.Unlock()
		return ww.dst.Write(p)
	}
	if w.free < 0 {
		w.dropped += len(p)
		w.mu.Unlock()
		return len(p), nil
	}
	n := min(len(p), w.free)
	w.free -= n
	w.dropped += n
	if n < len(p) {
		return w.stallLocked(n)
	}
	w.mu.Unlock()
	return n, nil
}
