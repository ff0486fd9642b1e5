package sdktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The Exec group: the shared sandbox runs them all.

func (k *kit) streamsApart(t T) {
	r := k.run(k.ctx(t), t, sh("echo out; echo err >&2; echo out2; exit 43"), nil)
	if r.st.Code != 43 || r.st.Signal != "" || r.st.Canceled {
		t.Errorf("exit = %+v, want code 43", r.st)
	}
	if string(r.stdout) != "out\nout2\n" {
		t.Errorf("stdout = %q, want %q", r.stdout, "out\nout2\n")
	}
	if string(r.stderr) != "err\n" {
		t.Errorf("stderr = %q, want %q", r.stderr, "err\n")
	}
	if r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"true"}}, nil); r.st != (sdk.ExitStatus{}) {
		t.Errorf("true: exit = %+v, want code 0", r.st)
	}
}

func (k *kit) envAndWorkdir(t T) {
	req := sh(`printf '%s|%s' "$AMELIA_SDKTEST" "$(pwd -P)"`)
	req.Env = map[string]string{"AMELIA_SDKTEST": "a b'c"}
	r := k.run(k.ctx(t), t, req, nil)
	got := strings.SplitN(string(r.stdout), "|", 2)
	if len(got) != 2 || got[0] != "a b'c" {
		t.Fatalf("env: stdout = %q, want the variable's value %q first", r.stdout, "a b'c")
	}
	wd := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"sh", "-c", "cd " + shellQuote(k.sb.Workdir) + " && pwd -P"}}, nil)
	if got[1] != strings.TrimSpace(string(wd.stdout)) {
		t.Errorf("default working directory = %q, want the workdir %q", got[1], k.sb.Workdir)
	}
	k.run(k.ctx(t), t, sh("mkdir -p sub"), nil)
	req = sdk.ExecRequest{Argv: []string{"sh", "-c", "pwd -P"}, Dir: k.sb.Workdir + "/sub"}
	if r := k.run(k.ctx(t), t, req, nil); !strings.HasSuffix(strings.TrimSpace(string(r.stdout)), "/sub") {
		t.Errorf("Dir %q: pwd = %q", req.Dir, r.stdout)
	}
}

// ruleExitStatus is the rule about a command's non-zero exit, and how to
// keep it, for the failures that show it broken.
const ruleExitStatus = "rule: a command that ran and exited non-zero is an ExitStatus{Code: N} with a nil error; an error means the exec could not run, or its end was lost; " +
	"fix: return the code in the ExitStatus (hostproc.Run does; an *exec.ExitError, an *ssh.ExitError or a remote API's exit code is a status, not an error)"

func (k *kit) nonZeroExit(t T) {
	for _, code := range []int{1, 3, 126, 255} {
		var errb bytes.Buffer
		st, err := k.p.Exec(k.ctx(t), k.in(k.sb, sh(fmt.Sprintf("exit %d", code))), sdk.ExecIO{Stderr: &errb})
		switch {
		case err != nil:
			t.Errorf("sh -c 'exit %d': Exec returned the error %q, want ExitStatus{Code: %d} and no error; %s", code, err, code, ruleExitStatus)
		case st != (sdk.ExitStatus{Code: code}):
			t.Errorf("sh -c 'exit %d': exit %+v, want ExitStatus{Code: %d}", code, st, code)
		}
	}
}

// unknownCommandName is a command no sandbox has.
const unknownCommandName = "amelia-sdktest-no-such-command"

// ruleUnknownCommand is the rule about a command that does not exist, and
// how to keep it, for the failures that show it broken.
const ruleUnknownCommand = "rule: a command that does not exist exits 127, as in a shell, and stderr names it and says it was not found; " +
	"fix: run it through a shell or exec that reports it so, or turn the start error into that status (hostproc.StartFailed)"

// notFoundWordings are what a shell or an exec says of a command it cannot
// find, after the command's name: bash's "command not found", dash's and
// busybox's "not found", execve's "No such file or directory" (env,
// nsenter, bwrap), runc's and Go's "executable file not found in $PATH".
var notFoundWordings = []string{"not found", "no such file or directory"}

// saysNotFound reports whether stderr names the command and says it was
// not found, in any of the wordings a real shell or exec uses.
func saysNotFound(stderr, command string) bool {
	lower := strings.ToLower(stderr)
	i := strings.Index(lower, strings.ToLower(command))
	if i < 0 {
		return false
	}
	after := lower[i+len(command):]
	for _, w := range notFoundWordings {
		if strings.Contains(after, w) {
			return true
		}
	}
	return false
}

func (k *kit) unknownCommand(t T) {
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{unknownCommandName}}, nil)
	if r.st.Code != 127 {
		t.Errorf("unknown command: exit = %+v, want code 127; %s", r.st, ruleUnknownCommand)
	}
	// What the user reads: the command's name and why, as a shell or an
	// exec says it, not the provider's own plumbing.
	if !saysNotFound(string(r.stderr), unknownCommandName) {
		t.Errorf("unknown command: stderr %q, want the command's name followed by %q (as in %q or %q); %s",
			r.stderr, notFoundWordings, unknownCommandName+": command not found", `exec: "`+unknownCommandName+`": executable file not found in $PATH`, ruleUnknownCommand)
	}
}

func (k *kit) firstLineBeforeExit(t T) {
	ctx := k.ctx(t)
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan result, 1)
	go func() {
		var errb bytes.Buffer
		st, err := k.p.Exec(ctx, sdk.ExecRequest{Sandbox: k.sb.Ref, Argv: []string{"sh", "-c", "echo first; read x; echo second $x"}},
			sdk.ExecIO{Stdin: stdinR, Stdout: outW, Stderr: &errb})
		outW.CloseWithError(err)
		done <- result{st: st}
	}()
	lines := newLineReader(outR)
	// The process is blocked on stdin until after this line is read, so the
	// line can only arrive here if output streams while the process runs.
	if line, err := lines.next(ctx); err != nil || line != "first" {
		t.Fatalf("first line = %q, %v; want \"first\" before the process exits", line, err)
	}
	_, _ = io.WriteString(stdinW, "go\n")
	_ = stdinW.Close()
	if line, err := lines.next(ctx); err != nil || line != "second go" {
		t.Fatalf("second line = %q, %v; want \"second go\"", line, err)
	}
	if r := <-done; r.st.Code != 0 {
		t.Errorf("exit = %+v, want 0", r.st)
	}
}

func (k *kit) stdin(t T) {
	in := "hello\x00world\nno newline at the end"
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"cat"}}, strings.NewReader(in))
	if string(r.stdout) != in || r.st.Code != 0 {
		t.Errorf("cat: stdout = %q exit %+v, want %q exit 0", r.stdout, r.st, in)
	}
}

func (k *kit) noStdin(t T) {
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"cat"}}, nil)
	if len(r.stdout) != 0 || r.st.Code != 0 {
		t.Errorf("cat without stdin: stdout = %q exit %+v, want nothing and 0", r.stdout, r.st)
	}
}

const eightMiB = 8 << 20

func (k *kit) largeOutput(t T) {
	r := k.run(k.ctx(t), t, sh("head -c 8388608 /dev/zero | tr '\\000' x"), nil)
	if len(r.stdout) != eightMiB || bytes.Count(r.stdout, []byte("x")) != eightMiB {
		t.Errorf("got %d bytes of output (%d of them 'x'), want %d x's", len(r.stdout), bytes.Count(r.stdout, []byte("x")), eightMiB)
	}
}

// Five MiB of stderr, between lines of stdout, comes back whole: a
// transport that drops stderr, or stops reading it while the command
// still writes (an SSH hop that never reads extended data hangs once its
// window of about 2 MiB is full), fails here.
func (k *kit) largeStderr(t T) {
	r := k.run(k.ctx(t), t, sh(`i=0; while [ $i -lt 80 ]; do head -c 65536 /dev/zero | tr '\000' e >&2; echo $i; i=$((i+1)); done`), nil)
	var lines strings.Builder
	for i := range 80 {
		fmt.Fprintf(&lines, "%d\n", i)
	}
	if len(r.stderr) != 5<<20 || bytes.Count(r.stderr, []byte("e")) != 5<<20 || string(r.stdout) != lines.String() || r.st.Code != 0 {
		t.Errorf("got %d bytes of stderr (%d of them 'e'), %d of stdout, exit %+v; want %d e's and the 80 lines", len(r.stderr), bytes.Count(r.stderr, []byte("e")), len(r.stdout), r.st, 5<<20)
	}
}

func (k *kit) largeStdin(t T) {
	in := make([]byte, eightMiB+123)
	_, _ = rand.Read(in)
	r := k.run(k.ctx(t), t, sdk.ExecRequest{Argv: []string{"cat"}}, bytes.NewReader(in))
	if !bytes.Equal(r.stdout, in) {
		t.Errorf("8 MiB of random bytes through cat: got %d bytes back, equal=%v", len(r.stdout), bytes.Equal(r.stdout, in))
	}
}

func (k *kit) binaryOutput(t T) {
	r := k.run(k.ctx(t), t, sh(`printf 'a\000b\377\r\nc'; printf 'e\001' >&2`), nil)
	if want := "a\x00b\xff\r\nc"; string(r.stdout) != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	if want := "e\x01"; string(r.stderr) != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
}

func (k *kit) concurrent(t T) {
	const n, lines = 16, 300
	ctx := k.ctx(t)
	var wg sync.WaitGroup
	results := make([]result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var out, errb bytes.Buffer
			script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "exec-%d line-$i"; i=$((i+1)); done; echo "err-%d" >&2; exit %d`, lines, i, i, i)
			st, err := k.p.Exec(ctx, sdk.ExecRequest{Sandbox: k.sb.Ref, Argv: []string{"sh", "-c", script}}, sdk.ExecIO{Stdout: &out, Stderr: &errb})
			results[i], errs[i] = result{st: st, stdout: out.Bytes(), stderr: errb.Bytes()}, err
		})
	}
	wg.Wait()
	for i, r := range results {
		if errs[i] != nil {
			t.Errorf("exec %d: %v", i, errs[i])
			continue
		}
		var want strings.Builder
		for j := range lines {
			fmt.Fprintf(&want, "exec-%d line-%d\n", i, j)
		}
		if string(r.stdout) != want.String() {
			t.Errorf("exec %d: stdout is not exactly its own %d lines (got %d bytes)", i, lines, len(r.stdout))
		}
		if string(r.stderr) != fmt.Sprintf("err-%d\n", i) || r.st.Code != i {
			t.Errorf("exec %d: stderr %q exit %+v", i, r.stderr, r.st)
		}
	}
}

// ruleDetached is the rule about what an exec leaves running, and how to
// keep it, for the failures that show it broken.
const ruleDetached = "rule: all execs of a sandbox share one pid namespace, and a process an exec leaves in the background (in a session of its own, as amelia-worker detach does) lives on after the exec returns, until Teardown; " +
	"fix: run every exec in the sandbox's one namespace (docker exec or kubectl exec into its one container, nsenter --target its init), and kill an exec's process tree on cancel only, never when it returns"

// detachedOutlivesExec: a process one exec starts in a session of its own
// is still running, and seen under the same pid, from the next exec.
func (k *kit) detachedOutlivesExec(t T) {
	start := `if command -v setsid >/dev/null 2>&1; then setsid sleep 600 </dev/null >/dev/null 2>&1 &
	else sleep 600 </dev/null >/dev/null 2>&1 & fi; echo $!`
	r := k.run(k.ctx(t), t, sh(start), nil)
	pid := strings.TrimSpace(string(r.stdout))
	if r.st.Code != 0 || pid == "" || strings.Trim(pid, "0123456789") != "" {
		t.Fatalf("starting a detached sleep: stdout %q stderr %q exit %+v, want its pid", r.stdout, r.stderr, r.st)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), k.cfg.Timeout)
		defer cancel()
		_, _ = k.p.Exec(ctx, k.in(k.sb, sh("kill -9 "+pid)), sdk.ExecIO{})
	})
	// A zombie (killed, not yet reaped) is gone too.
	check := `p=` + pid + `; st=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null) || st=
	set -- $st; if [ -z "$1" ] || [ "$1" = Z ]; then echo gone; else tr '\000' ' ' </proc/$p/cmdline; echo; fi`
	r = k.run(k.ctx(t), t, sh(check), nil)
	// setsid, not a group leader here, becomes sleep in the same process
	// (execve), which may not have happened yet on a busy machine.
	got := strings.TrimSpace(string(r.stdout))
	if !strings.HasPrefix(got, "sleep 600") && !strings.Contains(got, "/sleep 600") && !strings.HasPrefix(got, "setsid sleep 600") {
		what := "another process has its pid (" + got + ")"
		if got == "gone" {
			what = "it is gone"
		}
		t.Errorf("a sleep an exec left running in its own session, pid %s, is not there for the next exec: %s; %s", pid, what, ruleDetached)
	}
}
