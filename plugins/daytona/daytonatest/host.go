package daytonatest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostBackend keeps sandboxes as directories on the host: a sandbox's
// directory is its user's home, and its commands run on the host, as the
// test's own user. A command runs in a new session, or, as a daemon's
// child, in the process group of the sandbox's daemon: a process started
// with the sandbox that does nothing. Stopping or removing a sandbox kills
// the process groups of every command it ran, and of its daemon.
type hostBackend struct {
	root   string // under the test's temporary directory
	logger *slog.Logger
	daemon bool // start a daemon with each sandbox

	mu      sync.Mutex
	up      map[string]bool             // by sandbox id: started
	groups  map[string]map[int]struct{} // by sandbox id: process groups started
	daemons map[string]*hostDaemon      // by sandbox id
}

// hostDaemon is a sandbox's stand-in for Daytona's daemon on the host: a
// `cat` of a pipe that the fake holds (so it ends with the fake, whatever
// happens), leading the process group its commands join.
type hostDaemon struct {
	cmd  *exec.Cmd
	hold *os.File
}

func (h *hostBackend) imageExists(context.Context, string) (bool, error) { return true, nil }

func (h *hostBackend) prepare(s *sandbox) error {
	dir, err := os.MkdirTemp(h.root, "sandbox-")
	if err != nil {
		return fmt.Errorf("make the directory of sandbox %s: %w", s.id, err)
	}
	s.home = dir
	return nil
}

func (h *hostBackend) create(context.Context, *sandbox) error { return nil }

func (h *hostBackend) start(_ context.Context, s *sandbox) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up == nil {
		h.up = map[string]bool{}
	}
	if h.daemon && h.daemons[s.id] == nil {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("start the daemon of sandbox %s: %w", s.id, err)
		}
		cmd := exec.Command("cat")
		cmd.Stdin = r
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		err = cmd.Start()
		r.Close()
		if err != nil {
			w.Close()
			return fmt.Errorf("start the daemon of sandbox %s: %w", s.id, err)
		}
		h.daemons[s.id] = &hostDaemon{cmd: cmd, hold: w}
		h.addGroupLocked(s.id, cmd.Process.Pid)
	}
	h.up[s.id] = true
	return nil
}

func (h *hostBackend) addGroupLocked(id string, pgid int) {
	if h.groups[id] == nil {
		h.groups[id] = map[int]struct{}{}
	}
	h.groups[id][pgid] = struct{}{}
}

func (h *hostBackend) stop(_ context.Context, s *sandbox) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.up, s.id)
	h.killLocked(s.id)
	return nil
}

func (h *hostBackend) remove(ctx context.Context, s *sandbox) error {
	_ = h.stop(ctx, s)
	// The directory goes with the test's temporary directory: a command
	// killed just now may still hold files in it.
	return nil
}

// killLocked kills every process group a sandbox's commands started, and
// its daemon.
func (h *hostBackend) killLocked(id string) {
	for pgid := range h.groups[id] {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			h.logger.Warn("daytonatest: kill a sandbox's process group", "sandbox", id, "pgid", pgid, "error", err)
		}
	}
	delete(h.groups, id)
	if d := h.daemons[id]; d != nil {
		d.hold.Close()
		_ = d.cmd.Wait() // killed above
		delete(h.daemons, id)
	}
}

func (h *hostBackend) close(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.groups {
		h.killLocked(id)
	}
	h.up = nil
	return nil
}

func (h *hostBackend) dial(ctx context.Context, _ *sandbox, host string, port uint32) (io.ReadWriteCloser, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.FormatUint(uint64(port), 10)))
}

// env is a command's environment on the host.
func (h *hostBackend) env(s *sandbox, extra []string) []string {
	env := baseEnv(s.user, s.home)
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	return append(env, extra...)
}

// startLocked starts cmd in a started sandbox, and records its process
// group unless it joins the daemon's, which it returns. The caller holds
// h.mu.
func (h *hostBackend) startLocked(s *sandbox, cmd *exec.Cmd, daemonChild bool) (pgid int, err error) {
	if !h.up[s.id] {
		return 0, fmt.Errorf("sandbox %s is not started", s.id)
	}
	if daemonChild {
		d := h.daemons[s.id]
		if d == nil {
			return 0, fmt.Errorf("sandbox %s has no daemon to run the command", s.id)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: d.cmd.Process.Pid}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("run a command in sandbox %s: %w", s.id, err)
	}
	if daemonChild {
		return cmd.SysProcAttr.Pgid, nil
	}
	h.addGroupLocked(s.id, cmd.Process.Pid)
	return cmd.Process.Pid, nil
}

func (h *hostBackend) run(ctx context.Context, s *sandbox, req execRequest) (exitStatus, error) {
	if req.pty != nil {
		return h.runPty(ctx, s, req)
	}
	dir := req.dir
	if dir == "" {
		dir = s.home
	}
	cmd := exec.Command("/bin/sh", "-c", req.cmd)
	if req.noCommand {
		cmd = exec.Command("/bin/sh")
	}
	cmd.Dir = dir
	cmd.Env = h.env(s, req.env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	// Our own pipes rather than exec.Cmd's copying: a failed write must
	// close our end (so the command gets EPIPE), and stdin must close when
	// req.stdin ends, not when the command does.
	var parentEnds, childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("run a command in sandbox %s: %w", s.id, err)
		}
		return r, w, nil
	}
	outR, outW, err := pipe()
	if err != nil {
		return exitStatus{}, err
	}
	parentEnds = append(parentEnds, outR)
	childEnds = append(childEnds, outW)
	cmd.Stdout, cmd.Stderr = outW, outW
	// One pipe for both when they go to the same writer (the toolbox's
	// combined output), so that the order written is kept.
	var errR *os.File
	if req.stderr == nil || req.stderr != req.stdout {
		r, w, err := pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			return exitStatus{}, err
		}
		errR = r
		parentEnds = append(parentEnds, r)
		childEnds = append(childEnds, w)
		cmd.Stderr = w
	}
	var inW *os.File
	if req.stdin != nil {
		inR, w, err := pipe()
		if err != nil {
			for _, f := range append(parentEnds, childEnds...) {
				f.Close()
			}
			return exitStatus{}, err
		}
		inW = w
		childEnds = append(childEnds, inR)
		cmd.Stdin = inR
	}

	h.mu.Lock()
	pgid, err := h.startLocked(s, cmd, req.daemonChild)
	h.mu.Unlock()
	if err != nil {
		for _, f := range parentEnds {
			f.Close()
		}
		if inW != nil {
			inW.Close()
		}
		return exitStatus{}, err
	}
	for _, f := range childEnds {
		f.Close()
	}
	childEnds = nil
	if req.started != nil {
		req.started()
	}
	stopSignals := forwardSignals(req.signals, cmd.Process)
	defer stopSignals()

	if inW != nil {
		go func() {
			// Ends when req.stdin does (the channel's EOF, or its close).
			_, _ = io.Copy(inW, req.stdin)
			inW.Close()
		}()
	}
	var wg sync.WaitGroup
	drain := func(w io.Writer, r *os.File) {
		defer wg.Done()
		defer r.Close()
		if w == nil {
			w = io.Discard
		}
		_, _ = io.Copy(w, r)
	}
	wg.Add(1)
	go drain(req.stdout, outR)
	if errR != nil {
		wg.Add(1)
		go drain(req.stderr, errR)
	}
	output := make(chan struct{})
	go func() {
		wg.Wait()
		close(output)
	}()
	select {
	case <-output:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-output
	}
	return waitStatus(s, cmd)
}

// waitStatus waits for a command whose output has ended.
func waitStatus(s *sandbox, cmd *exec.Cmd) (exitStatus, error) {
	err := cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return exitStatus{}, fmt.Errorf("wait for a command in sandbox %s: %w", s.id, err)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return exitStatus{code: 128 + int(ws.Signal()), signal: strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")}, nil
	}
	return exitStatus{code: cmd.ProcessState.ExitCode()}, nil
}

// forwardSignals sends the signals named on signals to p until the
// returned function is called.
func forwardSignals(signals <-chan string, p *os.Process) func() {
	if signals == nil {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case name := <-signals:
				_ = p.Signal(sshSignal(name))
			case <-stop:
				return
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// sshSignal is the signal an SSH "signal" request names, as Daytona's
// daemon reads it: SIGKILL for a name it does not know.
func sshSignal(name string) syscall.Signal {
	switch name {
	case "ABRT":
		return syscall.SIGABRT
	case "ALRM":
		return syscall.SIGALRM
	case "FPE":
		return syscall.SIGFPE
	case "HUP":
		return syscall.SIGHUP
	case "ILL":
		return syscall.SIGILL
	case "INT":
		return syscall.SIGINT
	case "PIPE":
		return syscall.SIGPIPE
	case "QUIT":
		return syscall.SIGQUIT
	case "SEGV":
		return syscall.SIGSEGV
	case "TERM":
		return syscall.SIGTERM
	case "USR1":
		return syscall.SIGUSR1
	case "USR2":
		return syscall.SIGUSR2
	}
	return syscall.SIGKILL
}

// runPty runs a login shell on a new pseudo-terminal, leading its own
// session with the terminal as its controlling one.
func (h *hostBackend) runPty(ctx context.Context, s *sandbox, req execRequest) (exitStatus, error) {
	master, slave, err := openPTY()
	if err != nil {
		return exitStatus{}, fmt.Errorf("run a shell in sandbox %s: %w", s.id, err)
	}
	defer master.Close()
	resize(master, req.pty.cols, req.pty.rows)
	cmd := exec.Command("/bin/sh", "-c", pickShell)
	cmd.Dir = s.home
	cmd.Env = h.env(s, append([]string{"TERM=" + req.pty.term}, req.env...))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	h.mu.Lock()
	pgid, err := h.startLocked(s, cmd, false)
	h.mu.Unlock()
	slave.Close()
	if err != nil {
		return exitStatus{}, err
	}
	if req.started != nil {
		req.started()
	}
	// No signals: Daytona's daemon reads none for a pty shell.
	stopResize := make(chan struct{})
	defer close(stopResize)
	go func() {
		for {
			select {
			case sz := <-req.pty.resize:
				resize(master, sz.cols, sz.rows)
			case <-stopResize:
				return
			}
		}
	}()
	if req.stdin != nil {
		go func() { _, _ = io.Copy(master, req.stdin) }()
	}
	output := make(chan struct{})
	go func() {
		defer close(output)
		// Ends with EIO once nothing holds the terminal any more.
		_, _ = io.Copy(req.stdout, master)
	}()
	select {
	case <-output:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		master.Close()
		<-output
	}
	return waitStatus(s, cmd)
}

// openPTY opens a new pseudo-terminal: its master, pollable (so Close
// ends a Read), and its slave.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	var n uint32
	var ioErr error
	rc, err := master.SyscallConn()
	if err == nil {
		err = rc.Control(func(fd uintptr) {
			if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr == nil {
				n, ioErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
			}
		})
	}
	if err = errors.Join(err, ioErr); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock a pseudo-terminal: %w", err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	return master, slave, nil
}

// resize sets a terminal's size (nothing for a zero size).
func resize(master *os.File, cols, rows uint32) {
	if cols == 0 || rows == 0 {
		return
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	})
}
