package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// Every command in a sandbox runs inside amelia-worker's exec envelope
// (package envelope), over one pods/exec stream that the worker's mux
// serves (a stream per command would cost a round trip through the API
// server and the kubelet, and a TLS handshake, each). pods/exec alone is
// not enough: the kubelet does not stop a command whose client went away
// (kubernetes/kubernetes#89031), so a cancel would leave it running, and
// a stream that ends says nothing of how the command did. Until the
// worker is in the pod, short shell scripts set it up (script), whose
// exit status the exec's status frame carries.

// box is a running sandbox pod this process works in.
type box struct {
	c         *cluster
	name      string // the sandbox's
	ns, pod   string
	container string
	uid       types.UID

	setupMu sync.Mutex
	worker  string // the worker's path in the pod, once installed

	muxMu sync.Mutex
	mux   *session

	renewMu   sync.Mutex
	renewStop context.CancelFunc // stops the TTL renewal, when one runs
}

// session is the command session: the worker's mux over one exec stream.
type session struct {
	*envelope.Mux
	stop context.CancelFunc // ends the stream
}

// killTimeout bounds the script that kills what a broken session left.
const killTimeout = 15 * time.Second

// stream runs argv in the box's container through pods/exec: WebSocket
// (protocol v5, which can close stdin on its own) where the API server
// speaks it, else SPDY. A nil stream is not asked for.
func (c *cluster) stream(ctx context.Context, ns, pod, container string, argv []string, o remotecommand.StreamOptions) error {
	req := c.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: container,
			Command:   argv,
			Stdin:     o.Stdin != nil,
			Stdout:    o.Stdout != nil,
			Stderr:    o.Stderr != nil,
		}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.cfg, "GET", req.URL().String())
	if err != nil {
		return fmt.Errorf("exec in pod %s/%s: %w", ns, pod, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.cfg, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("exec in pod %s/%s: %w", ns, pod, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("exec in pod %s/%s: %w", ns, pod, err)
	}
	return ex.StreamWithContext(ctx, o)
}

// script runs a shell script in the box (args its positional
// parameters) and returns its output (stdout and stderr together) and
// exit code. A transport failure is an error.
func (b *box) script(ctx context.Context, stdin io.Reader, script string, args ...string) ([]byte, int, error) {
	argv := append([]string{"sh", "-c", script, "amelia-setup"}, args...)
	var out lockedBuffer
	err := b.c.stream(ctx, b.ns, b.pod, b.container, argv, remotecommand.StreamOptions{Stdin: stdin, Stdout: &out, Stderr: &out})
	var code utilexec.CodeExitError
	switch {
	case err == nil:
		return out.Bytes(), 0, nil
	case errors.As(err, &code):
		return out.Bytes(), code.Code, nil
	}
	return out.Bytes(), 0, b.failed(ctx, err)
}

// lockedBuffer is a buffer that two streams may write at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.buf.Bytes())
}

// failed says what a failed exec means: the pod gone, or the transport's
// own failure.
func (b *box) failed(ctx context.Context, cause error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pod, err := b.c.client.CoreV1().Pods(b.ns).Get(ctx, b.pod, getOpts)
	switch {
	case apierrors.IsNotFound(err) || err == nil && pod.UID != b.uid:
		b.c.forget(b)
		return sdk.Errorf(sdk.ErrNotFound, "sandbox %s: its pod %s/%s is gone: start it again with `amelia sandbox up`", b.name, b.ns, b.pod)
	case err == nil && pod.DeletionTimestamp != nil:
		b.c.forget(b)
		return sdk.Errorf(sdk.ErrNotFound, "sandbox %s: its pod %s/%s is being deleted", b.name, b.ns, b.pod)
	case err == nil && pod.Status.Phase != corev1.PodRunning:
		return sdk.Errorf(sdk.ErrUnavailable, "sandbox %s: its pod %s/%s is %s, not running (%v)", b.name, b.ns, b.pod, describe(pod), cause)
	}
	return fmt.Errorf("%w: exec in pod %s/%s of sandbox %s: %w", sdk.ErrUnavailable, b.ns, b.pod, b.name, cause)
}

// workers are the host's amelia-worker builds, which go into pods.
type workers struct {
	dirs []string
	sums workerbin.Sums
}

// prepareScript makes the worker's directory and prints the machine's
// architecture, then the size of each executable worker its arguments
// name there ("-" for one that is not): a worker's name carries its
// sha256 and the install renames it into place only once that was
// checked, so its size tells it whole.
const prepareScript = `mkdir -p -- "$1" || exit
uname -m
d=$1; shift
for n do
	f="$d/$n"
	if [ -f "$f" ] && [ -x "$f" ]; then wc -c < "$f"; else echo -; fi
done`

// ready returns the worker's path in the pod, installing it the first
// time: the build for the pod's architecture, uploaded unless a copy of
// it is there already (amelia's own installer then finds it too).
func (b *box) ready(ctx context.Context) (string, error) {
	b.setupMu.Lock()
	defer b.setupMu.Unlock()
	if b.worker != "" {
		return b.worker, nil
	}
	type build struct{ path, arch, sum, name string }
	var builds []build
	var sizes []int64
	for _, arch := range workerbin.Arches() {
		p, err := workerbin.Find(b.c.workers.dirs, arch)
		if err != nil {
			continue
		}
		sum, size, err := b.c.workers.sums.Sum(p)
		if err != nil {
			return "", err
		}
		builds = append(builds, build{p, arch, sum, envelope.WorkerName(sum)})
		sizes = append(sizes, size)
	}
	args := []string{workerDir}
	for _, w := range builds {
		args = append(args, w.name)
	}
	out, code, err := b.script(ctx, nil, prepareScript, args...)
	if err != nil {
		return "", fmt.Errorf("prepare sandbox %s: %w", b.name, err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if code != 0 || len(lines) != 1+len(builds) {
		return "", fmt.Errorf("prepare sandbox %s (pod %s/%s): exit %d: %s", b.name, b.ns, b.pod, code, strings.TrimSpace(string(out)))
	}
	arch, err := envelope.GoArch(lines[0])
	if err != nil {
		return "", fmt.Errorf("sandbox %s: %w", b.name, err)
	}
	i := slices.IndexFunc(builds, func(w build) bool { return w.arch == arch })
	if i < 0 {
		_, err := workerbin.Find(b.c.workers.dirs, arch)
		return "", fmt.Errorf("the kubernetes provider runs commands through amelia-worker: %w", err)
	}
	w := builds[i]
	dest := workerDir + "/" + w.name
	if strings.TrimSpace(lines[1+i]) != strconv.FormatInt(sizes[i], 10) {
		f, err := os.Open(w.path)
		if err != nil {
			return "", fmt.Errorf("worker binary: %w", err)
		}
		defer f.Close()
		out, code, err := b.script(ctx, f, envelope.InstallScript, workerDir, dest, w.sum, strconv.FormatInt(sizes[i], 10))
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(string(out)))
		}
		if err != nil {
			return "", fmt.Errorf("install amelia-worker in sandbox %s (pod %s/%s): %w", b.name, b.ns, b.pod, err)
		}
		b.c.logger.Info("installed amelia-worker", "sandbox", b.name, "pod", b.pod, "path", dest, "bytes", sizes[i])
	}
	b.worker = dest
	return dest, nil
}

// forgetWorker drops the worker found missing, so that the next command
// installs it again.
func (b *box) forgetWorker(path string) {
	b.setupMu.Lock()
	if b.worker == path {
		b.worker = ""
	}
	b.setupMu.Unlock()
}

func (p *Provider) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	if req.TTY {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the kubernetes provider does not allocate terminals")
	}
	switch req.User {
	case "", strconv.Itoa(UID), fmt.Sprintf("%d:%d", UID, GID):
	case "root", "0", "0:0":
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the kubernetes provider does not run commands as root: sandbox pods run as uid %d, without privileges", UID)
	default:
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnsupported, "the kubernetes provider runs commands as the sandbox's uid %d; it cannot run them as %q", UID, req.User)
	}
	b, err := p.box(ctx, req.Sandbox)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	dir := req.Dir
	switch {
	case dir == "":
		dir = Workdir
	case !path.IsAbs(dir):
		dir = path.Join(Workdir, dir)
	}
	env := map[string]string{"HOME": Home, "AMELIA_SANDBOX": b.name}
	for k, v := range req.Env {
		env[k] = v
	}
	cmd := envelope.Command{Argv: req.Argv, Env: env, Dir: dir, Tag: shexec.NewTag()}
	st, err := b.run(ctx, cmd, eio, req.Grace())
	if errors.Is(err, envelope.ErrNoDir) {
		return st, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", dir)
	}
	return st, err
}

// run runs a command in the envelope on the box's command session.
func (b *box) run(ctx context.Context, cmd envelope.Command, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	res, err := envelope.RunOn(ctx, sessions{b}, cmd, envelope.IO{Stdin: eio.Stdin, Stdout: eio.Stdout, Stderr: eio.Stderr}, grace)
	if errors.Is(err, envelope.ErrBroken) {
		err = b.failed(ctx, err)
	}
	return sdk.ExitStatus{Code: res.Code, Signal: res.Signal, Canceled: res.Canceled}, err
}

// sessions gives envelope.RunOn the box's worker and command session.
type sessions struct{ b *box }

func (s sessions) Worker(ctx context.Context) (string, error) { return s.b.ready(ctx) }

func (s sessions) WorkerGone(worker string, err error) {
	s.b.c.logger.Warn("amelia-worker is gone from the sandbox: installing it again", "sandbox", s.b.name, "error", err)
	s.b.forgetWorker(worker)
}

func (s sessions) Session(ctx context.Context, worker string) (*envelope.Mux, error) {
	m, err := s.b.session(ctx, worker)
	if err != nil {
		return nil, err
	}
	return m.Mux, nil
}

func (s sessions) KillLeft(tag string, pid int) { s.b.killLeft(tag, pid) }

// session returns the box's command session, starting the worker's mux
// in an exec stream of its own when there is none or it ended.
func (b *box) session(ctx context.Context, worker string) (*session, error) {
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	if b.mux != nil && !b.mux.Ended() {
		return b.mux, nil
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, stop := context.WithCancel(context.Background())
	var stderr lockedBuffer
	go func() {
		err := b.c.stream(sctx, b.ns, b.pod, b.container, []string{"sh", "-c", envelope.MuxLine(worker)},
			remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: &stderr})
		if err == nil {
			err = io.EOF
		}
		if msg := strings.TrimSpace(string(stderr.Bytes())); msg != "" && sctx.Err() == nil {
			b.c.logger.Debug("the command session ended", "sandbox", b.name, "error", err, "stderr", msg)
		}
		stop()
		outW.CloseWithError(err)
		inR.CloseWithError(io.ErrClosedPipe)
	}()
	type started struct {
		m   *envelope.Mux
		err error
	}
	ch := make(chan started, 1)
	go func() {
		m, err := envelope.NewMux(struct {
			io.Writer
			io.Closer
		}{inW, closer(func() { stop(); inW.Close() })}, outR)
		ch <- started{m, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			stop()
			if errors.Is(r.err, envelope.ErrBroken) {
				return nil, b.failed(ctx, r.err)
			}
			return nil, r.err
		}
		b.mux = &session{Mux: r.m, stop: stop}
		return b.mux, nil
	case <-ctx.Done():
		stop()
		go func() {
			if r := <-ch; r.m != nil {
				r.m.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

type closer func()

func (f closer) Close() error {
	f()
	return nil
}

// closeSession ends the command session; the worker kills what still runs.
func (b *box) closeSession() {
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	if b.mux != nil {
		b.mux.Close()
		b.mux.stop()
		b.mux = nil
	}
}

// killLeft kills the session pid leads and the processes tagged tag.
func (b *box) killLeft(tag string, pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	_, _, err := b.script(ctx, nil, shexec.KillScript, "KILL", strconv.Itoa(pid), shexec.Entry(tag))
	if err != nil && !errors.Is(err, sdk.ErrNotFound) {
		b.c.logger.Warn("kill what a cut command left", "sandbox", b.name, "pid", pid, "error", err)
	}
}
