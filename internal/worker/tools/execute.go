//go:build unix

package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// drainTimeout bounds how long execute keeps reading output after the
// command's process group is dead: a process that left the group (setsid,
// its own job control) may hold the pipe open for ever.
const drainTimeout = time.Second

// execHalf is how many bytes of output execute keeps from each end.
const execHalf = (MaxOutputChars - outputReserve) / 2

func (s *Set) execute(ctx context.Context, raw json.RawMessage) Result {
	var a struct {
		Command *string  `json:"command"`
		Timeout *float64 `json:"timeout"`
	}
	if err := decodeArgs(raw, &a); err != nil {
		return failure(err)
	}
	if a.Command == nil {
		return failure(missing("command"))
	}
	if strings.TrimSpace(*a.Command) == "" {
		return errorf("command is empty; give a shell command to run")
	}
	timeout := s.defaultTimeout
	if a.Timeout != nil {
		if !(*a.Timeout > 0) {
			return errorf("timeout must be a positive number of seconds, not %v", *a.Timeout)
		}
		timeout = time.Duration(min(*a.Timeout, s.maxTimeout.Seconds()) * float64(time.Second))
	}
	if err := ctx.Err(); err != nil {
		return errorf("command not run: the run was cancelled (%v)", context.Cause(ctx))
	}
	return s.run(ctx, *a.Command, timeout)
}

// run runs command with bash in the working directory, its output (stdout
// and stderr together) bounded, and kills its process group when it ends,
// times out or ctx is done.
func (s *Set) run(ctx context.Context, command string, timeout time.Duration) Result {
	start := time.Now()
	pr, pw, err := os.Pipe()
	if err != nil {
		return errorf("could not run the command: create output pipe: %v", err)
	}
	defer pr.Close()
	cmd := exec.Command("bash", "-lc", command)
	cmd.Dir = s.cwd
	cmd.Stdout = pw // an *os.File: the child writes to it directly
	cmd.Stderr = pw
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	pw.Close()
	if err != nil {
		return errorf("could not run the command: start bash: %v", err)
	}

	out := &headTail{half: execHalf}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		_, _ = io.Copy(out, pr) // ends at EOF, or with an error once drain closes pr
	}()
	w := startWaiter(cmd)

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut bool
	var cancelled error
	select {
	case <-w.exited:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		cancelled = context.Cause(ctx)
	}
	// Kill the whole group: on a timeout or cancellation everything; after
	// a normal exit, the background jobs the command left behind. On Linux
	// bash is not reaped yet, so its pid, the group's id, cannot have been
	// reused by an unrelated process.
	killGroup(cmd.Process.Pid)
	waitErr := w.reap()
	drained := drain(pr, readDone)

	res := Result{Output: out.String()}
	if res.Output == "" {
		res.Output = "(no output)"
	}
	if !strings.HasSuffix(res.Output, "\n") {
		res.Output += "\n"
	}
	if !drained {
		res.Output += "[stopped reading output: a background process that left the command's process group still holds it open]\n"
	}
	status, failed := exitStatus(cmd, waitErr, timedOut, cancelled, timeout)
	res.Output += status
	res.IsError = failed
	s.log.Debug("execute", "command", command, "status", status, "duration", time.Since(start))
	return res
}

// drain waits for the output reader to finish, for at most drainTimeout;
// it reports whether the output was read to its end.
func drain(pr *os.File, readDone <-chan struct{}) bool {
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-readDone:
		return true
	case <-t.C:
		pr.Close() // unblocks the reader
		<-readDone
		return false
	}
}

// exitStatus is the status line for a finished command and whether it
// counts as an error; cancelled is the cause if the run was cancelled.
func exitStatus(cmd *exec.Cmd, waitErr error, timedOut bool, cancelled error, timeout time.Duration) (string, bool) {
	switch {
	case cancelled != nil:
		return fmt.Sprintf("[Command cancelled (%v) and was killed]", cancelled), true
	case timedOut:
		return fmt.Sprintf("[Command timed out after %ss and was killed]", strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64)), true
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return fmt.Sprintf("[Command status unknown: %v]", waitErr), true
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("[Command was killed by signal %d (%v)]", int(ws.Signal()), ws.Signal()), true
	}
	code := cmd.ProcessState.ExitCode()
	if code == 0 {
		return "[Command succeeded with exit code 0]", false
	}
	return fmt.Sprintf("[Command failed with exit code %d]", code), true
}

// killGroup sends SIGKILL to the process group pgid.
func killGroup(pgid int) {
	// ESRCH (nothing left) is the usual outcome after a clean exit.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// waiter waits for a started command: exited is closed once it has exited
// and reap collects it. Where the platform can, exited is closed before the
// process is reaped, so that its process group can still be killed safely.
type waiter struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	reaped  bool  // set before exited is closed
	waitErr error // cmd.Wait's result if reaped
}

func startWaiter(cmd *exec.Cmd) *waiter {
	w := &waiter{cmd: cmd, exited: make(chan struct{})}
	go func() {
		defer close(w.exited)
		if err := waitExited(cmd.Process.Pid); err != nil {
			w.waitErr, w.reaped = cmd.Wait(), true
		}
	}()
	return w
}

// reap waits for the command to exit and collects it.
func (w *waiter) reap() error {
	<-w.exited
	if w.reaped {
		return w.waitErr
	}
	return w.cmd.Wait()
}

// headTail keeps the first and the last half bytes written to it and
// counts the rest.
type headTail struct {
	half  int
	head  []byte
	tail  []byte
	total int
}

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += n
	if room := h.half - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) > 0 {
		h.tail = append(h.tail, p...)
		if len(h.tail) > 2*h.half {
			h.tail = append(h.tail[:0], h.tail[len(h.tail)-h.half:]...)
		}
	}
	return n, nil
}

// String is the output, with a marker in place of the bytes dropped from
// the middle.
func (h *headTail) String() string {
	head, tail := h.head, h.tail
	if len(tail) > h.half {
		tail = tail[len(tail)-h.half:]
	}
	if len(head)+len(tail) == h.total {
		return string(head) + string(tail)
	}
	// Cut at character boundaries rather than leave broken characters.
	if i := lastRuneStart(head); i >= 0 && !utf8.FullRune(head[i:]) {
		head = head[:i]
	}
	for k := 0; k < utf8.UTFMax-1 && len(tail) > 0 && !utf8.RuneStart(tail[0]); k++ {
		tail = tail[1:]
	}
	omitted := h.total - len(head) - len(tail)
	return fmt.Sprintf("%s\n[... %d bytes of output omitted ...]\n%s", head, omitted, tail)
}

// lastRuneStart is the index of the start of b's last character, or -1.
func lastRuneStart(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			return i
		}
	}
	return -1
}
