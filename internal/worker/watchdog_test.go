package worker_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/lifetime"
	"github.com/amelia-sandbox/amelia/core/workstep"
	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// sandboxDir is a scratch "sandbox": its workdir, the lifetime directory
// in it, and the AMELIA_SANDBOX_DIR its processes carry (the ssh
// provider's tag, which --stop processes ends them by).
type sandboxDir struct {
	root, workdir, lifetime string
	env                     []string
}

func newSandboxDir(t *testing.T) sandboxDir {
	t.Helper()
	root := t.TempDir()
	wd := filepath.Join(root, "workspace")
	if err := os.MkdirAll(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	return sandboxDir{root: root, workdir: wd, lifetime: filepath.Join(wd, lifetime.Dir), env: []string{"AMELIA_SANDBOX_DIR=" + root, "AMELIA_SANDBOX=" + filepath.Base(root)}}
}

// startWatchdog runs `watchdog start` in s with args; the watchdog is
// killed at the test's end should it still run.
func (s sandboxDir) startWatchdog(t *testing.T, args ...string) {
	t.Helper()
	r := runWorker(t, s.env, nil, append([]string{"watchdog", "start", "--dir", s.lifetime, "--poll", "50ms"}, args...)...)
	if r.code != 0 {
		t.Fatalf("watchdog start: exit %d: %s", r.code, r.stderr)
	}
	t.Cleanup(func() {
		pid := s.watchdogPID()
		if cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); pid > 0 && strings.Contains(string(cmdline), s.lifetime) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

func (s sandboxDir) watchdogPID() int {
	data, _ := os.ReadFile(filepath.Join(s.lifetime, lifetime.LockFile))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

// status is what `watchdog status` says.
func (s sandboxDir) status(t *testing.T) lifetime.Status {
	t.Helper()
	r := runWorker(t, nil, nil, "watchdog", "status", "--dir", s.lifetime)
	if r.code != 0 {
		t.Fatalf("watchdog status: exit %d: %s", r.code, r.stderr)
	}
	st, err := lifetime.Parse(r.stdout)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// process starts argv as one of the sandbox's processes (its tag in the
// environment), in dir, killed at the test's end.
func (s sandboxDir) process(t *testing.T, dir string, argv ...string) (*proc, io.WriteCloser) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, s.env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return &proc{pid: cmd.Process.Pid, done: done}, in
}

// proc is a process a test started; done is closed once it was reaped.
type proc struct {
	pid  int
	done chan struct{}
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return syscall.Kill(p.pid, 0) == nil
	}
}

func decided(t *testing.T, s sandboxDir) *lifetime.Decision {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(s.lifetime, lifetime.DecidedFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var d lifetime.Decision
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// An idle sandbox stops by itself: its processes end, it is marked
// stopped, the decision is on record, and what is not the sandbox's
// (no tag) goes on; its files stay.
func TestWatchdogStopsAnIdleSandbox(t *testing.T) {
	s := newSandboxDir(t)
	work := writeFile(t, s.workdir, "kept.txt", "the agent's work")
	idleProc, _ := s.process(t, s.workdir, "sleep", "600")
	other, _ := sandboxDir{}.process(t, s.workdir, "sleep", "600") // no tag: not the sandbox's
	s.startWatchdog(t, "--stop", "processes", "--idle-timeout", "1s", "--max-lifetime", "0")
	if st := s.status(t); st.Watchdog != "running" || st.Reason != lifetime.ReasonIdle || st.StopsAt.IsZero() {
		t.Fatalf("status after start = %+v, want running, stopping when idle", st)
	}
	waitFor(t, "the stop", func() bool { return decided(t, s) != nil && s.status(t).Watchdog == "none" })
	d := decided(t, s)
	if d.Reason != lifetime.ReasonIdle || d.Stop != lifetime.StopProcesses || d.At.Sub(d.Idle) < time.Second {
		t.Errorf("decision = %+v, want idle, processes, at least 1s after the last activity", d)
	}
	waitFor(t, "the sandbox's process to end", func() bool { return !idleProc.alive() })
	if _, err := os.Stat(filepath.Join(s.lifetime, lifetime.StoppedFile)); err != nil {
		t.Errorf("no stopped marker: %v", err)
	}
	if !other.alive() {
		t.Error("a process that is not the sandbox's was ended")
	}
	if got := readFile(t, work); got != "the agent's work" {
		t.Errorf("the work is %q after the stop", got)
	}
	if st := s.status(t); st.Decided == nil || !strings.HasPrefix(st.Describe(time.Now(), time.UTC), "stopped: idle since ") {
		t.Errorf("status after the stop describes as %q", st.Describe(time.Now(), time.UTC))
	}
}

// Work holds the sandbox: a command through `activity` (as sandbox exec
// runs it) is activity for as long as it lives, well past the idle
// timeout; once it ends the idle clock starts.
func TestWatchdogWaitsForWork(t *testing.T) {
	s := newSandboxDir(t)
	s.startWatchdog(t, "--stop", "processes", "--idle-timeout", "1s")
	sub := filepath.Join(s.workdir, "src")
	os.Mkdir(sub, 0o755)
	// Found from the working directory, below the workdir.
	busy, in := s.process(t, sub, workerBin, "activity", "--", "sh", "-c", "read x")
	waitFor(t, "busy", func() bool { return s.status(t).Busy })
	start := s.status(t).Started
	// The watchdog touches the stamp while it finds work: once it is past
	// the idle timeout, the sandbox was busy that long and still runs.
	waitFor(t, "activity past the idle timeout", func() bool { return s.status(t).LastActivity.After(start.Add(1500 * time.Millisecond)) })
	if d := decided(t, s); d != nil || !busy.alive() {
		t.Fatalf("a busy sandbox stopped: %+v", d)
	}
	in.Close()
	waitFor(t, "the stop", func() bool { return decided(t, s) != nil })
	if d := decided(t, s); d.Reason != lifetime.ReasonIdle || d.Idle.Before(start.Add(1500*time.Millisecond)) {
		t.Errorf("decision = %+v, want idle since the work ended", d)
	}
}

// Past max_lifetime a busy sandbox goes on until its work ends, then
// stops at once, however recent the work.
func TestWatchdogMaxLifetime(t *testing.T) {
	s := newSandboxDir(t)
	s.startWatchdog(t, "--stop", "processes", "--idle-timeout", "0", "--max-lifetime", "1s")
	busy, in := s.process(t, s.workdir, workerBin, "activity", "--", "sh", "-c", "read x")
	waitFor(t, "busy", func() bool { return s.status(t).Busy })
	st := s.status(t)
	if st.Reason != lifetime.ReasonLifetime || !st.StopsAt.Equal(st.Started.Add(time.Second)) {
		t.Fatalf("status = %+v, want lifetime 1s after the start", st)
	}
	waitFor(t, "the lifetime to pass while busy", func() bool {
		st := s.status(t)
		return st.LastActivity.After(st.StopsAt.Add(200 * time.Millisecond))
	})
	if d := decided(t, s); d != nil || !busy.alive() {
		t.Fatalf("a busy sandbox stopped: %+v", d)
	}
	if got := s.status(t).Describe(time.Now(), time.UTC); got != "after its work (lifetime)" {
		t.Errorf("describes as %q", got)
	}
	in.Close()
	waitFor(t, "the stop", func() bool { return decided(t, s) != nil })
	if d := decided(t, s); d.Reason != lifetime.ReasonLifetime {
		t.Errorf("decision = %+v, want lifetime", d)
	}
}

// One watchdog per sandbox: a second start leaves the first running and
// hands it the new policy.
func TestWatchdogStartIsIdempotent(t *testing.T) {
	s := newSandboxDir(t)
	s.startWatchdog(t, "--stop", "processes", "--idle-timeout", "1h")
	first := s.watchdogPID()
	s.startWatchdog(t, "--stop", "processes", "--idle-timeout", "2h", "--max-lifetime", "3h")
	if got := s.watchdogPID(); got != first || first <= 0 {
		t.Errorf("the watchdog is pid %d, then %d: want one", first, got)
	}
	st := s.status(t)
	if st.Policy == nil || st.Policy.IdleTimeout != 2*time.Hour || st.Policy.MaxLifetime != 3*time.Hour {
		t.Errorf("policy = %+v, want the second", st.Policy)
	}
	if r := runWorker(t, s.env, nil, "watchdog", "start", "--dir", s.lifetime, "--stop", "reboot"); r.code == 0 || !strings.Contains(string(r.stderr), `unknown way to stop the sandbox "reboot"`) {
		t.Errorf("a bad --stop: exit %d: %s", r.code, r.stderr)
	}
}

// Passive commands are not activity, nor is a mux session; on a session,
// a step is activity while it runs, and so is a command the host runs
// through activity (a plain one is not: TestSessionCommandIsNoActivity).
func TestActivityCounting(t *testing.T) {
	s := newSandboxDir(t)
	s.startWatchdog(t, "--stop", "provider", "--idle-timeout", "1h")
	s.process(t, s.workdir, workerBin, "tunnel", "--listen", "127.0.0.1:0")
	m := muxSession(t, s)
	if st := s.status(t); st.Busy {
		t.Errorf("busy with a tunnel and an idle mux session")
	}
	stamp := func() time.Time {
		st, err := os.Stat(filepath.Join(s.lifetime, lifetime.StampFile))
		if err != nil {
			t.Fatal(err)
		}
		return st.ModTime()
	}
	for _, args := range [][]string{{"version"}, {"status", "--dir", t.TempDir()}, {"watchdog", "status", "--dir", s.lifetime}} {
		before := stamp()
		cmd := exec.Command(workerBin, args...)
		cmd.Dir = s.workdir
		cmd.Run()
		if after := stamp(); !after.Equal(before) {
			t.Errorf("%v touched the activity stamp", args)
		}
	}
	// A step, and a command through activity, are activity while they run.
	dir := t.TempDir()
	args, err := json.Marshal(workstep.WriteFile{Dir: dir, Path: filepath.Join(dir, "f")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		cmd  envelope.Command
	}{
		{"a step", envelope.Command{Step: &envelope.Step{Name: workstep.WriteFile{}.Step(), Args: args}}},
		{"a command through activity", envelope.Command{Argv: []string{workerBin, "activity", "--", "sh", "-c", "read x"}}},
	} {
		before := stamp()
		inR, inW := io.Pipe()
		ran := make(chan error, 1)
		go func() { ran <- runOnSession(t, m, c.cmd, inR) }()
		waitFor(t, "busy with "+c.what+" on the session", func() bool { return s.status(t).Busy })
		inW.Write([]byte("x\n"))
		inW.Close()
		if err := <-ran; err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		waitFor(t, "idle again after "+c.what, func() bool { return !s.status(t).Busy })
		if !stamp().After(before) {
			t.Errorf("%s on the session did not touch the activity stamp", c.what)
		}
	}
	// A worker command that does work is activity too.
	before := stamp()
	cmd := exec.Command(workerBin, "egress-check", "--timeout", "1s", "127.0.0.1:1")
	cmd.Dir = s.workdir
	cmd.Run()
	if !stamp().After(before) {
		t.Error("a worker command doing work did not touch the activity stamp")
	}
}

// A plain command on a mux session is no activity (sandbox ls's shell
// asking the watchdog is one): it finds the busy file free to lock, and
// leaves the stamp alone. The lifetime files are there but no watchdog
// runs, so nothing else tries the lock meanwhile (a watchdog finding it
// taken, by this very check, would count that as activity).
func TestSessionCommandIsNoActivity(t *testing.T) {
	s := newSandboxDir(t)
	if err := os.MkdirAll(s.lifetime, 0o755); err != nil {
		t.Fatal(err)
	}
	busy, stamp := filepath.Join(s.lifetime, lifetime.BusyFile), filepath.Join(s.lifetime, lifetime.StampFile)
	long := time.Unix(1_000_000_000, 0)
	for _, f := range []string{busy, stamp} {
		if err := os.WriteFile(f, nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(stamp, long, long); err != nil {
		t.Fatal(err)
	}
	m := muxSession(t, s)
	if err := runOnSession(t, m, envelope.Command{Argv: []string{"flock", "-xn", busy, "true"}}, nil); err != nil {
		t.Errorf("a plain command on the session held the sandbox busy (flock -xn: %v)", err)
	}
	if st, err := os.Stat(stamp); err != nil {
		t.Fatal(err)
	} else if !st.ModTime().Equal(long) {
		t.Errorf("a plain command on the session touched the activity stamp (now %v)", st.ModTime())
	}
}

// runOnSession runs cmd on m; a failure or an exit other than 0 is an
// error, with what the command said.
func runOnSession(t *testing.T, m *envelope.Mux, cmd envelope.Command, stdin io.Reader) error {
	var stderr strings.Builder
	res, err := m.Run(t.Context(), cmd, envelope.IO{Stdin: stdin, Stdout: io.Discard, Stderr: &stderr}, time.Second)
	if err == nil && res.Code != 0 {
		err = fmt.Errorf("exit %d: %s", res.Code, stderr.String())
	}
	return err
}

// muxSession starts `amelia-worker mux` in s's workdir and returns the
// client end.
func muxSession(t *testing.T, s sandboxDir) *envelope.Mux {
	t.Helper()
	cmd := exec.Command(workerBin, "mux")
	cmd.Dir = s.workdir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, s.env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m, err := envelope.NewMux(stdin, stdout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); stdin.Close(); cmd.Wait() })
	return m
}

// Where the provider stops idle sandboxes itself (Daytona), past its
// lifetime with no work going on the watchdog ends the worker's passive
// sessions, whose connections keep the provider's idle clock going; other
// processes go on.
func TestWatchdogEndsPassiveSessionsPastLifetime(t *testing.T) {
	s := newSandboxDir(t)
	tunnel, _ := s.process(t, s.workdir, workerBin, "tunnel", "--listen", "127.0.0.1:0")
	mux, _ := s.process(t, s.workdir, workerBin, "mux")
	other, _ := s.process(t, s.workdir, "sleep", "600")
	// Another sandbox's session, on the same machine.
	elsewhere := newSandboxDir(t)
	outsider, _ := elsewhere.process(t, elsewhere.workdir, workerBin, "mux")
	s.startWatchdog(t, "--stop", "provider", "--idle-timeout", "0", "--max-lifetime", "1s")
	gone := func(p *proc) bool { return !p.alive() }
	waitFor(t, "the passive sessions to end", func() bool { return gone(tunnel) && gone(mux) })
	if d := decided(t, s); d == nil || d.Reason != lifetime.ReasonLifetime || d.Stop != lifetime.StopByProvider {
		t.Errorf("decision %+v, want lifetime, by the provider", d)
	}
	if !other.alive() || !outsider.alive() {
		t.Error("a process that is no worker session of the sandbox's was ended")
	}
	if st := s.status(t); st.Watchdog != "running" {
		t.Errorf("the watchdog is %s: it keeps the record where the provider stops the sandbox", st.Watchdog)
	}
}
