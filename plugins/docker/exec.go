package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// stdinBuffer is the most one read of an exec's stdin takes on its way to
// the engine.
const stdinBuffer = 256 << 10

// writerOnly hides a writer's ReadFrom, which would ignore the buffer
// io.CopyBuffer is given.
type writerOnly struct{ io.Writer }

// internalTimeout bounds the provider's own short commands (readiness,
// health, kill).
const internalTimeout = 10 * time.Second

func (p *Provider) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	set, err := decodeSettings(req.Sandbox.Config)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	e, err := p.engine(ctx, set)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	user, err := execUser(set, req.User)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	dir := req.Dir
	if dir != "" && !path.IsAbs(dir) {
		dir = path.Join(image.Workdir, dir)
	}
	target := containerRef(req.Sandbox)
	if req.TTY {
		return p.execTTY(ctx, e, target, user, req, eio)
	}
	// A command that reads input (a bundle) streams it faster on an exec
	// of its own than in the session's frames, unless its input is a
	// conversation (another session's frames) rather than a stream; so
	// does one that says its output is bulk.
	if user == set.User && onSession(req.Traffic, eio.Stdin != nil) {
		if st, ok, err := p.execOnSession(ctx, e, target, user, dir, req, eio); ok {
			return st, err
		}
	}
	tag := shexec.NewTag()
	env := make([]string, 0, len(req.Env)+1)
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, shexec.Entry(tag))
	x, err := e.startExec(ctx, target, client.ExecCreateOptions{
		User:         user,
		Env:          env,
		WorkingDir:   image.Workdir,
		AttachStdin:  eio.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          shexec.Argv(tag, dir, req.Argv),
	})
	if err != nil {
		return sdk.ExitStatus{}, sandboxError(err, req.Sandbox.Name)
	}
	defer x.conn.Close()

	stdout := eio.Stdout
	if stdout == nil {
		stdout = io.Discard
	}
	ctl := shexec.NewControl(eio.Stderr, tag)
	output := make(chan error, 1)
	go func() {
		_, err := demuxOutput(stdout, ctl, x.conn.Reader)
		ctl.Finish()
		output <- err
	}()
	if eio.Stdin != nil {
		go func() {
			// Ends when stdin does, or when the connection closes. In
			// pieces of stdinBuffer: io.Copy's 32 KiB is eight times the
			// reads and writes.
			if _, err := io.CopyBuffer(writerOnly{x.conn.Conn}, eio.Stdin, make([]byte, stdinBuffer)); err == nil {
				_ = x.conn.CloseWrite()
			}
		}()
	}

	// req.Timeout ends ctx too: the SDK's server sees to it.
	var st sdk.ExitStatus
	var outErr error
	var sent string
	select {
	case outErr = <-output:
	case <-ctx.Done():
		st.Canceled = true
		sent, outErr = shexec.Stopper{
			Control: ctl,
			Ended:   output,
			Signal: func(sig string, pgid int) error {
				return e.signal(target, user, shexec.KillArgv(sig, pgid, shexec.Entry(tag)))
			},
			Cut: x.conn.Close,
		}.Stop(req.Grace(), func(sig string, err error) {
			p.opts.Logger.Warn("cancel an exec", "container", target, "signal", sig, "error", err)
		})
	}
	if outErr != nil && !errors.Is(outErr, io.EOF) {
		return st, p.lostExec(e, target, req.Sandbox.Name, outErr)
	}
	if ctl.NoDir() {
		return st, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", dir)
	}
	code, err := e.exitCode(x.id)
	if err != nil {
		return st, p.lostExec(e, target, req.Sandbox.Name, err)
	}
	if code > 128 && sent == "" {
		// Killed, and not by us: perhaps with its container.
		if err := p.checkAlive(e, target, req.Sandbox.Name, code == 128+9); err != nil {
			return st, err
		}
	}
	st.Code, st.Signal = code, shexec.Signal(sent, code)
	return st, nil
}

// signal runs a kill command (shexec.KillArgv) in the container.
func (e *engine) signal(target, user string, argv []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), internalTimeout)
	defer cancel()
	_, _, err := e.run(ctx, target, user, argv)
	return err
}

// execStream is a started exec and its attached stream.
type execStream struct {
	id   string
	conn client.HijackedResponse
}

// startExec creates and starts an exec attached to its streams. The stream
// belongs to the caller from here on: cancelling ctx no longer closes it.
func (e *engine) startExec(ctx context.Context, target string, opts client.ExecCreateOptions) (execStream, error) {
	created, err := e.cli.ExecCreate(ctx, target, opts)
	if err != nil {
		return execStream{}, e.wrap(err, "start a command in container "+target)
	}
	att, err := e.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return execStream{}, e.wrap(err, "start a command in container "+target)
	}
	return execStream{id: created.ID, conn: att.HijackedResponse}, nil
}

// exitCode reads a finished exec's exit code. The engine records it before
// it closes the exec's streams; the short wait covers engines that do not.
func (e *engine) exitCode(id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), internalTimeout)
	defer cancel()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		res, err := e.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		if err != nil {
			return 0, e.wrap(err, "read the exit code")
		}
		if !res.Running {
			return res.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the command's output ended but the engine still reports it running after %v", internalTimeout)
		case <-time.After(wait):
		}
	}
}

// run runs a short command of the provider's own and returns its exit
// code and combined output.
func (e *engine) run(ctx context.Context, target, user string, argv []string) (int, string, error) {
	out := &firstBytes{n: 64 << 10}
	code, err := e.runTo(ctx, target, user, argv, out)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return code, strings.TrimSpace(out.b.String()), nil
}

// runTo runs a command of the provider's own, its stdout and stderr both
// written to out, and returns its exit code; ctx's end stops reading it.
func (e *engine) runTo(ctx context.Context, target, user string, argv []string, out io.Writer) (int, error) {
	x, err := e.startExec(ctx, target, client.ExecCreateOptions{User: user, AttachStdout: true, AttachStderr: true, Cmd: argv})
	if err != nil {
		return 0, err
	}
	defer x.conn.Close()
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(out, out, x.conn.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		x.conn.Close()
		<-done
		return 0, ctx.Err()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	return e.exitCode(x.id)
}

// firstBytes keeps the first n bytes written to it and drops the rest: a
// sandbox cannot make the provider hold more.
type firstBytes struct {
	b bytes.Buffer
	n int
}

func (f *firstBytes) Write(p []byte) (int, error) {
	f.b.Write(p[:min(len(p), f.n-f.b.Len())])
	return len(p), nil
}

// lostExec explains an exec whose stream or status went away: the
// container was removed or stopped under it, or the engine went away.
func (p *Provider) lostExec(e *engine, target, name string, cause error) error {
	if err := p.checkAlive(e, target, name, true); err != nil {
		return err
	}
	return fmt.Errorf("sandbox %s: the command's stream broke: %w", name, cause)
}

// killSettle bounds the wait for a container that may be going away under
// a command killed by SIGKILL: the engine kills a container's processes
// before it records the container as stopped.
const killSettle = 3 * time.Second

// checkAlive says whether the sandbox's container was removed or stopped
// while a command ran in it. settle is for a command that died of SIGKILL
// (how `docker rm -f` and `docker stop` end the commands in a container) or
// lost its stream: the container is then given a moment to show it stopped.
func (p *Provider) checkAlive(e *engine, target, name string, settle bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), internalTimeout)
	defer cancel()
	if settle {
		wctx, wcancel := context.WithTimeout(ctx, killSettle)
		w := e.cli.ContainerWait(wctx, target, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		select {
		case <-w.Result:
		case <-w.Error: // gone, or still running when the wait ended
		}
		wcancel()
	}
	res, err := e.cli.ContainerInspect(ctx, target, client.ContainerInspectOptions{})
	switch {
	case cerrdefs.IsNotFound(err), err == nil && res.Container.State != nil && res.Container.State.Status == container.StateRemoving:
		return sdk.Errorf(sdk.ErrNotFound, "sandbox %s: its container %s was removed while the command ran (by `docker rm`, or `amelia stop` elsewhere)", name, containerName(name))
	case err == nil && res.Container.State != nil && !res.Container.State.Running:
		return sdk.Errorf(sdk.ErrUnavailable, "sandbox %s: its container %s stopped while the command ran (%s)", name, containerName(name), res.Container.State.Status)
	}
	return nil
}

// sandboxError rephrases the engine's answer to an exec in a sandbox that
// is not there or not running.
func sandboxError(err error, name string) error {
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		return sdk.Errorf(sdk.ErrNotFound, "sandbox %s does not exist (no container %s): start it with `amelia sandbox up`", name, containerName(name))
	case errors.Is(err, sdk.ErrConflict) && strings.Contains(err.Error(), "not running"):
		return sdk.Errorf(sdk.ErrUnavailable, "sandbox %s is stopped (container %s): start it with `amelia sandbox up`", name, containerName(name))
	case errors.Is(err, sdk.ErrConflict) && strings.Contains(err.Error(), "paused"):
		return sdk.Errorf(sdk.ErrUnavailable, "sandbox %s is paused (container %s): `docker unpause %s`, or `amelia sandbox up`", name, containerName(name), containerName(name))
	}
	return err
}

// execUser is who runs an exec: the profile's user unless the request
// names one (root, for setup).
func execUser(set Settings, user string) (string, error) {
	if user == "" {
		return set.User, nil
	}
	if !userRule.MatchString(user) {
		return "", sdk.Errorf(sdk.ErrInvalid, "exec user %q is not a user name or uid[:gid]", user)
	}
	return user, nil
}
