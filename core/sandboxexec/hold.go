package sandboxexec

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Held is a command that holds something in the sandbox (a lock) for as
// long as its stdin stays open (see Hold).
type Held struct {
	stdin *io.PipeWriter
	done  chan struct{}
	err   error // how the command ended, once done is closed
}

// Hold runs a command that holds something in the sandbox for as long as
// its stdin stays open, and says word on its stdout once it does: run
// starts it with the stdin and stdout given and returns when it has
// ended. Hold returns once the word came; or, when the command ended
// before, with run's error. The command outlives ctx's cancellation, so
// the cleanups of an interrupted caller still hold what it holds; a ctx
// that ends before the word came ends it.
func Hold(ctx context.Context, word string, run func(ctx context.Context, stdin io.Reader, stdout io.Writer) error) (*Held, error) {
	stdinR, stdinW := io.Pipe()
	said := &signalOn{want: []byte(word), ch: make(chan struct{})}
	h := &Held{stdin: stdinW, done: make(chan struct{})}
	go func() {
		h.err = run(context.WithoutCancel(ctx), stdinR, said)
		// A command that ended by itself is not read from again: what
		// copies into its stdin must not wait for Release.
		stdinR.Close()
		close(h.done)
	}()
	select {
	case <-said.ch:
		return h, nil
	case <-h.done:
		stdinW.Close()
		if h.err == nil {
			return nil, fmt.Errorf("the holding command ended without saying %q", strings.TrimSpace(word))
		}
		return nil, h.err
	case <-ctx.Done():
		stdinW.Close()
		<-h.done
		return nil, ctx.Err()
	}
}

// Done is closed once the command has ended, released or not.
func (h *Held) Done() <-chan struct{} { return h.done }

// Err is how the command ended, once Done is closed.
func (h *Held) Err() error {
	<-h.done
	return h.err
}

// Release closes the command's stdin, its cue to let go, and waits for
// its end within ctx.
func (h *Held) Release(ctx context.Context) error {
	h.stdin.Close()
	select {
	case <-h.done:
		return h.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// signalOn closes ch once what was written holds want.
type signalOn struct {
	mu   sync.Mutex
	want []byte
	seen []byte
	ch   chan struct{}
	done bool
}

func (s *signalOn) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		s.seen = append(s.seen, p...)
		if bytes.Contains(s.seen, s.want) {
			s.done = true
			close(s.ch)
		}
	}
	return len(p), nil
}
