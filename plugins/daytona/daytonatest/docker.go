package daytonatest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// labelKey labels every container of a fake, with the fake's id as value.
const labelKey = "amelia.daytonatest"

// killTimeout bounds the fake's own short commands and engine calls when
// it kills or cleans up.
const killTimeout = 15 * time.Second

// dockerBackend runs each sandbox as a container named by the sandbox's
// id, as Daytona's runner names it, of the sandbox's image with tini as
// init, and its commands as docker execs, or as children of the
// container's daemon (see containerDaemon).
type dockerBackend struct {
	cli    *client.Client
	label  string      // the fake's id
	mu     *sync.Mutex // the fake's lock, which guards sandbox.container and daemons
	logger *slog.Logger
	cmd    []string // the container's main process, under tini
	daemon bool     // start a daemon whenever a container starts

	daemons map[string]*containerDaemon // by sandbox id
	wg      sync.WaitGroup              // the daemons' readers
}

// containerName is the name of a sandbox's container: its id, which is
// what Daytona's runner (and its SSH hop) inspect the container by.
func containerName(id string) string { return id }

func (d *dockerBackend) imageExists(ctx context.Context, ref string) (bool, error) {
	_, err := d.cli.ImageInspect(ctx, ref)
	switch {
	case cerrdefs.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("inspect image %s: %w", ref, err)
	}
	return true, nil
}

func (d *dockerBackend) prepare(s *sandbox) error {
	s.home = homeOf(s.user)
	return nil
}

// target is how the engine knows a sandbox's container: its id once
// created, else its name.
func (d *dockerBackend) target(s *sandbox) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.container != "" {
		return s.container
	}
	return containerName(s.id)
}

func (d *dockerBackend) create(ctx context.Context, s *sandbox) error {
	// As Daytona's runner sets them (its daemon needs the id), then the
	// sandbox's own.
	env := []string{"DAYTONA_SANDBOX_ID=" + s.id, "DAYTONA_SANDBOX_SNAPSHOT=" + s.snapshot, "DAYTONA_SANDBOX_USER=" + s.user}
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	host := &container.HostConfig{}
	if s.networkBlockAll {
		host.NetworkMode = "none"
	}
	// Not cut short by the fake's closing: an engine finishes a create
	// whose client went away, and the container would outlive the sweep.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	res, err := d.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: containerName(s.id),
		Config: &container.Config{
			Image:      s.image,
			Entrypoint: []string{"tini", "--"},
			Cmd:        d.cmd,
			Env:        env,
			Labels:     map[string]string{labelKey: d.label, labelKey + ".sandbox": s.id},
		},
		HostConfig: host,
	})
	if err != nil {
		return fmt.Errorf("create the container of sandbox %s from %s: %w", s.id, s.image, err)
	}
	d.mu.Lock()
	s.container = res.ID
	d.mu.Unlock()
	return nil
}

func (d *dockerBackend) start(ctx context.Context, s *sandbox) error {
	target := d.target(s)
	if _, err := d.cli.ContainerStart(ctx, target, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("start the container of sandbox %s: %w", s.id, err)
	}
	if s.user != "root" {
		script := fmt.Sprintf("id -u %[1]s >/dev/null 2>&1 || useradd -m -u 1000 -s /bin/bash %[1]s", s.user)
		code, out, err := d.runAs(ctx, target, "root", []string{"sh", "-c", script})
		if err != nil {
			return fmt.Errorf("add user %s to sandbox %s: %w", s.user, s.id, err)
		}
		if code != 0 {
			return fmt.Errorf("add user %s to sandbox %s: exit code %d: %s", s.user, s.id, code, out)
		}
	}
	if d.daemon {
		return d.startDaemon(ctx, s, target)
	}
	return nil
}

// dropDaemon forgets a sandbox's daemon, which its container's stop or
// removal ends.
func (d *dockerBackend) dropDaemon(s *sandbox) {
	d.mu.Lock()
	cd := d.daemons[s.id]
	delete(d.daemons, s.id)
	d.mu.Unlock()
	if cd != nil {
		cd.conn.Close()
	}
}

func (d *dockerBackend) stop(ctx context.Context, s *sandbox) error {
	timeout := 2
	if _, err := d.cli.ContainerStop(ctx, d.target(s), client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		return fmt.Errorf("stop the container of sandbox %s: %w", s.id, err)
	}
	d.dropDaemon(s)
	return nil
}

func (d *dockerBackend) remove(ctx context.Context, s *sandbox) error {
	_, err := d.cli.ContainerRemove(ctx, d.target(s), client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove the container of sandbox %s: %w", s.id, err)
	}
	d.dropDaemon(s)
	return nil
}

func (d *dockerBackend) close(ctx context.Context) error {
	list, err := d.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", labelKey+"="+d.label)})
	if err != nil {
		return fmt.Errorf("list the fake's containers: %w", err)
	}
	var errs []error
	for _, c := range list.Items {
		_, err := d.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID, err))
		}
	}
	d.mu.Lock()
	daemons := d.daemons
	d.daemons = map[string]*containerDaemon{}
	d.mu.Unlock()
	for _, cd := range daemons {
		cd.conn.Close()
	}
	d.wg.Wait()
	if err := d.removeImages(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// execTagEnv marks the processes of a command that is killed when its
// context ends (toolbox execs that time out): every process that inherits
// the variable is killed.
const execTagEnv = "DAYTONATEST_EXEC"

func (d *dockerBackend) run(ctx context.Context, s *sandbox, req execRequest) (exitStatus, error) {
	switch {
	case req.pty != nil:
		return d.runPty(ctx, s, req)
	case req.daemonChild:
		return d.runChild(ctx, s, req)
	}
	target := d.target(s)
	dir := req.dir
	if dir == "" {
		dir = s.home
	}
	env := append(baseEnv(s.user, s.home), req.env...)
	var tag string
	if req.killable {
		tag = randomHex(8)
		env = append(env, execTagEnv+"="+tag)
	}
	argv := []string{"sh", "-c", req.cmd}
	if req.stdout != nil && req.stdout == req.stderr {
		// One stream, in the order written, as the toolbox's output is:
		// the shell replaces itself with one whose stderr is its stdout.
		argv = []string{"sh", "-c", `exec sh -c "$0" 2>&1`, req.cmd}
	}
	id, att, err := d.attach(ctx, target, client.ExecCreateOptions{
		User:         s.user,
		Cmd:          argv,
		WorkingDir:   dir,
		Env:          env,
		AttachStdin:  req.stdin != nil,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return exitStatus{}, fmt.Errorf("run a command in sandbox %s: %w", s.id, err)
	}
	conn := att.HijackedResponse
	defer conn.Close()
	if req.started != nil {
		req.started()
	}
	if req.stdin != nil {
		go func() {
			// Ends when req.stdin does, or when the connection closes.
			if _, err := io.Copy(conn.Conn, req.stdin); err == nil {
				_ = conn.CloseWrite()
			}
		}()
	}
	stdout, stderr := req.stdout, req.stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	output := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(stdout, stderr, conn.Reader)
		output <- err
	}()
	select {
	case err = <-output:
	case <-ctx.Done():
		if !req.killable {
			conn.Close()
			<-output
			return exitStatus{}, fmt.Errorf("run a command in sandbox %s: %w", s.id, ctx.Err())
		}
		d.killTagged(target, s.user, tag)
		t := time.NewTimer(killTimeout)
		select {
		case err = <-output:
		case <-t.C:
			conn.Close()
			err = <-output
		}
		t.Stop()
	}
	if err != nil {
		// A failed write (the client went away): the command's output has
		// nowhere to go, so is its stream.
		return exitStatus{}, fmt.Errorf("copy the output of a command in sandbox %s: %w", s.id, err)
	}
	code, err := d.exitCode(id)
	if err != nil {
		return exitStatus{}, fmt.Errorf("read the exit code of a command in sandbox %s: %w", s.id, err)
	}
	return exitStatus{code: code}, nil
}

// killTagged kills every process of the container whose environment
// holds the tag. It runs as the command's user: root without
// CAP_SYS_PTRACE (Docker's default) cannot read other users'
// /proc/PID/environ.
func (d *dockerBackend) killTagged(target, user, tag string) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	script := `for e in /proc/[0-9]*/environ; do
  if grep -qxz "$1" "$e" 2>/dev/null; then p=${e#/proc/}; kill -KILL "${p%/environ}" 2>/dev/null; fi
done; true`
	if _, out, err := d.runAs(ctx, target, user, []string{"sh", "-c", script, "sh", execTagEnv + "=" + tag}); err != nil {
		d.logger.Warn("daytonatest: kill a command", "container", target, "error", err, "output", out)
	}
}

// exitCode reads a finished exec's exit code. The engine records it as
// the exec's streams close; the short wait covers engines that record it
// a moment later.
func (d *dockerBackend) exitCode(id string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		res, err := d.cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		if err != nil {
			return 0, err
		}
		if !res.Running {
			return res.ExitCode, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, fmt.Errorf("the output ended but the engine still reports the command running after %v", killTimeout)
		case <-t.C:
		}
	}
}

// runAs runs a short command of the fake's own and returns its exit code
// and combined output (the first 64 KiB).
func (d *dockerBackend) runAs(ctx context.Context, target, user string, argv []string) (int, string, error) {
	id, att, err := d.attach(ctx, target, client.ExecCreateOptions{User: user, Cmd: argv, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, "", err
	}
	defer att.HijackedResponse.Close()
	var out limited
	out.n = 64 << 10
	done := make(chan error, 1)
	go func() {
		_, err := stdcopy.StdCopy(&out, &out, att.HijackedResponse.Reader)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		att.HijackedResponse.Close()
		<-done
		return 0, "", ctx.Err()
	}
	if err != nil {
		return 0, "", err
	}
	code, err := d.exitCode(id)
	return code, strings.TrimSpace(out.b.String()), err
}

// limited keeps the first n bytes written to it.
type limited struct {
	b bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	l.b.Write(p[:min(len(p), l.n-l.b.Len())])
	return len(p), nil
}

// runChild runs a command as a child of the container's daemon, through
// a bridge (see containerDaemon).
func (d *dockerBackend) runChild(ctx context.Context, s *sandbox, req execRequest) (exitStatus, error) {
	d.mu.Lock()
	cd := d.daemons[s.id]
	d.mu.Unlock()
	if cd == nil {
		return exitStatus{}, fmt.Errorf("sandbox %s has no daemon to run the command", s.id)
	}
	dir := req.dir
	if dir == "" {
		dir = s.home
	}
	mode := "c"
	if req.noCommand {
		mode = "s"
	}
	nonce := randomHex(8)
	status := cd.expect(nonce)
	defer cd.forget(nonce)
	id, att, err := d.attach(ctx, d.target(s), client.ExecCreateOptions{
		User:         s.user,
		Cmd:          []string{"perl", "-e", bridgeScript, daemonSocket, nonce, mode, req.cmd},
		WorkingDir:   dir,
		Env:          append(baseEnv(s.user, s.home), req.env...),
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return exitStatus{}, fmt.Errorf("run a command in sandbox %s: %w", s.id, err)
	}
	conn := att.HijackedResponse
	defer conn.Close()
	if req.started != nil {
		req.started()
	}
	copyStdin(conn, req.stdin)
	if req.signals != nil {
		defer forward(req.signals, func(name string) { cd.signal(nonce, sshSignal(name)) })()
	}
	stdout, stderr := orDiscard(req.stdout), orDiscard(req.stderr)
	if err := copyOutput(ctx, conn.Close, func() error {
		_, err := stdcopy.StdCopy(stdout, stderr, conn.Reader)
		return err
	}); err != nil {
		return exitStatus{}, fmt.Errorf("the output of a command in sandbox %s: %w", s.id, err)
	}
	// The daemon reports how the command ended just before it lets the
	// bridge go, so the report is here or on its way, unless the bridge
	// never reached the daemon.
	select {
	case st := <-status:
		return st, nil
	default:
	}
	code, err := d.exitCode(id)
	if err != nil {
		return exitStatus{}, fmt.Errorf("read how a command in sandbox %s ended: %w", s.id, err)
	}
	if code != 0 {
		return exitStatus{}, fmt.Errorf("the daemon of sandbox %s did not run the command (its bridge exited %d)", s.id, code)
	}
	t := time.NewTimer(killTimeout)
	defer t.Stop()
	select {
	case st := <-status:
		return st, nil
	case <-cd.gone:
		return exitStatus{}, fmt.Errorf("the daemon of sandbox %s ended before it said how the command did", s.id)
	case <-t.C:
		return exitStatus{}, fmt.Errorf("the daemon of sandbox %s did not say how the command ended within %v", s.id, killTimeout)
	}
}

// runPty runs a login shell on a new pseudo-terminal: a docker exec with
// a TTY, which leads its own session, as a pty shell does on Daytona.
func (d *dockerBackend) runPty(ctx context.Context, s *sandbox, req execRequest) (exitStatus, error) {
	size := client.ConsoleSize{Height: uint(req.pty.rows), Width: uint(req.pty.cols)}
	id, att, err := d.attach(ctx, d.target(s), client.ExecCreateOptions{
		User:         s.user,
		Cmd:          []string{"/bin/sh", "-c", pickShell},
		WorkingDir:   s.home,
		Env:          append(baseEnv(s.user, s.home), append([]string{"TERM=" + req.pty.term}, req.env...)...),
		TTY:          true,
		ConsoleSize:  size,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return exitStatus{}, fmt.Errorf("run a shell in sandbox %s: %w", s.id, err)
	}
	conn := att.HijackedResponse
	defer conn.Close()
	// ConsoleSize alone left the terminal 0x0 here: size it explicitly,
	// before the shell reads its first line.
	d.resizeExec(ctx, id, req.pty.cols, req.pty.rows)
	if req.started != nil {
		req.started()
	}
	copyStdin(conn, req.stdin)
	defer forward(req.pty.resize, func(sz windowSize) { d.resizeExec(ctx, id, sz.cols, sz.rows) })()
	if err := copyOutput(ctx, conn.Close, func() error {
		// A TTY's stream is raw, not multiplexed.
		_, err := io.Copy(orDiscard(req.stdout), conn.Reader)
		return err
	}); err != nil {
		return exitStatus{}, fmt.Errorf("the output of a shell in sandbox %s: %w", s.id, err)
	}
	code, err := d.exitCode(id)
	if err != nil {
		return exitStatus{}, fmt.Errorf("read how a shell in sandbox %s ended: %w", s.id, err)
	}
	return exitStatus{code: code}, nil
}

// forward hands what arrives on ch to fn until the returned stop is
// called.
func forward[T any](ch <-chan T, fn func(T)) (stop func()) {
	done := make(chan struct{})
	go func() {
		for {
			select {
			case v := <-ch:
				fn(v)
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// copyOutput runs copy (which reads a connection) to its end; when ctx
// ends first, closeConn stops copy and ctx's error is returned.
func copyOutput(ctx context.Context, closeConn func(), copy func() error) error {
	output := make(chan error, 1)
	go func() { output <- copy() }()
	select {
	case err := <-output:
		return err
	case <-ctx.Done():
		closeConn()
		<-output
		return ctx.Err()
	}
}

// resizeExec sets the size of an exec's terminal (nothing for a zero
// size).
func (d *dockerBackend) resizeExec(ctx context.Context, id string, cols, rows uint32) {
	if cols == 0 || rows == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	if _, err := d.cli.ExecResize(ctx, id, client.ExecResizeOptions{Height: uint(rows), Width: uint(cols)}); err != nil {
		d.logger.Debug("daytonatest: resize a terminal", "exec", id, "error", err)
	}
}

// dial connects to host:port from inside the sandbox's container, through
// a relay started there.
func (d *dockerBackend) dial(ctx context.Context, s *sandbox, host string, port uint32) (io.ReadWriteCloser, error) {
	_, att, err := d.attach(ctx, d.target(s), client.ExecCreateOptions{
		User:         s.user,
		Cmd:          []string{"perl", "-e", relayScript, host, strconv.FormatUint(uint64(port), 10)},
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("forward to %s:%d in sandbox %s: %w", host, port, s.id, err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, att.HijackedResponse.Reader)
		pw.CloseWithError(err)
	}()
	return &relayConn{conn: att.HijackedResponse, r: pr}, nil
}

// relayConn is a relay's streams: its stdout, demultiplexed, to read; its
// stdin to write.
type relayConn struct {
	conn client.HijackedResponse
	r    *io.PipeReader
}

func (c *relayConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *relayConn) Write(p []byte) (int, error) { return c.conn.Conn.Write(p) }
func (c *relayConn) Close() error {
	c.conn.Close()
	return c.r.Close()
}

// copyStdin copies stdin, when not nil, to an exec's stdin, which it
// closes when stdin ends.
func copyStdin(conn client.HijackedResponse, stdin io.Reader) {
	if stdin == nil {
		return
	}
	go func() {
		// Ends when stdin does, or when the connection closes.
		if _, err := io.Copy(conn.Conn, stdin); err == nil {
			_ = conn.CloseWrite()
		}
	}()
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// attach creates an exec in target and attaches to its streams (as a
// terminal when opts asks for one); the caller closes them.
func (d *dockerBackend) attach(ctx context.Context, target string, opts client.ExecCreateOptions) (string, client.ExecAttachResult, error) {
	created, err := d.cli.ExecCreate(ctx, target, opts)
	if err != nil {
		return "", client.ExecAttachResult{}, err
	}
	att, err := d.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{TTY: opts.TTY, ConsoleSize: opts.ConsoleSize})
	if err != nil {
		return "", client.ExecAttachResult{}, err
	}
	return created.ID, att, nil
}
