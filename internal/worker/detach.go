package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/atomicwriter"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// A detached run lives in a directory of its own inside the sandbox, apart
// from any connection to the host: `detach` starts a supervisor there,
// which runs the command and outlives whoever started it; `follow` streams
// what it wrote, from any line on, as often as a host reconnects; `stop`
// ends it. The directory holds:
const (
	runPID      = "pid"            // the supervisor's pid and start time, once the command runs
	runMessages = "messages.jsonl" // the command's stdout: the protocol lines
	runStderr   = "stderr.log"     // the command's stderr, and the supervisor's
	runExit     = "exit"           // how the command ended (runEnd), once all of it is gone
)

// Exit codes of detach, follow and stop.
const (
	// exitStarted: detach found a run in the directory already.
	exitStarted = 3
	// exitBusy: detach's lock is held by another process.
	exitBusy = 4
	// exitNoRun: follow's and stop's when the directory holds no run, or
	// a run whose supervisor died without saying how it ended. follow
	// otherwise exits with the run's own code: 125 is what env(1) and
	// docker use for their own failures, and the worker never does.
	exitNoRun = 125
)

// runEnd is the exit file's content.
type runEnd struct {
	// Code is the command's exit code, or 128+N when signal N killed it.
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
}

// followPoll is how often follow looks for new lines while a run is quiet.
const followPoll = 50 * time.Millisecond

func (w *worker) detachCmd() *cobra.Command {
	var dir, lock string
	var homes privateDirs
	var tun runTunnel
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "detach --dir D [--lock FILE] [--home DIR] [--tmpdir DIR] [--tunnel [--egress-proxy]] -- PROGRAM ARGS...",
		Short: "Start a command that outlives this connection, in run directory D",
		Long: `Start a supervisor that runs PROGRAM ARGS... (amelia-worker agentic, say) with its stdout in
D/messages.jsonl and its stderr in D/stderr.log, in a session of its own, and
return once it runs. The supervisor outlives the connection that started it;
when the command ends it kills whatever the command left running and writes
D/exit. With --lock, the supervisor holds an exclusive flock on FILE for as
long as it runs, and refuses to start (exit 4) when another process holds it.
With --home and --tmpdir, the command's HOME and TMPDIR are those
directories, made 0700 (inside D, they are the run's own). With --tunnel,
the supervisor holds the sandbox end of the run's tunnel to the proxy for
as long as the command lives: a loopback port the command finds in
AMELIA_PROXY_URL (and, with --egress-proxy, in HTTP_PROXY and HTTPS_PROXY,
with AMELIA_PROXY_TOKEN as the password), carried to the host by whichever
` + "`amelia-worker tunnel --run D`" + ` last attached. Exit 3: D already holds
a run.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return w.detach(dir, lock, homes, tun, grace, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the run's directory (required; made 0700)")
	f.StringVar(&lock, "lock", "", "a file to hold an exclusive flock on while the run lives")
	f.StringVar(&homes.home, "home", "", "the command's HOME (made 0700)")
	f.StringVar(&homes.tmp, "tmpdir", "", "the command's TMPDIR (made 0700)")
	tun.flags(f)
	f.DurationVar(&grace, "grace", 10*time.Second, "how long a stopped command has between SIGTERM and SIGKILL")
	cmd.MarkFlagRequired("dir")
	return cmd
}

// privateDirs are a detached command's HOME and TMPDIR; "" keeps the
// inherited one.
type privateDirs struct{ home, tmp string }

// env is the environment the supervisor and the command get: this
// process's, with HOME and TMPDIR replaced where set.
func (p privateDirs) env() []string {
	env := os.Environ()
	for k, v := range map[string]string{"HOME": p.home, "TMPDIR": p.tmp} {
		if v == "" {
			continue
		}
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
		env = append(env, k+"="+v)
	}
	return env
}

// makePrivate makes dir, and makes it 0700 (chmod fails when someone else
// owns it).
func makePrivate(flag, dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("%s %q: want an absolute path", flag, dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// detach starts the supervisor and waits for its word on the ready pipe:
// "ok" once the command runs, or why it could not start.
func (w *worker) detach(dir, lock string, homes privateDirs, tun runTunnel, grace time.Duration, args []string) error {
	if err := makePrivate("--dir", dir); err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	// O_EXCL: a directory runs one command, ever; a host that retries a
	// start it is unsure of finds the first one here.
	stderr, err := os.OpenFile(filepath.Join(dir, runStderr), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if errors.Is(err, os.ErrExist) {
		fmt.Fprintf(w.p.Stderr, "amelia-worker detach: a run was already started in %s\n", dir)
		return exitCode(exitStarted)
	}
	if err != nil {
		return fmt.Errorf("detach: %w", err)
	}
	defer stderr.Close()
	for flag, d := range map[string]string{"--home": homes.home, "--tmpdir": homes.tmp} {
		if d == "" {
			continue
		}
		if err := makePrivate(flag, d); err != nil {
			return fmt.Errorf("detach: %w", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("detach: find amelia-worker: %w", err)
	}
	argv := append(append([]string{self, "supervise", "--dir", dir, "--grace", grace.String(), "--lock", lock}, tun.args()...), "--")
	argv = append(argv, args...)
	msg, st, err := startDetached(argv, dir, stderr, homes.env())
	if err != nil {
		return fmt.Errorf("detach: start the supervisor: %w", err)
	}
	if st == nil {
		return nil // it is on its own now: its parent's death reparents it
	}
	code := exitFailed
	if st.ExitCode() == exitBusy {
		code = exitBusy
	}
	if msg == "" {
		msg = "the supervisor exited before the command started; see " + filepath.Join(dir, runStderr)
	}
	fmt.Fprintf(w.p.Stderr, "amelia-worker detach: %s\n", msg)
	return exitCode(code)
}

// startDetached starts argv in dir, in a session of its own so that it
// outlives its parent, with stdin from /dev/null, stdout and stderr on
// logTo and a ready pipe as fd 3, and waits for its word there. "ok\n"
// releases it: ended is nil. Any other word (what went wrong, or nothing)
// means it ends: ended is how, and said what it wrote.
func startDetached(argv []string, dir string, logTo *os.File, env []string) (said string, ended *os.ProcessState, err error) {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return "", nil, err
	}
	defer readyR.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		readyW.Close()
		return "", nil, err
	}
	defer null.Close()
	p, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Dir:   dir,
		Files: []*os.File{null, logTo, logTo, readyW}, // the ready pipe is fd 3
		Env:   env,
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	readyW.Close()
	if err != nil {
		return "", nil, err
	}
	word, _ := io.ReadAll(io.LimitReader(readyR, 4096))
	if string(word) == "ok\n" {
		return "", nil, p.Release()
	}
	ended, err = p.Wait()
	if err != nil {
		return "", nil, err
	}
	return strings.TrimSpace(string(word)), ended, nil
}

// errBusy: another process holds the run's lock.
type errBusy struct{ lock string }

func (e errBusy) Error() string {
	return "the sandbox is in use by another run (" + e.lock + " is locked)"
}

func (w *worker) superviseCmd() *cobra.Command {
	var dir, lock string
	var tun runTunnel
	var grace time.Duration
	cmd := &cobra.Command{
		Use:    "supervise --dir D -- PROGRAM ARGS...",
		Short:  "The supervisor detach starts (not for direct use)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			// fd 3 is the ready pipe; the command must not inherit it, or
			// detach would wait for the command's end.
			syscall.CloseOnExec(3)
			ready := os.NewFile(3, "ready")
			defer ready.Close()
			err := w.supervise(dir, lock, tun, grace, args, ready)
			if err != nil {
				fmt.Fprintf(ready, "%v\n", err)
				fmt.Fprintf(w.p.Stderr, "amelia-worker supervise: %v\n", err)
				if _, ok := errors.AsType[errBusy](err); ok {
					return exitCode(exitBusy)
				}
				return exitCode(exitNoRun)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the run's directory")
	f.StringVar(&lock, "lock", "", "a file to hold an exclusive flock on")
	f.DurationVar(&grace, "grace", 10*time.Second, "SIGTERM to SIGKILL")
	tun.flags(f)
	return cmd
}

// supervise runs args as a child of this process, which becomes the
// subreaper of everything the child starts: when the child ends, or after
// the grace once this process is asked to stop, everything left below it
// is killed, then the run's tunnel closes, and only then is the exit file
// written. An error means the command never started.
func (w *worker) supervise(dir, lock string, tun runTunnel, grace time.Duration, args []string, ready *os.File) error {
	var locked *os.File
	if lock != "" {
		f, err := os.OpenFile(lock, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("open the lock: %w", err)
		}
		// Held (fd open, close-on-exec) until everything below this
		// process has ended, or it exits.
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			return errBusy{lock}
		}
		locked = f
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become the subreaper: %w", err)
	}
	out, err := os.OpenFile(filepath.Join(dir, runMessages), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	prog, err := exec.LookPath(args[0])
	if err != nil {
		return fmt.Errorf("start %s: %w", args[0], err)
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	env := os.Environ()
	var tunnelDone func()
	if tun.on {
		// Held before the child exists, and until everything below this
		// process is gone: no other process ever has the address the
		// child sends its token to.
		var tenv map[string]string
		if tenv, tunnelDone, err = w.holdTunnel(tun.egress); err != nil {
			return err
		}
		defer tunnelDone()
		env = withEnv(env, tenv)
	}
	// Signals are caught before the child exists, so none is lost.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	child, err := os.StartProcess(prog, args, &os.ProcAttr{
		Dir:   dir,
		Env:   env,
		Files: []*os.File{null, out, os.Stderr},
	})
	if err != nil {
		return fmt.Errorf("start %s: %w", args[0], err)
	}
	self, err := procStart(os.Getpid())
	if err != nil {
		child.Kill()
		return err
	}
	if err := atomicwriter.WriteFile(filepath.Join(dir, runPID), []byte(strconv.Itoa(os.Getpid())+" "+self+"\n"), 0o600); err != nil {
		child.Kill()
		return err
	}
	io.WriteString(ready, "ok\n")
	ready.Close()

	go func() {
		<-sigs
		// The worker writes its interrupted result on SIGTERM; what is
		// still alive after the grace is killed.
		child.Signal(syscall.SIGTERM)
		time.Sleep(grace)
		killDescendants(os.Getpid())
	}()
	end := reapAll(child.Pid)
	// The run is over: the lock goes before its end is on record, so a
	// host that sees the end finds the sandbox free.
	if locked != nil {
		locked.Close()
	}
	data, _ := json.Marshal(end)
	err = atomicwriter.WriteFile(filepath.Join(dir, runExit), append(data, '\n'), 0o600)
	// The tunnel goes once the end is on record: a carrier it closes can
	// tell its host that the run ended, not that the carrier broke.
	if tunnelDone != nil {
		tunnelDone()
	}
	return err
}

// reapAll reaps every child of this process until none is left, and
// returns how the one with pid ended. Once that one has ended, whatever it
// left (reparented here, the subreaper) is killed.
func reapAll(pid int) runEnd {
	var end runEnd
	childDone := false
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil { // ECHILD: nothing left
			return end
		}
		if got == pid {
			childDone = true
			end = endOf(ws)
		}
		if childDone {
			killDescendants(os.Getpid())
		}
	}
}

func endOf(ws unix.WaitStatus) runEnd {
	if ws.Signaled() {
		return runEnd{Code: 128 + int(ws.Signal()), Signal: unix.SignalName(ws.Signal())}
	}
	return runEnd{Code: ws.ExitStatus()}
}

// killDescendants sends SIGKILL to every process below pid.
func killDescendants(pid int) {
	for _, p := range descendants(pid) {
		unix.Kill(p, unix.SIGKILL)
	}
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func (w *worker) followCmd() *cobra.Command {
	var dir string
	var skip int
	var noWait bool
	cmd := &cobra.Command{
		Use:   "follow --dir D [--skip N] [--no-wait]",
		Short: "Stream a detached run's protocol lines, from line N+1, until it ends",
		Long: `Copy D/messages.jsonl to stdout from line N+1 on, whole lines only, waiting
for more until the run has ended; then exit with the run's exit code, its
stderr's tail on stderr when that is not 0. Stopping follow leaves the run
running. With --no-wait, exit 0 at the end of what is there while the run
goes on. Exit 125: no run in D, or its supervisor died without an exit
status.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return w.follow(cmd.Context(), dir, skip, noWait)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the run's directory (required)")
	cmd.Flags().IntVar(&skip, "skip", 0, "lines already seen")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "stop at the end of what the run wrote so far")
	cmd.MarkFlagRequired("dir")
	return cmd
}

func (w *worker) follow(ctx context.Context, dir string, skip int, noWait bool) error {
	f, err := os.Open(filepath.Join(dir, runMessages))
	if err != nil {
		fmt.Fprintf(w.p.Stderr, "amelia-worker follow: no run in %s (%v)\n", dir, err)
		return exitCode(exitNoRun)
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	out := bufio.NewWriterSize(w.p.Stdout, 64<<10)
	var partial []byte // the start of a line still being written
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		// A run whose supervisor is gone (lost) still shows what it wrote.
		ended, end, lost := runEnded(dir)
		for {
			chunk, err := r.ReadSlice('\n')
			if err == bufio.ErrBufferFull {
				partial = append(partial, chunk...)
				continue
			}
			if err != nil { // io.EOF: the rest of the line is not there yet
				partial = append(partial, chunk...)
				break
			}
			if skip > 0 {
				skip--
			} else {
				out.Write(partial)
				out.Write(chunk)
			}
			partial = partial[:0]
		}
		if lost != nil {
			out.Flush()
			fmt.Fprintf(w.p.Stderr, "amelia-worker follow: %v\n", lost)
			return exitCode(exitNoRun)
		}
		if ended {
			// Read after the exit file was seen: nothing more will come.
			if skip == 0 && len(partial) > 0 {
				out.Write(partial)
			}
			if err := out.Flush(); err != nil {
				return exitCode(exitFailed)
			}
			if end.Code != 0 {
				w.stderrTail(dir)
			}
			return exitCode(end.Code)
		}
		if err := out.Flush(); err != nil {
			return exitCode(exitFailed) // the host went away
		}
		if noWait {
			return nil
		}
		select {
		case <-ctx.Done():
			return exitCode(exitInterrupted)
		case <-tick.C:
		}
	}
}

// runEnded says whether the run in dir has ended, and how. A run whose
// supervisor is gone without an exit file is an error.
func runEnded(dir string) (bool, runEnd, error) {
	var end runEnd
	data, err := os.ReadFile(filepath.Join(dir, runExit))
	if err == nil {
		if err := json.Unmarshal(data, &end); err != nil {
			return false, end, fmt.Errorf("%s: %v", filepath.Join(dir, runExit), err)
		}
		return true, end, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return false, end, err
	}
	pid, err := supervisorPID(dir)
	if err != nil {
		return false, end, err
	}
	if !pid.alive() {
		// It may have written the exit file just before it ended.
		if _, err := os.Stat(filepath.Join(dir, runExit)); err == nil {
			return runEnded(dir)
		}
		return false, end, fmt.Errorf("the run's supervisor (pid %d) is gone without an exit status: the sandbox restarted, or something killed it", pid.pid)
	}
	return false, end, nil
}

// supervisor is the process a run's pid file names: its pid, and when it
// started (so a process that got the same pid after a restart of the
// sandbox is not taken for it; "" in the files of older workers).
type supervisor struct {
	pid   int
	start string
}

// alive says whether the supervisor still runs.
func (s supervisor) alive() bool {
	start, err := procStart(s.pid)
	switch {
	case errors.Is(err, errGone):
		return false
	case err != nil:
		return unix.Kill(s.pid, 0) != unix.ESRCH // no /proc to read: the pid alone
	}
	return s.start == "" || start == s.start
}

func supervisorPID(dir string) (supervisor, error) {
	data, err := os.ReadFile(filepath.Join(dir, runPID))
	if err != nil {
		return supervisor{}, fmt.Errorf("no run in %s: %w", dir, err)
	}
	f := strings.Fields(string(data))
	var s supervisor
	if len(f) > 0 {
		s.pid, err = strconv.Atoi(f[0])
	}
	if len(f) == 0 || len(f) > 2 || err != nil || s.pid <= 1 {
		return supervisor{}, fmt.Errorf("%s: not a pid", filepath.Join(dir, runPID))
	}
	if len(f) == 2 {
		s.start = f[1]
	}
	return s, nil
}

// procStart is when process pid started, in clock ticks after boot (the
// 22nd field of /proc/PID/stat); an error when it does not run.
func procStart(pid int) (string, error) {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return "", errGone
	}
	if err != nil {
		return "", err
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return "", fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return fields[19], nil
}

// errGone: no process has the pid.
var errGone = errors.New("no such process")

// stderrTail copies the last 4 KiB of the run's stderr to stderr.
func (w *worker) stderrTail(dir string) {
	f, err := os.Open(filepath.Join(dir, runStderr))
	if err != nil {
		return
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 4096 {
		f.Seek(st.Size()-4096, io.SeekStart)
	}
	io.Copy(w.p.Stderr, f)
}

func (w *worker) stopCmd() *cobra.Command {
	var dir string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "stop --dir D",
		Short: "Stop a detached run and everything it started, and wait until it has ended",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ended, _, err := runEnded(dir)
			if err != nil {
				fmt.Fprintf(w.p.Stderr, "amelia-worker stop: %v\n", err)
				return exitCode(exitNoRun)
			}
			if ended {
				return nil
			}
			pid, err := supervisorPID(dir)
			if err != nil {
				return err
			}
			if err := unix.Kill(pid.pid, unix.SIGTERM); err != nil && err != unix.ESRCH {
				return fmt.Errorf("stop: signal the supervisor (pid %d): %w", pid.pid, err)
			}
			deadline := time.Now().Add(wait)
			for time.Now().Before(deadline) {
				ended, _, err := runEnded(dir)
				if ended || err != nil {
					return nil
				}
				time.Sleep(followPoll)
			}
			fmt.Fprintf(w.p.Stderr, "amelia-worker stop: the run in %s has not ended after %s\n", dir, wait)
			return exitCode(exitFailed)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the run's directory (required)")
	cmd.Flags().DurationVar(&wait, "wait", time.Minute, "how long to wait for the run to end")
	cmd.MarkFlagRequired("dir")
	return cmd
}

func (w *worker) statusCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status --dir D",
		Short: `Say how a detached run is: {"state":"running"|"ended"|"lost"|"none","code":N}`,
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			st := struct {
				State string `json:"state"`
				Code  *int   `json:"code,omitempty"`
			}{State: "running"}
			ended, end, err := runEnded(dir)
			switch {
			case ended:
				st.State, st.Code = "ended", &end.Code
			case errors.Is(err, os.ErrNotExist): // no pid file: never started
				st.State = "none"
			case err != nil:
				st.State = "lost"
			}
			return json.NewEncoder(w.p.Stdout).Encode(st)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the run's directory (required)")
	cmd.MarkFlagRequired("dir")
	return cmd
}
