package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
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

	"github.com/amelia-sandbox/amelia/core/lifetime"
)

// The watchdog stops its sandbox, keeping its filesystem, once the
// profile's sandbox.idle_timeout or sandbox.max_lifetime says so and no
// work goes on (core/lifetime). The host starts it whenever it brings the
// sandbox up (`watchdog start`, idempotent: one per sandbox, by the
// exclusive flock on LockFile); it runs detached, in a session of its
// own, so it holds when the host is gone.
func (w *worker) watchdogCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watchdog start|run|status --dir D",
		Short: "The sandbox's lifetime watchdog: stop it when idle or too old, never while work goes on",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("watchdog needs a command: start, run or status")
		},
	}
	cmd.AddCommand(w.watchdogStartCmd(), w.watchdogRunCmd(), w.watchdogStatusCmd())
	return cmd
}

func (w *worker) watchdogStartCmd() *cobra.Command {
	var dir, stop string
	var idle, maxLife, poll time.Duration
	cmd := &cobra.Command{
		Use:   "start --dir D --stop init|processes|provider [--idle-timeout D] [--max-lifetime D]",
		Short: "Write the policy into D and start the watchdog unless one runs (it reads the new policy)",
		Long: `Write the lifetime policy to D/policy.json and make the files every worker
command marks its activity on, then start the watchdog, detached, unless
one already runs for D: that one takes the new policy. --stop says how it
stops the sandbox: init (signal PID 1, which ends the container), processes
(end every process carrying this process's AMELIA_SANDBOX_DIR, after
writing D/stopped) or provider (the provider stops idle sandboxes itself:
only the record). A duration of 0 is no bound.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			p := lifetime.Policy{IdleTimeout: idle, MaxLifetime: maxLife, Stop: stop, Poll: poll}
			if err := p.Check(); err != nil {
				return fmt.Errorf("watchdog start: %w", err)
			}
			if p.Stop == lifetime.StopProcesses && w.p.Getenv("AMELIA_SANDBOX_DIR") == "" {
				return errors.New("watchdog start: --stop processes needs AMELIA_SANDBOX_DIR, which tags the sandbox's processes")
			}
			return w.watchdogStart(dir, p)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the lifetime directory, the workdir's .amelia/lifetime (required)")
	f.StringVar(&stop, "stop", "", "how to stop the sandbox: init, processes or provider (required)")
	f.DurationVar(&idle, "idle-timeout", 0, "stop after this long without activity (0: never)")
	f.DurationVar(&maxLife, "max-lifetime", 0, "stop this long after the watchdog started, once no work goes on (0: never)")
	f.DurationVar(&poll, "poll", 0, "how often to look (default: a twentieth of the shorter bound, 200ms to 30s)")
	cmd.MarkFlagRequired("dir")
	cmd.MarkFlagRequired("stop")
	return cmd
}

// watchdogStart writes the policy and the activity files, then starts the
// watchdog unless one runs, and waits for its word.
func (w *worker) watchdogStart(dir string, p lifetime.Policy) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("watchdog start: --dir %q: want an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("watchdog start: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("watchdog start: %w", err)
	}
	// Any uid (a run's, on docker) may lock the busy file (read-only is
	// enough for flock) and touch the stamp.
	for name, mode := range map[string]os.FileMode{lifetime.BusyFile: 0o644, lifetime.StampFile: 0o666} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|os.O_CREATE, mode)
		if err != nil {
			return fmt.Errorf("watchdog start: %w", err)
		}
		f.Close()
		if err := os.Chmod(filepath.Join(dir, name), mode); err != nil {
			return fmt.Errorf("watchdog start: %w", err)
		}
	}
	data, _ := json.Marshal(p)
	if err := atomicwriter.WriteFile(filepath.Join(dir, lifetime.PolicyFile), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("watchdog start: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("watchdog start: find amelia-worker: %w", err)
	}
	// Where sandbox ls finds a worker to ask for the status.
	if err := atomicwriter.WriteFile(filepath.Join(dir, lifetime.WorkerFile), []byte(self+"\n"), 0o644); err != nil {
		return fmt.Errorf("watchdog start: %w", err)
	}
	if watchdogRunning(dir) {
		return nil // it reads the policy again as it goes
	}
	log, err := os.OpenFile(filepath.Join(dir, lifetime.LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("watchdog start: %w", err)
	}
	defer log.Close()
	msg, ended, err := startDetached([]string{self, "watchdog", "run", "--dir", dir}, dir, log, os.Environ())
	if err != nil {
		return fmt.Errorf("watchdog start: %w", err)
	}
	if ended == nil {
		return nil
	}
	if msg == "" {
		msg = "the watchdog exited before it ran; see " + filepath.Join(dir, lifetime.LogFile)
	}
	return fmt.Errorf("watchdog start: %s", msg)
}

// watchdogRunning says whether a watchdog holds dir's lock.
func watchdogRunning(dir string) bool {
	f, err := os.Open(filepath.Join(dir, lifetime.LockFile))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	return false
}

func (w *worker) watchdogRunCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "run --dir D",
		Short:  "The watchdog start starts (not for direct use)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			syscall.CloseOnExec(3)
			ready := os.NewFile(3, "ready")
			defer ready.Close()
			wd, err := w.newWatchdog(dir)
			if errors.Is(err, errWatchdogRuns) {
				io.WriteString(ready, "ok\n") // another start won: it runs
				return nil
			}
			if err != nil {
				fmt.Fprintf(ready, "%v\n", err)
				return exitCode(exitFailed)
			}
			io.WriteString(ready, "ok\n")
			ready.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
			defer stop()
			return wd.run(ctx)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the lifetime directory")
	cmd.MarkFlagRequired("dir")
	return cmd
}

var errWatchdogRuns = errors.New("a watchdog runs already")

// watchdog is a running watchdog.
type watchdog struct {
	w       *worker
	dir     string
	lock    *os.File // held exclusively for its life
	busy    *os.File // the busy file, to test its lock
	started time.Time
	now     func() time.Time
	decided bool // a decision is on record (StopByProvider)
}

func (w *worker) newWatchdog(dir string) (*watchdog, error) {
	lock, err := os.OpenFile(filepath.Join(dir, lifetime.LockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, errWatchdogRuns
	}
	// The lock file names the running watchdog.
	lock.Truncate(0)
	lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	busy, err := os.Open(filepath.Join(dir, lifetime.BusyFile))
	if err != nil {
		lock.Close()
		return nil, err
	}
	wd := &watchdog{w: w, dir: dir, lock: lock, busy: busy, started: time.Now(), now: time.Now}
	// The sandbox runs again: it is not stopped (StopProcesses).
	os.Remove(filepath.Join(dir, lifetime.StoppedFile))
	if err := atomicwriter.WriteFile(filepath.Join(dir, lifetime.StartedFile), []byte(wd.started.UTC().Format(time.RFC3339Nano)+"\n"), 0o644); err != nil {
		wd.close()
		return nil, err
	}
	// Its lifetime starts now; so does its idle clock.
	touch(dir)
	return wd, nil
}

func (wd *watchdog) close() {
	wd.busy.Close()
	wd.lock.Close()
}

// run looks every PollEvery until it has stopped the sandbox, or ctx ends.
func (wd *watchdog) run(ctx context.Context) error {
	defer wd.close()
	log := wd.w.log.With("dir", wd.dir)
	log.Info("watchdog started")
	for {
		p, err := readPolicy(wd.dir)
		if errors.Is(err, os.ErrNotExist) {
			log.Info("watchdog done: its directory is gone (the sandbox was removed)")
			return nil
		}
		if err != nil {
			log.Error("read the policy", "err", err)
			p = lifetime.Policy{Stop: lifetime.StopByProvider, Poll: 10 * time.Second}
		}
		stopped, err := wd.look(p)
		if err != nil {
			log.Error("stop the sandbox", "err", err)
		}
		if stopped {
			log.Info("watchdog done: the sandbox is stopped")
			return nil
		}
		select {
		case <-ctx.Done():
			log.Info("watchdog ended by a signal")
			return nil
		case <-time.After(p.PollEvery()):
		}
	}
}

// look decides once: a busy sandbox is active now; an idle one stops
// when the policy says. stopped: the watchdog's work is over.
func (wd *watchdog) look(p lifetime.Policy) (stopped bool, err error) {
	now := wd.now()
	if isBusy(wd.busy) {
		touch(wd.dir)
		return false, nil
	}
	last := lastActivity(wd.dir, wd.started)
	_, reason, due := p.Next(now, wd.started, last, false)
	if !due {
		return false, nil
	}
	if p.Stop == lifetime.StopByProvider && reason == lifetime.ReasonLifetime {
		// The provider stops it once idle by its own measure, which
		// outside connections keep resetting: past its lifetime, with no
		// work going on, the worker's passive sessions end, and with them
		// the connections that carried them.
		endPassiveSessions(wd.w)
	}
	if p.Stop == lifetime.StopByProvider && wd.decided {
		return false, nil // the provider stops it: recorded once
	}
	// Exclusively locked from here: work that starts now waits, and dies
	// with the sandbox, or goes on if stopping fails.
	if err := unix.Flock(int(wd.busy.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return false, nil // work began meanwhile
	}
	defer unix.Flock(int(wd.busy.Fd()), unix.LOCK_UN)
	d := lifetime.Decision{Reason: reason, At: now.UTC(), Idle: last.UTC(), Policy: p, Stop: p.Stop}
	data, _ := json.Marshal(d)
	if err := atomicwriter.WriteFile(filepath.Join(wd.dir, lifetime.DecidedFile), append(data, '\n'), 0o644); err != nil {
		return false, err
	}
	wd.w.log.Info("stopping the sandbox", "reason", reason, "idle_since", last, "how", p.Stop)
	wd.decided = true
	switch p.Stop {
	case lifetime.StopInit:
		return stopInit()
	case lifetime.StopProcesses:
		return wd.stopProcesses()
	}
	return false, nil
}

// isBusy says whether a worker command holds busy's shared lock.
func isBusy(busy *os.File) bool {
	if err := unix.Flock(int(busy.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	unix.Flock(int(busy.Fd()), unix.LOCK_UN)
	return false
}

// lastActivity is the stamp's mtime, or since when there is none.
func lastActivity(dir string, since time.Time) time.Time {
	st, err := os.Stat(filepath.Join(dir, lifetime.StampFile))
	if err != nil || st.ModTime().Before(since) {
		return since
	}
	return st.ModTime()
}

// stopInit signals PID 1, an init (tini) that ends the container when its
// child does; it has no default action, so only a handled signal stops
// it. It waits for the end, which it does not see.
func stopInit() (bool, error) {
	comm, _ := os.ReadFile("/proc/1/comm")
	if err := unix.Kill(1, unix.SIGTERM); err != nil {
		return false, fmt.Errorf("signal PID 1 (%s): %w", strings.TrimSpace(string(comm)), err)
	}
	time.Sleep(time.Minute)
	return false, fmt.Errorf("PID 1 (%s) did not end the sandbox after SIGTERM", strings.TrimSpace(string(comm)))
}

// stopProcesses marks the sandbox stopped, then ends every process that
// carries this process's AMELIA_SANDBOX_DIR, SIGTERM then SIGKILL.
func (wd *watchdog) stopProcesses() (bool, error) {
	sandboxDir := wd.w.p.Getenv("AMELIA_SANDBOX_DIR")
	if sandboxDir == "" {
		// Without it, the sandbox's processes cannot be told from others'.
		return false, errors.New("end the sandbox's processes: AMELIA_SANDBOX_DIR is not set, so they cannot be told apart; nothing was stopped")
	}
	entry := "AMELIA_SANDBOX_DIR=" + sandboxDir
	if err := atomicwriter.WriteFile(filepath.Join(wd.dir, lifetime.StoppedFile), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return false, err
	}
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		procs := processesWith(entry)
		for _, p := range procs {
			unix.Kill(p, sig)
		}
		if len(procs) == 0 {
			break
		}
		if sig == unix.SIGTERM {
			time.Sleep(2 * time.Second)
		}
	}
	return true, nil
}

// processesWith lists the processes, other than this one, whose
// environment holds entry.
func processesWith(entry string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == 1 {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for kv := range strings.SplitSeq(string(env), "\x00") {
			if kv == entry {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

func readPolicy(dir string) (lifetime.Policy, error) {
	var p lifetime.Policy
	data, err := os.ReadFile(filepath.Join(dir, lifetime.PolicyFile))
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("%s: %w", filepath.Join(dir, lifetime.PolicyFile), err)
	}
	return p, p.Check()
}

func (w *worker) watchdogStatusCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status --dir D",
		Short: "Say, as JSON, when the sandbox stops and why (not activity)",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			return json.NewEncoder(w.p.Stdout).Encode(watchdogStatus(dir, time.Now()))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the lifetime directory (required)")
	cmd.MarkFlagRequired("dir")
	return cmd
}

// watchdogStatus is what dir says of its sandbox at now.
func watchdogStatus(dir string, now time.Time) lifetime.Status {
	st := lifetime.Status{Watchdog: "none"}
	if data, err := os.ReadFile(filepath.Join(dir, lifetime.DecidedFile)); err == nil {
		var d lifetime.Decision
		if json.Unmarshal(data, &d) == nil {
			st.Decided = &d
		}
	}
	if !watchdogRunning(dir) {
		return st
	}
	st.Watchdog = "running"
	if p, err := readPolicy(dir); err == nil {
		st.Policy = &p
	}
	if data, err := os.ReadFile(filepath.Join(dir, lifetime.StartedFile)); err == nil {
		st.Started, _ = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data)))
	}
	st.LastActivity = lastActivity(dir, st.Started)
	if f, err := os.Open(filepath.Join(dir, lifetime.BusyFile)); err == nil {
		st.Busy = isBusy(f)
		f.Close()
	}
	if st.Policy != nil {
		st.StopsAt, st.Reason, _ = st.Policy.Next(now, st.Started, st.LastActivity, st.Busy)
	}
	return st
}

// passiveSessions are the worker commands that last as long as their
// client without doing work of their own while no command runs.
var passiveSessions = []string{"tunnel", "mux", "serve", "follow"}

// endPassiveSessions kills this sandbox's amelia-worker processes that
// serve a passive session (there is no work going on: none of them runs
// a command). They are the sandbox's by the AMELIA_SANDBOX entry of their
// environment, which is this process's: without one, nothing is ended.
// SIGKILL: a session's worker does not end on SIGTERM while its client
// is there.
func endPassiveSessions(w *worker) {
	name := w.p.Getenv("AMELIA_SANDBOX")
	if name == "" {
		return
	}
	self := os.Getpid()
	for _, pid := range processesWith("AMELIA_SANDBOX=" + name) {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || pid == self {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if len(argv) < 2 || !strings.HasPrefix(filepath.Base(argv[0]), "amelia-worker") || !slices.Contains(passiveSessions, argv[1]) {
			continue
		}
		if unix.Kill(pid, unix.SIGKILL) == nil {
			w.log.Info("past its lifetime: ended a passive session", "pid", pid, "command", argv[1])
		}
	}
}
