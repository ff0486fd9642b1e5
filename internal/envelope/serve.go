package envelope

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/amelia-sandbox/amelia/internal/flow"
)

// Timings of a kill, in the worker.
const (
	// goneGrace is the grace between SIGTERM and SIGKILL when the client
	// went away: nobody waits for the command any more.
	goneGrace = 2 * time.Second
	// drainWait bounds how long output may stay open after SIGKILL (a
	// process that left both the session and the tag still holds it).
	drainWait = 10 * time.Second
)

// Serve speaks the envelope on in (frames from the client) and out: it
// writes Hello, reads the Command, runs it as the leader of a new session
// with environ, its Env and TagEnv=Tag, and streams it. It returns once
// the exit frame is written, or, when the client goes away first (in ends
// or breaks, or out cannot be written), once the command's processes were
// signalled (SIGTERM, then SIGKILL) and it ended; no exit frame is
// written then.
//
// A process serving on its stdout must not die of SIGPIPE when its client
// goes away: have the signal delivered (signal.Notify), not ignored, so
// that commands still get the default.
//
// A goroutine keeps reading in after Serve returns, until in ends: the
// worker's process exits then anyway.
func Serve(in io.Reader, out io.Writer, environ []string) error {
	return serve(in, out, environ, nil)
}

// serve is Serve, serving a Step with steps.
func serve(in io.Reader, out io.Writer, environ []string, steps StepFunc) error {
	if _, err := io.WriteString(out, Hello); err != nil {
		return fmt.Errorf("envelope: write the hello: %w", err)
	}
	fw := &frameWriter{w: out}
	fr := newFrameReader(in)
	typ, p, err := fr.read()
	switch {
	case err == io.EOF:
		return nil // the client left before asking anything
	case err != nil:
		return fmt.Errorf("envelope: read the command: %w", err)
	case typ != frameStart:
		return fmt.Errorf("%w: first frame %q, want the command", ErrProtocol, typ)
	}
	var cmd Command
	if err := json.Unmarshal(p, &cmd); err != nil || (len(cmd.Argv) == 0) == (cmd.Step == nil) || cmd.Tag == "" {
		return fmt.Errorf("%w: a command needs argv or a step, and a tag (%v)", ErrProtocol, err)
	}
	if cmd.Step != nil {
		return serveStep(fw, fr, *cmd.Step, steps)
	}
	env := mergeEnv(environ, cmd.Env, TagEnv+"="+cmd.Tag)

	if cmd.Dir != "" {
		if fi, err := os.Stat(cmd.Dir); err != nil || !fi.IsDir() {
			_ = fw.json(frameFailed, failure{Kind: "nodir", Message: fmt.Sprintf("no such working directory: %s", cmd.Dir)})
			return fw.json(frameExit, exit{Code: 125})
		}
	}
	path, code, err := lookPath(cmd.Argv[0], envValue(env, "PATH"), cmd.Dir)
	if err != nil {
		// In a shell's words, as an exec through a shell says it.
		_ = fw.write(frameStderr, []byte(err.Error()+"\n"))
		return fw.json(frameExit, exit{Code: code})
	}

	r := &run{fw: fw, tag: cmd.Tag}
	proc, err := r.start(path, cmd, env)
	if err != nil {
		_ = fw.write(frameStderr, []byte("amelia-worker exec: "+err.Error()+"\n"))
		return fw.json(frameExit, exit{Code: 126})
	}
	if err := fw.write(frameStarted, []byte(strconv.Itoa(proc.Pid))); err != nil {
		r.clientGone()
	}
	r.pid = proc.Pid
	// The pumps start after the started frame, so no output comes first:
	// a client that sees output knows the pid.
	r.outputs.Add(2)
	go r.pump(r.outFiles[0], frameStdout)
	go r.pump(r.outFiles[1], frameStderr)
	go r.feed()
	go r.readFrames(fr)
	return r.wait(proc)
}

// run is a started command.
type run struct {
	fw    *frameWriter
	tag   string
	pid   int
	stdin *os.File // the write end of the command's stdin

	outputs  sync.WaitGroup // the stdout and stderr pumps
	outFiles []*os.File     // their read ends, closed to give up on them
	input    *flow.Queue    // input on its way to the command

	mu      sync.Mutex
	gone    bool          // the client went away
	stopped bool          // a kill began
	killed  chan struct{} // closed when SIGKILL was sent
	stop    chan time.Duration
}

// start starts the command with its streams on pipes; the caller starts
// the pumps.
func (r *run) start(path string, cmd Command, env []string) (*os.Process, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	growPipe(outW)
	growPipe(errW)
	proc, err := os.StartProcess(path, cmd.Argv, &os.ProcAttr{
		Dir:   cmd.Dir,
		Env:   env,
		Files: []*os.File{inR, outW, errW},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("%s: %w", cmd.Argv[0], err)
	}
	r.stdin = inW
	r.input = flow.NewQueue(stdinWindow)
	r.killed = make(chan struct{})
	r.stop = make(chan time.Duration, 1)
	r.outFiles = []*os.File{outR, errR}
	return proc, nil
}

// pump frames one output stream until it ends.
func (r *run) pump(f *os.File, typ byte) {
	defer r.outputs.Done()
	buf := make([]byte, headerSize+outputChunk)
	for {
		n, err := f.Read(buf[headerSize:])
		if n > 0 {
			if werr := r.fw.writeFrame(typ, buf[:headerSize+n]); werr != nil {
				r.clientGone()
			}
		}
		if err != nil {
			return
		}
	}
}

// feed writes the input the client sent to the command, acknowledging
// each chunk; once the command stops reading, the rest is dropped (and
// still acknowledged, so the client never waits for it).
func (r *run) feed() { feedInput(r.input, r.stdin, r.fw) }

// feedInput writes what q delivers to w, acknowledging each chunk on fw;
// once a write fails, w is closed and the rest dropped (and still
// acknowledged). w is closed at the input's end.
func feedInput(q *flow.Queue, w io.WriteCloser, fw *frameWriter) {
	broken := false
	var ack [4]byte
	for {
		chunk, ok := q.Next()
		if !ok {
			break
		}
		if !broken {
			if _, err := w.Write(chunk); err != nil {
				broken = true
				w.Close()
			}
		}
		q.Consumed(len(chunk))
		binary.BigEndian.PutUint32(ack[:], uint32(len(chunk)))
		_ = fw.write(frameAck, ack[:])
	}
	if !broken {
		w.Close()
	}
}

// readFrames reads the client's frames: input, its end, a cancel. The
// stream's end, or a frame out of protocol, means the client is gone.
func (r *run) readFrames(fr *frameReader) { readClientFrames(fr, r.input, r.kill, r.clientGone) }

// readClientFrames reads a client's frames into input until the stream
// ends: a cancel calls onCancel with its grace; the stream's end, input
// beyond the window, or a frame out of protocol calls gone.
func readClientFrames(fr *frameReader, input *flow.Queue, onCancel func(grace time.Duration), gone func()) {
	for {
		typ, p, err := fr.read()
		if err != nil {
			gone()
			return
		}
		switch typ {
		case frameStdin:
			if !input.Push(bytes.Clone(p)) { // more than the window: not our client
				gone()
				return
			}
		case frameStdinClose:
			input.Close()
		case frameCancel:
			var c cancel
			if json.Unmarshal(p, &c) != nil {
				gone()
				return
			}
			onCancel(time.Duration(c.GraceMS) * time.Millisecond)
		default:
			gone()
			return
		}
	}
}

// clientGone kills the command: nobody will read what it does.
func (r *run) clientGone() {
	r.mu.Lock()
	r.gone = true
	r.mu.Unlock()
	r.input.Close()
	r.kill(goneGrace)
}

// kill sends SIGTERM to the command's session and tagged processes, and
// SIGKILL after grace; only the first call counts.
func (r *run) kill(grace time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.stopped = true
	r.stop <- grace
}

// wait waits for the command and its output, carrying out a kill when
// one is asked for, then writes the exit frame.
func (r *run) wait(proc *os.Process) error {
	done := make(chan *os.ProcessState, 1)
	go func() {
		st, _ := proc.Wait()
		done <- st
	}()
	drained := make(chan struct{})
	go func() {
		r.outputs.Wait()
		close(drained)
	}()

	var state *os.ProcessState
	var term, giveUp <-chan time.Time
	for state == nil || drained != nil {
		select {
		case state = <-done:
			done = nil
		case <-drained:
			drained = nil
		case grace := <-r.stop:
			r.signal(syscall.SIGTERM)
			t := time.NewTimer(grace)
			defer t.Stop()
			term = t.C
		case <-term:
			term = nil
			r.signal(syscall.SIGKILL)
			t := time.NewTimer(drainWait)
			defer t.Stop()
			giveUp = t.C
		case <-giveUp:
			// Something outside the session and the tag holds the output,
			// or the client stopped reading it: stop waiting for it.
			for _, f := range r.outFiles {
				f.Close()
			}
			giveUp, drained = nil, nil
		}
	}
	if r.isGone() {
		return nil // nobody reads the exit, and a pump may be stuck writing
	}
	return r.fw.json(frameExit, exitOf(state))
}

func (r *run) isGone() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gone
}

// signal signals the command's session (its process group: the command
// leads it) and every process carrying its tag.
func (r *run) signal(sig syscall.Signal) {
	_ = syscall.Kill(-r.pid, sig)
	entry := []byte(TagEnv + "=" + r.tag)
	self := os.Getpid()
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + d.Name() + "/environ")
		if err != nil {
			continue
		}
		for e := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(e, entry) {
				_ = syscall.Kill(pid, sig)
				break
			}
		}
	}
}

// exitOf is the exit frame of a finished process: its code, or 128+N and
// the signal's name when signal N killed it.
func exitOf(st *os.ProcessState) exit {
	ws, ok := st.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return exit{Code: 128 + int(ws.Signal()), Signal: signalName(ws.Signal())}
	}
	return exit{Code: st.ExitCode()}
}

// signalNames are the names (without SIG) of Linux's standard signals.
var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT", syscall.SIGILL: "ILL",
	syscall.SIGTRAP: "TRAP", syscall.SIGABRT: "ABRT", syscall.SIGBUS: "BUS", syscall.SIGFPE: "FPE",
	syscall.SIGKILL: "KILL", syscall.SIGUSR1: "USR1", syscall.SIGSEGV: "SEGV", syscall.SIGUSR2: "USR2",
	syscall.SIGPIPE: "PIPE", syscall.SIGALRM: "ALRM", syscall.SIGTERM: "TERM", syscall.SIGCHLD: "CHLD",
	syscall.SIGCONT: "CONT", syscall.SIGSTOP: "STOP", syscall.SIGTSTP: "TSTP", syscall.SIGTTIN: "TTIN",
	syscall.SIGTTOU: "TTOU", syscall.SIGURG: "URG", syscall.SIGXCPU: "XCPU", syscall.SIGXFSZ: "XFSZ",
	syscall.SIGVTALRM: "VTALRM", syscall.SIGPROF: "PROF", syscall.SIGWINCH: "WINCH", syscall.SIGIO: "IO",
	syscall.SIGSYS: "SYS",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return strconv.Itoa(int(s))
}

// mergeEnv is environ with set's variables replacing or joining it, in
// sorted order after it, and last.
func mergeEnv(environ []string, set map[string]string, last string) []string {
	out := make([]string, 0, len(environ)+len(set)+1)
	lastKey, _, _ := strings.Cut(last, "=")
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok && k != lastKey {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+set[k])
	}
	return append(out, last)
}

// envValue is a variable's value in env.
func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds file as sh would in path (the command's own PATH, not
// the worker's), relative names in dir. It returns the exit code sh gives
// when it cannot: 127 not found, 126 not executable.
func lookPath(file, path, dir string) (string, int, error) {
	check := func(p string) error {
		full := p
		if !filepath.IsAbs(full) && dir != "" {
			full = filepath.Join(dir, full)
		}
		fi, err := os.Stat(full)
		switch {
		case err != nil:
			return err
		case fi.IsDir() || fi.Mode()&0o111 == 0:
			return fs.ErrPermission
		}
		return nil
	}
	if strings.Contains(file, "/") {
		switch err := check(file); {
		case err == nil:
			return file, 0, nil
		case errors.Is(err, fs.ErrPermission):
			return "", 126, fmt.Errorf("%s: permission denied", file)
		default:
			return "", 127, fmt.Errorf("%s: not found", file)
		}
	}
	denied := false
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		switch err := check(p); {
		case err == nil:
			return p, 0, nil
		case errors.Is(err, fs.ErrPermission):
			denied = true
		}
	}
	if denied {
		return "", 126, fmt.Errorf("%s: permission denied", file)
	}
	return "", 127, fmt.Errorf("%s: command not found", file)
}
