package docker

import (
	"context"
	"errors"
	"io"
	"path"
	"strconv"
	"time"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// ttySize sizes the terminal ($1 rows, $2 columns) before it becomes the
// command.
const ttySize = `stty rows "$1" cols "$2" 2>/dev/null
shift 2
exec "$@"`

// execTTY runs req on a terminal: an exec of the engine's own with a TTY,
// sized as req.Size says and resized as eio.Resize does. The terminal
// merges the command's stderr into its output, so it does not go through
// shexec's wrapper (whose control line would show on it): the engine
// changes to the working directory, and a cancel signals the processes
// carrying the exec's tag.
func (p *Provider) execTTY(ctx context.Context, e *engine, target, user string, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	dir := req.Dir
	switch {
	case dir == "":
		dir = image.Workdir
	case !path.IsAbs(dir):
		dir = path.Join(image.Workdir, dir)
	}
	tag := shexec.NewTag()
	env := make([]string, 0, len(req.Env)+1)
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, shexec.Entry(tag))
	size := client.ConsoleSize{Height: uint(req.Size.Rows), Width: uint(req.Size.Cols)}
	opts := client.ExecCreateOptions{
		User:         user,
		Env:          env,
		WorkingDir:   dir,
		TTY:          true,
		AttachStdin:  eio.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          req.Argv,
	}
	if size.Height > 0 && size.Width > 0 {
		opts.ConsoleSize = size
		// The engine sizes the terminal after the command started (the
		// size given at creation is not always applied): the command
		// could read 0x0. So it is sized from inside first, where the
		// image has stty, and by the engine again below.
		opts.Cmd = append([]string{"sh", "-c", ttySize, "amelia-tty", strconv.FormatUint(uint64(size.Height), 10), strconv.FormatUint(uint64(size.Width), 10)}, req.Argv...)
	}
	created, err := e.cli.ExecCreate(ctx, target, opts)
	if err != nil {
		return sdk.ExitStatus{}, sandboxError(e.wrap(err, "start a command on a terminal in container "+target), req.Sandbox.Name)
	}
	att, err := e.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: true, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		return sdk.ExitStatus{}, sandboxError(e.wrap(err, "start a command on a terminal in container "+target), req.Sandbox.Name)
	}
	conn := att.HijackedResponse
	defer conn.Close()
	// The size given at creation does not always reach the terminal
	// before the command reads it: set it again.
	e.resizeExec(created.ID, req.Size)

	stdout := eio.Stdout
	if stdout == nil {
		stdout = io.Discard
	}
	output := make(chan error, 1)
	go func() {
		// A terminal's stream is raw, not multiplexed.
		_, err := io.Copy(stdout, conn.Reader)
		output <- err
	}()
	if eio.Stdin != nil {
		go func() {
			if _, err := io.Copy(conn.Conn, eio.Stdin); err == nil {
				_ = conn.CloseWrite()
			}
		}()
	}
	stopResize := make(chan struct{})
	defer close(stopResize)
	if eio.Resize != nil {
		go func() {
			for {
				select {
				case size := <-eio.Resize:
					e.resizeExec(created.ID, size)
				case <-stopResize:
					return
				}
			}
		}()
	}

	var st sdk.ExitStatus
	var outErr error
	var sent string
	select {
	case outErr = <-output:
	case <-ctx.Done():
		st.Canceled = true
		sent, outErr = p.stopTTY(e, target, user, tag, req.Grace(), output, conn.Close)
	}
	if outErr != nil && !errors.Is(outErr, io.EOF) {
		return st, p.lostExec(e, target, req.Sandbox.Name, outErr)
	}
	code, err := e.exitCode(created.ID)
	if err != nil {
		return st, p.lostExec(e, target, req.Sandbox.Name, err)
	}
	st.Code, st.Signal = code, shexec.Signal(sent, code)
	return st, nil
}

// stopTTY ends a cancelled terminal exec: SIGTERM to the processes with
// its tag, SIGKILL after grace, then its stream is cut; it returns the
// last signal sent and the output's end.
func (p *Provider) stopTTY(e *engine, target, user, tag string, grace time.Duration, output <-chan error, cut func()) (string, error) {
	for _, sig := range []string{"TERM", "KILL"} {
		if err := e.signal(target, user, shexec.KillArgv(sig, 0, shexec.Entry(tag))); err != nil {
			p.opts.Logger.Warn("cancel an exec", "container", target, "signal", sig, "error", err)
		}
		select {
		case err := <-output:
			return sig, err
		case <-time.After(grace):
		}
	}
	cut()
	return "KILL", <-output
}

// resizeExec sets the size of an exec's terminal (nothing for a zero
// size).
func (e *engine) resizeExec(id string, size sdk.TermSize) {
	if size.Rows == 0 || size.Cols == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), internalTimeout)
	defer cancel()
	_, _ = e.cli.ExecResize(ctx, id, client.ExecResizeOptions{Height: uint(size.Rows), Width: uint(size.Cols)})
}
