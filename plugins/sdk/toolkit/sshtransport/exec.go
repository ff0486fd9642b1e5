package sshtransport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// Errors Exec's error matches when the command did not run.
var (
	// ErrNoDir: the working directory does not exist.
	ErrNoDir = errors.New("no such working directory")
	// ErrNoSandbox: the command's required file (the sandbox's marker)
	// does not exist.
	ErrNoSandbox = errors.New("no such sandbox")
)

// killTimeout bounds the session that signals a cancelled command.
const killTimeout = 10 * time.Second

// Exec runs cmd in a session and streams its I/O: the exit status (a
// killing signal by name) once its output has ended. When ctx ends, its
// process group and tagged processes get SIGTERM from a second session,
// then SIGKILL after grace (sdk.ExecRequest semantics). A connection that
// drops while the command runs is ErrUnavailable; the next session
// connects again.
func (c *Conn) Exec(ctx context.Context, cmd shexec.Command, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	s, release, err := c.Session(ctx)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	defer release()
	defer s.Close()
	ctl := shexec.NewControl(eio.Stderr, cmd.Tag)
	s.Stdout, s.Stderr = eio.Stdout, ctl
	if err := c.start(s, cmd.Line(), eio.Stdin); err != nil {
		return sdk.ExitStatus{}, err
	}
	ended := make(chan error, 1)
	go func() {
		err := s.Wait()
		ctl.Finish()
		ended <- err
	}()

	st, _, waitErr := c.await(ctx, ctl, ended, cmd.Tag, grace, func() { s.Close() })
	if err := notRun(ctl); err != nil {
		return st, err
	}
	var exit *ssh.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exit):
		st.Code, st.Signal = exit.ExitStatus(), exit.Signal()
		if n, ok := rfc4254Signals[st.Signal]; ok {
			st.Code = 128 + n
		}
	default:
		return st, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: the connection dropped while the command ran (%v); the next command connects again", c.target, waitErr)
	}
	return st, nil
}

// await waits for the end of an exec's output (ended), and stops the
// exec when ctx ends first (shexec.Stopper, cut its Cut). It returns the
// status so far (Canceled), the last signal that reached the command, and
// how the output ended.
func (c *Conn) await(ctx context.Context, ctl *shexec.Control, ended <-chan error, tag string, grace time.Duration, cut func()) (st sdk.ExitStatus, delivered string, waitErr error) {
	select {
	case waitErr = <-ended:
	case <-ctx.Done():
		st.Canceled = true
		_, waitErr = shexec.Stopper{
			Control: ctl,
			Ended:   ended,
			Signal: func(sig string, pgid int) error {
				err := c.sendSignal(sig, pgid, tag)
				if err == nil {
					delivered = sig
				}
				return err
			},
			Cut: cut,
		}.Stop(grace, c.warnSignal)
	}
	return st, delivered, waitErr
}

// notRun is why an exec's command did not run, from its control line.
func notRun(ctl *shexec.Control) error {
	switch {
	case ctl.NoSandbox():
		return ErrNoSandbox
	case ctl.NoDir():
		return ErrNoDir
	}
	return nil
}

// sendSignal sends sig to a cancelled command's process group (pgid, 0 for
// none) and tagged processes, from a session of its own.
func (c *Conn) sendSignal(sig string, pgid int, tag string) error {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_, err := c.Output(ctx, shexec.KillLine(sig, pgid, shexec.Entry(tag)), nil)
	return err
}

// warnSignal logs a signal a cancel could not send.
func (c *Conn) warnSignal(sig string, err error) {
	c.opts.Logger.Warn("cancel a command", "target", c.target.String(), "signal", sig, "error", err)
}

// rfc4254Signals are the signals an SSH exit-signal message names (RFC
// 4254, 6.10), numbered as Linux numbers them. x/crypto/ssh's ExitStatus
// for a signal it does not number (USR1, USR2) is 128, not 128+N.
var rfc4254Signals = map[string]int{
	"ABRT": 6, "ALRM": 14, "FPE": 8, "HUP": 1, "ILL": 4, "INT": 2, "KILL": 9,
	"PIPE": 13, "QUIT": 3, "SEGV": 11, "TERM": 15, "USR1": 10, "USR2": 12,
}

// start starts line on s, with stdin (nil: none) copied into it.
func (c *Conn) start(s *ssh.Session, line string, stdin io.Reader) error {
	var in io.WriteCloser
	if stdin != nil {
		// Copied here, not by the session: its Wait would wait for stdin
		// too, which may never end when the command does not read it.
		var err error
		if in, err = s.StdinPipe(); err != nil {
			return fmt.Errorf("ssh %s: %w", c.target, err)
		}
	}
	if err := s.Start(line); err != nil {
		return sdk.Errorf(sdk.ErrUnavailable, "ssh %s: start the command: %v", c.target, err)
	}
	if in != nil {
		go func() {
			if _, err := io.Copy(in, stdin); err == nil {
				in.Close()
			}
		}()
	}
	return nil
}
