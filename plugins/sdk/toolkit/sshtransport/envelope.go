package sshtransport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// Bootstrap runs script (args its positional parameters) with sh in a
// session as envelope.Bootstrap writes it: stderr merged into stdout, the
// exit code written into it, so that nothing depends on the session's
// side channels; for preparing a sandbox before the worker is in it. It
// returns the script's output (stderr included) and exit code. A session
// whose output lacks the exit line is ErrUnavailable: the script may or
// may not have run.
func (c *Conn) Bootstrap(ctx context.Context, script string, stdin io.Reader, args ...string) ([]byte, int, error) {
	s, release, err := c.Session(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer release()
	defer s.Close()
	tag := shexec.NewTag()
	var out bytes.Buffer
	s.Stdin, s.Stdout = stdin, &out
	stop := context.AfterFunc(ctx, func() { s.Close() })
	defer stop()
	// The exit status, which the server may not send, is not waited for:
	// the output's end is.
	err = s.Run(envelope.Bootstrap(tag, script, args...))
	if ctx.Err() != nil {
		return nil, 0, ctx.Err()
	}
	output, code, ok := envelope.BootstrapResult(tag, out.Bytes())
	if !ok {
		why := "the session ended before the script's exit code came"
		if errors.As(err, new(*ssh.ExitMissingError)) || err == nil || strings.HasPrefix(err.Error(), "ssh: command ") {
			// The server's own account says nothing more (the last names
			// the whole command line).
			return output, 0, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: %s", c.target, why)
		}
		return output, 0, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: %s: %v", c.target, why, err)
	}
	return output, code, nil
}

// Mux starts the worker at path worker serving many commands over one
// session (`amelia-worker mux`) and returns the client
// end; the session lasts until the Mux is closed or breaks. Through a
// gateway where each session costs fresh connections upstream, a command
// on it costs a round trip instead.
func (c *Conn) Mux(ctx context.Context, worker string) (*envelope.Mux, error) {
	s, release, err := c.Session(ctx)
	if err != nil {
		return nil, err
	}
	m, err := c.startMux(ctx, s, worker)
	if err != nil {
		s.Close()
		release()
		return nil, err
	}
	go func() {
		<-m.Done()
		s.Close()
		release()
	}()
	return m, nil
}

// startMux starts the worker in s and waits, within ctx, for its hello.
func (c *Conn) startMux(ctx context.Context, s *ssh.Session, worker string) (*envelope.Mux, error) {
	in, err := s.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", c.target, err)
	}
	out, err := s.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("ssh %s: %w", c.target, err)
	}
	if err := s.Start(envelope.MuxLine(worker)); err != nil {
		return nil, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: start the worker: %v", c.target, err)
	}
	type started struct {
		m   *envelope.Mux
		err error
	}
	ch := make(chan started, 1)
	go func() {
		// Closing the session, not its stdin, ends the stream: stdin's
		// Close races yamux's writer.
		m, err := envelope.NewMux(struct {
			io.Writer
			io.Closer
		}{in, s}, out)
		ch <- started{m, err}
	}()
	select {
	case r := <-ch:
		if errors.Is(r.err, envelope.ErrBroken) {
			r.err = fmt.Errorf("%w: ssh %s: %w", sdk.ErrUnavailable, c.target, r.err)
		}
		return r.m, r.err
	case <-ctx.Done():
		// The caller closes the session, which ends NewMux; a Mux it
		// made meanwhile goes too.
		go func() {
			if r := <-ch; r.m != nil {
				r.m.Close()
			}
		}()
		return nil, ctx.Err()
	}
}
