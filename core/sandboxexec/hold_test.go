package sandboxexec_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
)

// Hold returns once the command said its word, Release ends its stdin
// and returns its end; a command that ends first, or a ctx that ends
// first, is an error and leaves nothing running.
func TestHold(t *testing.T) {
	failed := errors.New("exit 3: taken")
	for _, tc := range []struct {
		name string
		run  func(ctx context.Context, stdin io.Reader, stdout io.Writer) error
		ctx  func() context.Context
		want string // Hold's error; "" when it holds
	}{
		{name: "holds until its stdin ends", run: func(_ context.Context, stdin io.Reader, stdout io.Writer) error {
			io.WriteString(stdout, "hel")
			io.WriteString(stdout, "d\n")
			_, err := io.Copy(io.Discard, stdin)
			return err
		}},
		{name: "ends before its word", want: "taken", run: func(context.Context, io.Reader, io.Writer) error { return failed }},
		{name: "ends well before its word", want: `without saying "held"`, run: func(context.Context, io.Reader, io.Writer) error { return nil }},
		{name: "its ctx ends first", want: context.Canceled.Error(), ctx: func() context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}, run: func(_ context.Context, stdin io.Reader, _ io.Writer) error {
			_, err := io.Copy(io.Discard, stdin) // ends once Hold closes it
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			ended := make(chan struct{})
			h, err := sandboxexec.Hold(ctx, "held\n", func(ctx context.Context, stdin io.Reader, stdout io.Writer) error {
				defer close(ended)
				if ctx.Err() != nil {
					t.Error("the command's ctx is cancelled with the caller's")
				}
				return tc.run(ctx, stdin, stdout)
			})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Hold: %v, want an error saying %q", err, tc.want)
				}
				<-ended // nothing left running
				return
			}
			if err != nil {
				t.Fatalf("Hold: %v", err)
			}
			select {
			case <-h.Done():
				t.Fatal("the command ended before release")
			default:
			}
			if err := h.Release(t.Context()); err != nil {
				t.Errorf("release: %v", err)
			}
			<-h.Done()
			<-ended
		})
	}
}

// A command that ends by itself once it holds is Done, with how it ended.
func TestHeldEndsByItself(t *testing.T) {
	lost := errors.New("the connection dropped")
	drop := make(chan struct{})
	h, err := sandboxexec.Hold(t.Context(), "held\n", func(_ context.Context, _ io.Reader, stdout io.Writer) error {
		io.WriteString(stdout, "held\n")
		<-drop
		return lost
	})
	if err != nil {
		t.Fatal(err)
	}
	close(drop)
	<-h.Done()
	if !errors.Is(h.Err(), lost) {
		t.Errorf("Err: %v, want %v", h.Err(), lost)
	}
	if err := h.Release(t.Context()); !errors.Is(err, lost) {
		t.Errorf("Release after its end: %v, want %v", err, lost)
	}
}
