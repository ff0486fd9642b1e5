package sdktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Cancel group.

// cancelSlack is how long past its grace period a cancelled exec may take
// to return: time for the signals to reach the sandbox and the exit status
// to come back on a loaded machine. A provider that ignores cancel fails
// when it is over, in seconds rather than after the case's whole Timeout.
const cancelSlack = 20 * time.Second

// ruleCancel is the rule the Cancel group checks, and how to keep it, for
// the failures that show it broken.
const ruleCancel = "rule: when Exec's ctx ends, stop the exec's whole process tree (SIGTERM, SIGKILL after req.Grace()) and return its ExitStatus with Canceled set; " +
	"fix: watch ctx in Exec (hostproc.Process.Wait does it for a local command; shexec.Stopper for a remote one)"

// startBlocking starts script in the background of the test; it must print
// lines the caller reads with the returned reader before cancelling.
func (k *kit) startBlocking(t T, req sdk.ExecRequest) (*lineReader, context.CancelFunc, <-chan result) {
	t.Helper()
	k.notHungBefore(t)
	req.Sandbox = k.sb.Ref
	ctx, cancel := context.WithCancel(k.ctx(t))
	t.Cleanup(cancel)
	outR, outW := io.Pipe()
	done := make(chan result, 1)
	go func() {
		var errb bytes.Buffer
		st, err := k.p.Exec(ctx, req, sdk.ExecIO{Stdout: outW, Stderr: &errb})
		if err != nil {
			err = fmt.Errorf("Exec(%q) after cancel: %w (want an exit status, not an error; stderr %q)", req.Argv, err, errb.String())
		}
		_ = outW.Close()
		done <- result{st: st, err: err}
	}()
	return newLineReader(outR), cancel, done
}

// notHungBefore fails a Cancel case at once when an earlier one saw a
// cancelled exec not end with an exit status: each would otherwise wait
// its bound again, minutes for the group.
func (k *kit) notHungBefore(t T) {
	t.Helper()
	if k.hung.Load() {
		t.Fatalf("not run: an earlier Cancel case saw a cancelled Exec not end with an exit status (%s)", ruleCancel)
	}
}

// awaitCancelled waits for the exec cancelled at cancelled to return, for
// at most bound past that, and fails naming the rule if it does not; an
// error instead of an exit status fails the case too.
func (k *kit) awaitCancelled(t T, done <-chan result, cancelled time.Time, bound time.Duration) result {
	t.Helper()
	timer := time.NewTimer(bound - time.Since(cancelled))
	defer timer.Stop()
	select {
	case r := <-done:
		if r.err != nil {
			// No exit status: the SDK's client gave up waiting for one
			// (a grace period and its slack after the cancel), or the
			// provider returned an error.
			k.hung.Store(true)
			t.Errorf("%v; %s", r.err, ruleCancel)
		}
		checkSignal(t, "the cancelled exec", r.st)
		return r
	case <-timer.C:
		k.hung.Store(true)
		t.Fatalf("Exec has not returned %v after its context was cancelled; %s", bound, ruleCancel)
		return result{}
	}
}

func (k *kit) cancelKillsTree(t T) {
	marker := fmt.Sprintf("cancel-marker-%d", time.Now().UnixNano())
	// The outer shell, a child shell and its sleep form a tree; the child
	// would write the marker if it outlived the cancel.
	k.cancelEndsTree(t, sh(`echo $$; sh -c 'echo $$; sleep 600; echo survived > `+marker+`' & wait`), 2, marker, "the exec")
}

// cancelEndsTree starts req in the shared sandbox, reads the n pids its
// processes print, cancels it, and checks that it ends Canceled and that
// none of those processes is left, nor the marker file they would write
// had they outlived the cancel. what names the exec in what it reports.
func (k *kit) cancelEndsTree(t T, req sdk.ExecRequest, n int, marker, what string) {
	t.Helper()
	lines, cancel, done := k.startBlocking(t, req)
	ctx := k.ctx(t)
	var pids []string
	for range n {
		line, err := lines.next(ctx)
		if err != nil {
			t.Fatalf("read pid: %v", err)
		}
		pids = append(pids, line)
	}
	cancelled := time.Now()
	cancel()
	if r := k.awaitCancelled(t, done, cancelled, req.Grace()+cancelSlack); !r.st.Canceled {
		t.Errorf("exit = %+v, want Canceled; %s", r.st, ruleCancel)
	}
	// Gone, a zombie (dead, not yet reaped) or exiting (PF_EXITING, 0x4 in
	// /proc/PID/stat's flags: killed, its memory released, not yet a
	// zombie) counts as killed. The check runs as the default user, which
	// may not signal the processes of another uid: a process is there while
	// kill -0 reaches it or /proc has it. Without /proc, kill -0 decides.
	check := `for p in ` + strings.Join(pids, " ") + `; do
	  kill -0 $p 2>/dev/null || [ -e /proc/$p ] || continue
	  if st=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null) && [ -n "$st" ]; then
	    set -- $st
	    { [ "$1" = Z ] || [ $(( $7 & 4 )) -ne 0 ]; } && continue
	    echo "alive $p (state $1): $(tr '\000' ' ' </proc/$p/cmdline 2>/dev/null)"
	  elif kill -0 $p 2>/dev/null; then
	    echo "alive $p"
	  fi
	done; test -e ` + marker + ` && echo marker written; true`
	if r := k.run(ctx, t, k.in(k.sb, sh(check)), nil); len(r.stdout) != 0 {
		t.Errorf("after cancelling %s, processes of its tree are still running:\n%s", what, r.stdout)
	}
}

func (k *kit) cancelTermFirst(t T) {
	marker := fmt.Sprintf("term-marker-%d", time.Now().UnixNano())
	req := sh(`trap 'echo term > ` + marker + `; exit 0' TERM; echo ready; while :; do sleep 0.1; done`)
	req.CancelGrace = time.Minute
	lines, cancel, done := k.startBlocking(t, req)
	if line, err := lines.next(k.ctx(t)); err != nil || line != "ready" {
		t.Fatalf("first line = %q, %v; want ready", line, err)
	}
	cancel()
	// The trap ends the process at SIGTERM: the grace period is no part
	// of the wait.
	r := k.awaitCancelled(t, done, time.Now(), cancelSlack)
	if !r.st.Canceled || r.st.Code != 0 {
		t.Errorf("exit = %+v, want Canceled with code 0 (the TERM trap's exit)", r.st)
	}
	if out := k.run(k.ctx(t), t, sh("cat "+marker), nil); string(out.stdout) != "term\n" {
		t.Errorf("the TERM trap did not run before the process ended: marker = %q", out.stdout)
	}
}

func (k *kit) cancelGraceThenKill(t T) {
	const grace = 1500 * time.Millisecond
	req := sh(`trap '' TERM; echo ready; while :; do sleep 0.1; done`)
	req.CancelGrace = grace
	lines, cancel, done := k.startBlocking(t, req)
	if line, err := lines.next(k.ctx(t)); err != nil || line != "ready" {
		t.Fatalf("first line = %q, %v; want ready", line, err)
	}
	cancelled := time.Now()
	cancel()
	r := k.awaitCancelled(t, done, cancelled, grace+cancelSlack)
	// The process ignores TERM, so only SIGKILL ends it, and that must not
	// come before the grace period is over.
	if elapsed := time.Since(cancelled); elapsed < grace {
		t.Errorf("a process ignoring SIGTERM ended %v after cancel, before the %v grace period", elapsed, grace)
	}
	if !r.st.Canceled || r.st.Signal != "KILL" || r.st.Code != 137 {
		t.Errorf("exit = %+v, want Canceled, Code 137 and Signal \"KILL\"; %s", r.st, ruleSignal)
	}
}

// endless is stdin that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'y'
	}
	return len(p), nil
}

// A process that never reads its endless stdin fills every buffer on the way
// and the stream's flow-control window; cancelling must still stop it.
func (k *kit) cancelStdinBlocked(t T) {
	k.notHungBefore(t)
	ctx, cancel := context.WithCancel(k.ctx(t))
	defer cancel()
	const grace = time.Second
	outR, outW := io.Pipe()
	done := make(chan result, 1)
	go func() {
		_, err := k.p.Exec(ctx, sdk.ExecRequest{Sandbox: k.sb.Ref, Argv: []string{"sh", "-c", "echo $$; exec sleep 600"}, CancelGrace: grace},
			sdk.ExecIO{Stdin: endless{}, Stdout: outW})
		_ = outW.Close()
		// An exit status (Canceled) or an error matching
		// context.Canceled are both fine; the process must be gone
		// either way.
		if err != nil && !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("after cancel, Exec returned %w", err)
		} else {
			err = nil
		}
		done <- result{err: err}
	}()
	pid, err := newLineReader(outR).next(ctx)
	if err != nil {
		t.Fatalf("read pid: %v", err)
	}
	cancelled := time.Now()
	cancel()
	k.awaitCancelled(t, done, cancelled, grace+cancelSlack)
	check := `p=` + pid + `; while kill -0 $p 2>/dev/null && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; do sleep 0.05; done; echo gone`
	ctx2, cancel2 := context.WithTimeout(k.ctx(t), 15*time.Second)
	defer cancel2()
	if r := k.run(ctx2, t, sh(check), nil); string(r.stdout) != "gone\n" {
		t.Errorf("the process that ignored its stdin is still running after cancel: %q", r.stdout)
	}
}

func (k *kit) timeout(t T) {
	k.notHungBefore(t)
	req := sh("sleep 600")
	req.Timeout = 300 * time.Millisecond
	req.CancelGrace = time.Second
	ctx := k.ctx(t)
	done := make(chan result, 1)
	started := time.Now()
	go func() {
		var errb bytes.Buffer
		st, err := k.p.Exec(ctx, k.in(k.sb, req), sdk.ExecIO{Stderr: &errb})
		if err != nil {
			err = fmt.Errorf("Exec(%q) past its Timeout: %w (want an exit status, not an error; stderr %q)", req.Argv, err, errb.String())
		}
		done <- result{st: st, err: err}
	}()
	// The Timeout ends the exec as a cancel does.
	r := k.awaitCancelled(t, done, started.Add(req.Timeout), req.Grace()+cancelSlack)
	if !r.st.TimedOut || r.st.Code == 0 {
		t.Errorf("exit = %+v, want TimedOut with a non-zero code", r.st)
	}
}
