package sshtransport

import (
	"context"
	"errors"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// ExecTTY is Exec on a terminal: the session asks for a pty of size (its
// type from cmd.Env's TERM, else xterm), passes eio.Resize on as window
// changes, and runs cmd.TTYLine. The terminal carries stdout and stderr
// together, to eio.Stdout. When ctx ends, the processes with cmd's tag get
// SIGTERM from a second session, then SIGKILL after grace.
func (c *Conn) ExecTTY(ctx context.Context, cmd shexec.Command, size sdk.TermSize, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	s, release, err := c.Session(ctx)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	defer release()
	defer s.Close()
	term := cmd.Env["TERM"]
	if term == "" {
		term = "xterm"
	}
	rows, cols := int(size.Rows), int(size.Cols)
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	if err := s.RequestPty(term, rows, cols, ssh.TerminalModes{}); err != nil {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "ssh %s: the server gives no terminal: %v", c.target, err)
	}
	s.Stdout, s.Stderr = eio.Stdout, eio.Stdout
	if err := c.start(s, cmd.TTYLine(), eio.Stdin); err != nil {
		return sdk.ExitStatus{}, err
	}
	stopResize := make(chan struct{})
	defer close(stopResize)
	if eio.Resize != nil {
		go func() {
			for {
				select {
				case sz := <-eio.Resize:
					if sz.Rows > 0 && sz.Cols > 0 {
						_ = s.WindowChange(int(sz.Rows), int(sz.Cols))
					}
				case <-stopResize:
					return
				}
			}
		}()
	}
	ended := make(chan error, 1)
	go func() { ended <- s.Wait() }()

	var st sdk.ExitStatus
	var waitErr error
	select {
	case waitErr = <-ended:
	case <-ctx.Done():
		st.Canceled = true
		waitErr = c.stopTagged(cmd.Tag, grace, ended, func() { s.Close() })
	}
	var exit *ssh.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exit):
		st.Code, st.Signal = exit.ExitStatus(), exit.Signal()
		if n, ok := rfc4254Signals[st.Signal]; ok {
			st.Code = 128 + n
		}
	case st.Canceled:
		// Cut after the grace: the command is gone with its session.
		st.Code, st.Signal = 128+9, "KILL"
	default:
		return st, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: the connection dropped while the command ran (%v); the next command connects again", c.target, waitErr)
	}
	return st, nil
}

// stopTagged sends SIGTERM, then SIGKILL after grace, to the processes
// carrying tag, and cuts the session after another grace; it returns how
// the session ended.
func (c *Conn) stopTagged(tag string, grace time.Duration, ended <-chan error, cut func()) error {
	for _, sig := range []string{"TERM", "KILL"} {
		if err := c.sendSignal(sig, 0, tag); err != nil {
			c.warnSignal(sig, err)
		}
		select {
		case err := <-ended:
			return err
		case <-time.After(grace):
		}
	}
	cut()
	return <-ended
}
