package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// execWrapper runs every exec's command through sh: it changes to the
// working directory ($1), tells the provider its pid with a control line on
// stderr, and becomes the command. The runtime starts an exec's process as
// the leader of its own session and process group, so that pid names the
// group to kill on cancel. The control line is the first thing on stderr,
// written before the command runs, so the command cannot forge it.
const execWrapper = `if [ -n "$1" ]; then cd -- "$1" 2>/dev/null || { echo amelia-exec:nodir >&2; exit 125; }; fi
echo "amelia-exec:pid=$$" >&2
shift
exec "$@"`

// killScript sends signal $1 to the process group $2 (when not 0) and to
// every process whose environment carries the tag $3: descendants that left
// the group (setsid) still carry it. It runs as the exec's own user, which
// may signal its own processes without any capability.
const killScript = `sig=$1 pgid=$2 tag=$3
[ "$pgid" -gt 0 ] && kill -s "$sig" -- "-$pgid" 2>/dev/null
for e in /proc/[0-9]*/environ; do
	if grep -qxzF -- "$tag" "$e" 2>/dev/null; then
		p=${e#/proc/}
		kill -s "$sig" -- "${p%/environ}" 2>/dev/null
	fi
done
exit 0`

// execTagEnv is set in every exec's environment, last so it cannot be
// overridden: it finds the exec's processes wherever they went.
const execTagEnv = "AMELIA_EXEC_ID"

// pidWait bounds how long a cancel waits for the exec to report its pid.
const pidWait = 2 * time.Second

// internalTimeout bounds the provider's own short commands (readiness,
// health, kill).
const internalTimeout = 10 * time.Second

func (p *Provider) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.TTY {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the docker provider does not allocate terminals")
	}
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
	tag := newExecTag()
	env := make([]string, 0, len(req.Env)+1)
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, execTagEnv+"="+tag)
	target := containerRef(req.Sandbox)
	x, err := e.startExec(ctx, target, client.ExecCreateOptions{
		User:         user,
		Env:          env,
		WorkingDir:   image.Workdir,
		AttachStdin:  eio.Stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
		Cmd:          append([]string{"sh", "-c", execWrapper, "amelia-exec", dir}, req.Argv...),
	})
	if err != nil {
		return sdk.ExitStatus{}, sandboxError(err, req.Sandbox.Name)
	}
	defer x.conn.Close()

	stdout := eio.Stdout
	if stdout == nil {
		stdout = io.Discard
	}
	ctl := &controlFilter{w: eio.Stderr, known: make(chan struct{})}
	output := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, ctl, x.conn.Reader)
		ctl.finish()
		output <- err
	}()
	if eio.Stdin != nil {
		go func() {
			// Ends when stdin does, or when the connection closes.
			if _, err := io.Copy(x.conn.Conn, eio.Stdin); err == nil {
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
		sent, outErr = p.stop(e, target, user, tag, x, ctl, output, req.Grace())
	}
	if outErr != nil && !errors.Is(outErr, io.EOF) {
		return st, p.lostExec(e, target, req.Sandbox.Name, outErr)
	}
	if ctl.nodir {
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
	st.Code = code
	if sent != "" && code == 128+signalNumber[sent] {
		st.Signal = sent
	}
	return st, nil
}

// signalNumber maps the signals a cancel sends to their numbers.
var signalNumber = map[string]int{"TERM": 15, "KILL": 9}

// stop ends a cancelled exec: SIGTERM to its process group and
// tagged processes, SIGKILL once the grace period is over, then the rest of
// its output. It returns the last signal sent and the output's error.
func (p *Provider) stop(e *engine, target, user, tag string, x execStream, ctl *controlFilter, output <-chan error, grace time.Duration) (string, error) {
	pid := 0 // unknown: the tag alone finds its processes
	select {
	case <-ctl.known:
		pid = ctl.pid
	case err := <-output:
		return "", err // it ended on its own meanwhile
	case <-time.After(pidWait):
	}
	signal := func(sig string) {
		if err := e.signal(target, user, pid, tag, sig); err != nil {
			p.opts.Logger.Warn("cancel an exec", "container", target, "signal", sig, "error", err)
		}
	}
	signal("TERM")
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-output:
		return "TERM", err
	case <-t.C:
	}
	signal("KILL")
	t.Reset(internalTimeout)
	select {
	case err := <-output:
		return "KILL", err
	case <-t.C:
		// Killed, yet the stream stays open: cut it, and say so.
		x.conn.Close()
		<-output
		return "KILL", fmt.Errorf("the command's output did not end %v after SIGKILL", internalTimeout)
	}
}

// signal runs killScript in the container.
func (e *engine) signal(target, user string, pgid int, tag, sig string) error {
	ctx, cancel := context.WithTimeout(context.Background(), internalTimeout)
	defer cancel()
	_, _, err := e.run(ctx, target, user, []string{"sh", "-c", killScript, "amelia-kill", sig, strconv.Itoa(pgid), execTagEnv + "=" + tag})
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
	x, err := e.startExec(ctx, target, client.ExecCreateOptions{User: user, AttachStdout: true, AttachStderr: true, Cmd: argv})
	if err != nil {
		return 0, "", err
	}
	defer x.conn.Close()
	out := &firstBytes{n: 64 << 10}
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
		return 0, "", fmt.Errorf("%s: %w", strings.Join(argv, " "), ctx.Err())
	}
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	code, err := e.exitCode(x.id)
	return code, strings.TrimSpace(out.b.String()), err
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

func newExecTag() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// controlFilter passes an exec's stderr on, less the wrapper's control
// line at its start, which it reads: the exec's pid, or that the working
// directory is missing. Output before the wrapper ran (the engine's own
// errors) has no control line and passes unchanged.
type controlFilter struct {
	w     io.Writer // nil discards
	head  []byte
	done  bool
	known chan struct{} // closed once the head is read (or the stream ended)
	pid   int
	nodir bool
}

// maxControlLine is longer than any control line; a first line longer
// than this is not one.
const maxControlLine = 64

func (f *controlFilter) Write(p []byte) (int, error) {
	n := len(p)
	if !f.done {
		f.head = append(f.head, p...)
		i := bytes.IndexByte(f.head, '\n')
		if i < 0 && len(f.head) < maxControlLine {
			return n, nil
		}
		p, f.head = f.head, nil
		if i >= 0 && f.parse(string(p[:i])) {
			p = p[i+1:]
		}
		f.done = true
		close(f.known)
	}
	if f.w != nil && len(p) > 0 {
		if _, err := f.w.Write(p); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// parse reads a control line, reporting whether line was one.
func (f *controlFilter) parse(line string) bool {
	if line == "amelia-exec:nodir" {
		f.nodir = true
		return true
	}
	if v, ok := strings.CutPrefix(line, "amelia-exec:pid="); ok {
		pid, err := strconv.Atoi(v)
		f.pid = pid
		return err == nil
	}
	return false
}

// finish passes on a head the stream ended in.
func (f *controlFilter) finish() {
	if f.done {
		return
	}
	f.done = true
	close(f.known)
	if f.w != nil && len(f.head) > 0 {
		_, _ = f.w.Write(f.head)
	}
}
