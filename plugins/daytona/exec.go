package daytona

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/workerbin"
)

// Every command in a Daytona sandbox runs inside amelia-worker's exec
// envelope (package envelope): Daytona's SSH path drops stderr (and hangs
// once about 2 MiB of it is unread), loses the exit status now and then,
// never sends exit-signal, and leaves commands in its daemon's process
// group, so the only stream it carries whole, stdout, carries everything.
// Until the worker is there, the box is set up with envelope.Bootstrap
// scripts, which need nothing but stdout.

// workers are the host's amelia-worker builds, which the provider puts
// into sandboxes.
type workers struct {
	dirs []string
	sums workerbin.Sums
}

// build is one of them: its file, architecture, sha256 and size.
type build struct {
	path, arch, sum string
	size            int64
}

// builds are the builds found for each architecture, hashed (once per
// version of each file).
func (w *workers) builds() ([]build, error) {
	var found []build
	for _, arch := range workerbin.Arches() {
		path, err := workerbin.Find(w.dirs, arch)
		if err != nil {
			continue
		}
		sum, size, err := w.sums.Sum(path)
		if err != nil {
			return nil, err
		}
		found = append(found, build{path: path, arch: arch, sum: sum, size: size})
	}
	return found, nil
}

// setup is what commands in a sandbox need: the login's home (the
// workspace is under it) and the path of the worker there.
type setup struct {
	home, worker string
}

// prepareScript makes the workspace and the worker's directory under the
// login's home, and prints the home, the machine's architecture, and the
// size of each executable worker its arguments name in that directory
// ("-" for one that is not there), one per line: a sandbox is set up in
// one session, the upload aside. A worker's name carries its sha256 and
// the install renames it into place only once its sha256 was checked, so
// the size is enough to tell it whole; hashing it again, as amelia's
// installer does before a run, would cost more than the rest.
const prepareScript = `mkdir -p -- "$HOME/workspace" "$HOME/.amelia/bin" || exit
printf '%s\n%s\n' "$HOME" "$(uname -m)"
for n do
	f="$HOME/.amelia/bin/$n"
	if [ -f "$f" ] && [ -x "$f" ]; then wc -c < "$f"; else echo -; fi
done`

// bootstrapTries is how often a bootstrap script whose session was cut
// before its exit code is run: each is safe to repeat. bootstrapPause is
// the first wait between two tries; each next one doubles.
const (
	bootstrapTries = 3
	bootstrapPause = 200 * time.Millisecond
)

// killTimeout bounds the session that kills what a broken exec left.
const killTimeout = 10 * time.Second

// workspace is the sandbox's workdir under the user's home.
func workspace(home string) string { return home + "/workspace" }

// workerDir is where workers go, under the user's home (prepareScript
// makes it).
func workerDir(home string) string { return home + "/.amelia/bin" }

// ready returns the box's setup, making it the first time: the workspace,
// and the worker for the sandbox's architecture, uploaded unless a copy
// with the same sha256 is there (amelia's own installer then finds it).
func (b *box) ready(ctx context.Context) (setup, error) {
	b.setupMu.Lock()
	defer b.setupMu.Unlock()
	if b.setup.worker != "" {
		return b.setup, nil
	}
	builds, err := b.acct.workers.builds()
	if err != nil {
		return setup{}, err
	}
	names := make([]string, len(builds))
	for i, w := range builds {
		names[i] = envelope.WorkerName(w.sum)
	}
	home, machine, sizes, err := b.prepare(ctx, names...)
	if err != nil {
		return setup{}, err
	}
	arch, err := envelope.GoArch(machine)
	if err != nil {
		return setup{}, fmt.Errorf("daytona sandbox %s: %w", b.name, err)
	}
	i := slices.IndexFunc(builds, func(w build) bool { return w.arch == arch })
	if i < 0 {
		_, err := workerbin.Find(b.acct.workers.dirs, arch)
		return setup{}, fmt.Errorf("the daytona provider runs commands through amelia-worker: %w", err)
	}
	w := builds[i]
	dir := workerDir(home)
	dest := dir + "/" + names[i]
	if i >= len(sizes) || strings.TrimSpace(sizes[i]) != strconv.FormatInt(w.size, 10) {
		open := func() (io.ReadCloser, error) { return os.Open(w.path) }
		if _, err := b.bootstrap(ctx, "upload the worker", open, envelope.InstallScript, dir, dest, w.sum, strconv.FormatInt(w.size, 10)); err != nil {
			return setup{}, err
		}
		b.acct.logger.Info("installed amelia-worker", "sandbox", b.name, "path", dest, "bytes", w.size)
	}
	b.setup = setup{home: home, worker: dest}
	return b.setup, nil
}

// prepare makes the workspace, and learns the home it is in (Daytona's
// snapshots put the user's in /home/daytona, but an image may not), the
// machine's architecture, and the sizes of the workers named (see
// prepareScript).
func (b *box) prepare(ctx context.Context, workers ...string) (home, machine string, sizes []string, err error) {
	out, err := b.bootstrap(ctx, "prepare the workspace", nil, prepareScript, workers...)
	if err != nil {
		return "", "", nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) < 2 || !path.IsAbs(lines[0]) || strings.ContainsAny(lines[0], "\x00") {
		return "", "", nil, fmt.Errorf("daytona sandbox %s: the user's $HOME is %q, not an absolute path", b.name, lines[0])
	}
	return path.Clean(lines[0]), lines[1], lines[2:], nil
}

// bootstrap runs a setup script through the gateway, again when its
// session is cut before its exit code; a non-zero exit is an error with
// its output. open, when not nil, opens its stdin afresh for each try.
func (b *box) bootstrap(ctx context.Context, what string, open func() (io.ReadCloser, error), script string, args ...string) ([]byte, error) {
	var err error
	wait := bootstrapPause
	for try := 0; try < bootstrapTries; try++ {
		if try > 0 {
			// The chain's last hop, the daemon's SSH server, may not be
			// up yet (it starts after the sandbox is reported started,
			// which a runner may do early), or a hop failed for a moment:
			// give it a little time rather than every try at once.
			if perr := pause(ctx, &wait, time.Second); perr != nil {
				return nil, fmt.Errorf("%s in Daytona sandbox %s: %w", what, b.name, perr)
			}
		}
		var out []byte
		var code int
		out, code, err = b.bootstrapOnce(ctx, open, script, args...)
		switch {
		case err == nil && code == 0:
			return out, nil
		case err == nil:
			return out, fmt.Errorf("%s in Daytona sandbox %s: exit %d: %s", what, b.name, code, strings.TrimSpace(string(out)))
		case !errors.Is(err, sdk.ErrUnavailable) || ctx.Err() != nil:
			return nil, fmt.Errorf("%s in Daytona sandbox %s: %w", what, b.name, err)
		}
	}
	return nil, fmt.Errorf("%s in Daytona sandbox %s, %d times: %w", what, b.name, bootstrapTries, err)
}

func (b *box) bootstrapOnce(ctx context.Context, open func() (io.ReadCloser, error), script string, args ...string) ([]byte, int, error) {
	conn, err := b.connection(ctx)
	if err != nil {
		return nil, 0, err
	}
	var stdin io.Reader
	if open != nil {
		f, err := open()
		if err != nil {
			return nil, 0, err
		}
		defer f.Close()
		stdin = f
	}
	return conn.Bootstrap(ctx, script, stdin, args...)
}

// run runs a command in the envelope, on the box's command session (one
// long session carries every command: each new session through Daytona's
// gateway costs two fresh SSH connections upstream and an API call).
func (b *box) run(ctx context.Context, cmd envelope.Command, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	res, err := envelope.RunOn(ctx, sessions{b}, cmd, envelope.IO{Stdin: eio.Stdin, Stdout: eio.Stdout, Stderr: eio.Stderr}, grace)
	if errors.Is(err, envelope.ErrBroken) {
		err = fmt.Errorf("%w: the command session to Daytona sandbox %s broke: %w", sdk.ErrUnavailable, b.name, err)
	}
	return sdk.ExitStatus{Code: res.Code, Signal: res.Signal, Canceled: res.Canceled}, err
}

// sessions gives envelope.RunOn the box's worker and command session.
type sessions struct{ b *box }

func (s sessions) Worker(ctx context.Context) (string, error) {
	set, err := s.b.ready(ctx)
	return set.worker, err
}

// WorkerGone forgets the box's setup if it is still the one with worker
// (removed since the box was set up): the next ready makes it again.
func (s sessions) WorkerGone(worker string, err error) {
	s.b.acct.logger.Warn("amelia-worker is gone from the sandbox: installing it again", "sandbox", s.b.name, "error", err)
	s.b.setupMu.Lock()
	if s.b.setup.worker == worker {
		s.b.setup = setup{}
	}
	s.b.setupMu.Unlock()
}

func (s sessions) Session(ctx context.Context, worker string) (*envelope.Mux, error) {
	return s.b.session(ctx, worker)
}

func (s sessions) KillLeft(tag string, pid int) { s.b.killLeft(tag, pid) }

// session returns the box's command session, starting the worker's mux in
// a gateway session when there is none or it ended.
func (b *box) session(ctx context.Context, worker string) (*envelope.Mux, error) {
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	if b.mux != nil && !b.mux.Ended() {
		return b.mux, nil
	}
	conn, err := b.connection(ctx)
	if err != nil {
		return nil, err
	}
	m, err := conn.Mux(ctx, worker)
	if err != nil {
		return nil, fmt.Errorf("start the command session in Daytona sandbox %s: %w", b.name, err)
	}
	b.mux = m
	return m, nil
}

// closeSession ends the command session; the worker kills what still runs.
func (b *box) closeSession() {
	b.muxMu.Lock()
	defer b.muxMu.Unlock()
	if b.mux != nil {
		b.mux.Close()
		b.mux = nil
	}
}

// killLeft kills the session pid leads and the processes tagged tag, from
// a session of its own.
func (b *box) killLeft(tag string, pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	conn, err := b.connection(ctx)
	if err == nil {
		_, _, err = conn.Bootstrap(ctx, shexec.KillScript, nil, "KILL", strconv.Itoa(pid), shexec.Entry(tag))
	}
	if err != nil {
		b.acct.logger.Warn("kill what a cut command left", "sandbox", b.name, "pid", pid, "error", err)
	}
}
