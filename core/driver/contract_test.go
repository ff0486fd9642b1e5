package driver_test

import (
	"context"
	"errors"
	"iter"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Lines a fake worker writes.
const (
	thinkingLine = `{"type":"thinking","content":"hmm","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":"m","usage":null}`
	resultLine   = `{"type":"result","content":"all done","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":"m","usage":null}`
	failLine     = `{"type":"result","content":"it broke","tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":true,"model":"m","usage":null}`
	usageLine    = `{"type":"usage","content":null,"tool_name":null,"tool_input":null,"tool_output":null,"tool_call_id":null,"session_id":null,"is_error":false,"model":"m","usage":{"input_tokens":7,"output_tokens":3,"cache_read_tokens":null,"cache_creation_tokens":null,"cost_usd":null,"duration_ms":5,"num_turns":1,"model":"m"}}`
)

// fakeDriver is a Driver on a fresh local sandbox whose worker is script.
// The script gets $PIDFILE to write its pid to. Scripts that must be
// stopped end in `exec sleep 3600`: one the driver failed to stop would
// hold the test past go test's timeout, so no clock is needed to tell.
func fakeDriver(t *testing.T, script string) (*driver.Driver, *sandboxtest.Sandbox, string) {
	t.Helper()
	sb := sandboxtest.New(t, "fake")
	pid := pidFile(t)
	return &driver.Driver{
		Exec:     sb,
		Worker:   fakeWorker(t, script),
		Provider: "local",
		Env:      map[string]string{"PIDFILE": pid},
	}, sb, pid
}

// run collects everything an ExecuteAgentic of "Do it." in the sandbox's
// workdir yields (see collect).
func run(t *testing.T, d *driver.Driver, ctx context.Context, wf string, sb *sandboxtest.Sandbox) ([]protocol.AgenticMessage, error) {
	t.Helper()
	return collect(t, d.ExecuteAgentic(ctx, driver.AgenticRequest{Workflow: wf, Prompt: "Do it.", Cwd: sb.Workdir, Model: "m"}), nil)
}

// collect reads seq to its end: the messages, and the error, which must
// come last (anything yielded after it fails the test). each, when not nil,
// sees every message as it arrives.
func collect(t *testing.T, seq iter.Seq2[protocol.AgenticMessage, error], each func(protocol.AgenticMessage)) ([]protocol.AgenticMessage, error) {
	t.Helper()
	var msgs []protocol.AgenticMessage
	var last error
	for m, err := range seq {
		if last != nil {
			t.Errorf("yielded after the error %v", last)
		}
		if err != nil {
			last = err
			continue
		}
		msgs = append(msgs, m)
		if each != nil {
			each(m)
		}
	}
	return msgs, last
}

func types(msgs []protocol.AgenticMessage) string {
	var s []string
	for _, m := range msgs {
		s = append(s, string(m.Type))
	}
	return strings.Join(s, ",")
}

// The prompt reaches the worker in a private file that exists only while
// it runs.
func TestPromptFile(t *testing.T) {
	// The fake reports the prompt file's mode, its directory's and its
	// content as thinking lines, then succeeds.
	d, sb, _ := fakeDriver(t, `
[ "$2" = --prompt-file ] || { echo "argv: $*" >&2; exit 2; }
printf '{"type":"thinking","content":"%s %s %s"}\n' "$(stat -c %a "$3")" "$(stat -c %a "$(dirname "$3")")" "$(cat "$3")"
echo '`+resultLine+`'`)
	wf := workflowID(t)
	msgs, err := run(t, d, t.Context(), wf, sb)
	if err != nil {
		t.Fatal(err)
	}
	if got := str(msgs[0].Content); got != "600 700 Do it." {
		t.Errorf("prompt file mode, dir mode, content = %q, want 600 700 Do it.", got)
	}
	if d.Usage() != nil {
		t.Errorf("Usage() = %+v after a run without a usage line", d.Usage())
	}
	noFilesLeft(t, sb, wf)
}

// Two runs of one workflow id at the same time (two profiles on one
// machine, say) each read their own prompt: the fake waits until both
// have written theirs before it reads it.
func TestSameWorkflowKeepsPrompts(t *testing.T) {
	barrier := t.TempDir()
	d, sb, _ := fakeDriver(t, `
touch "$BARRIER/$$"
until [ "$(ls "$BARRIER" | wc -l)" -ge 2 ]; do sleep 0.01; done
printf '{"type":"thinking","content":"%s"}\n' "$(cat "$3")"
echo '`+resultLine+`'`)
	d.Env["BARRIER"] = barrier
	wf := workflowID(t)
	prompts := []string{"first task", "second task"}
	got := make([]string, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Go(func() {
			var msgs []protocol.AgenticMessage
			msgs, errs[i] = collect(t, d.ExecuteAgentic(t.Context(), driver.AgenticRequest{Workflow: wf, Prompt: p, Cwd: sb.Workdir, Model: "m"}), nil)
			if len(msgs) > 0 {
				got[i] = str(msgs[0].Content)
			}
		})
	}
	wg.Wait()
	for i, p := range prompts {
		if errs[i] != nil || got[i] != p {
			t.Errorf("run %d read %q (%v), want its own prompt %q", i, got[i], errs[i], p)
		}
	}
	noFilesLeft(t, sb, wf)
}

// A line that is not a protocol message stops the worker at once, and the
// error names the line and shows its start.
func TestBadLine(t *testing.T) {
	long := strings.Repeat("x", 300)
	cases := []struct {
		name, line string
		want       []string
	}{
		{"not JSON", "Traceback (most recent call last):", []string{"line 2:", "Traceback (most recent call last):"}},
		{"not a message", `{"type":"bogus","content":"x"}`, []string{"line 2:", `unknown type "bogus"`}},
		{"long garbage", long, []string{"line 2:", strings.Repeat("x", protocol.PrefixBytes)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, sb, pid := fakeDriver(t, `echo $$ > "$PIDFILE"
echo '`+thinkingLine+`'
echo '`+c.line+`'
echo '`+resultLine+`'
exec sleep 3600`)
			wf := workflowID(t)
			msgs, err := run(t, d, t.Context(), wf, sb)
			if types(msgs) != "thinking" {
				t.Errorf("messages %s, want thinking only", types(msgs))
			}
			if _, ok := errors.AsType[*protocol.LineError](err); !ok || !errors.Is(err, protocol.ErrInvalid) {
				t.Fatalf("error %v, want a *protocol.LineError", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), strings.Repeat("x", protocol.PrefixBytes+1)) {
				t.Errorf("error holds more than %d bytes of the line", protocol.PrefixBytes)
			}
			assertGone(t, pid)
			noFilesLeft(t, sb, wf)
		})
	}
}

// The worker's exit, when it is not the normal end of a run.
func TestWorkerExit(t *testing.T) {
	cases := []struct {
		name, script string
		types        string
		is           error // nil: no error
		want         []string
		usage        bool
	}{
		{
			name:   "dies without a result",
			script: `echo '` + thinkingLine + `'; echo "panic: out of memory" >&2; echo "goroutine 1 [running]" >&2; exit 3`,
			types:  "thinking", is: driver.ErrNoResult,
			want: []string{"worker did not emit a result message", "exit status 3", "panic: out of memory", "provider local"},
		},
		{
			name:   "killed without a result",
			script: `echo '` + thinkingLine + `'; kill -9 $$`,
			types:  "thinking", is: driver.ErrNoResult,
			want: []string{"worker did not emit a result message", "signal KILL"},
		},
		{
			name:   "no output at all",
			script: `echo "amelia-worker: unknown flag: --prompt-file" >&2; exit 2`,
			types:  "", is: driver.ErrNoResult,
			want: []string{"worker did not emit a result message", "unknown flag"},
		},
		{
			name:   "non-zero after a successful result",
			script: `echo '` + resultLine + `'; echo '` + usageLine + `'; echo "segfault in cleanup" >&2; exit 2`,
			types:  "result", is: driver.ErrWorkerFailed, usage: true,
			want: []string{"exit status 2 after a successful result", "segfault in cleanup"},
		},
		{
			name:   "failed run: is_error result, exit 1",
			script: `echo '` + failLine + `'; echo '` + usageLine + `'; exit 1`,
			types:  "result", usage: true,
		},
		{
			name:   "blank lines are not errors",
			script: `echo; echo '` + resultLine + `'; echo "  "; echo '` + usageLine + `'`,
			types:  "result", usage: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, sb, _ := fakeDriver(t, c.script)
			wf := workflowID(t)
			msgs, err := run(t, d, t.Context(), wf, sb)
			if types(msgs) != c.types {
				t.Errorf("messages %q, want %q", types(msgs), c.types)
			}
			switch {
			case c.is == nil && err != nil:
				t.Errorf("error %v, want none", err)
			case c.is != nil && !errors.Is(err, c.is):
				t.Errorf("error %v, want %v", err, c.is)
			}
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("error %v does not contain %q", err, w)
				}
			}
			if u := d.Usage(); c.usage != (u != nil) || (u != nil && num(u.InputTokens) != 7) {
				t.Errorf("Usage() = %+v", u)
			}
			noFilesLeft(t, sb, wf)
		})
	}
}

// A consumer that stops iterating stops the worker: by the time the loop
// is left, the worker is gone and so is the prompt file.
func TestEarlyBreak(t *testing.T) {
	d, sb, pid := fakeDriver(t, `echo $$ > "$PIDFILE"
echo '`+thinkingLine+`'
exec sleep 3600`)
	wf := workflowID(t)
	n := 0
	for _, err := range d.ExecuteAgentic(t.Context(), driver.AgenticRequest{Workflow: wf, Prompt: "p", Cwd: sb.Workdir, Model: "m"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Fatalf("%d messages", n)
	}
	assertGone(t, pid)
	noFilesLeft(t, sb, wf)
}

// Cancelling ctx stops the worker, and ctx's error comes last.
func TestCancelFakeWorker(t *testing.T) {
	d, sb, pid := fakeDriver(t, `echo $$ > "$PIDFILE"
echo '`+thinkingLine+`'
exec sleep 3600`)
	wf := workflowID(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	msgs, last := collect(t, d.ExecuteAgentic(ctx, driver.AgenticRequest{Workflow: wf, Prompt: "p", Cwd: sb.Workdir, Model: "m"}),
		func(protocol.AgenticMessage) { cancel() })
	if !errors.Is(last, context.Canceled) {
		t.Errorf("last = %v, want context.Canceled", last)
	}
	if types(msgs) != "thinking" {
		t.Errorf("messages %s", types(msgs))
	}
	assertGone(t, pid)
	noFilesLeft(t, sb, wf)
}

// The exec itself failing (the plugin crashed, the sandbox is gone) is an
// error naming the provider that keeps the provider's error, and the
// prompt file is still removed.
func TestExecFailure(t *testing.T) {
	sb := sandboxtest.New(t, "fail")
	worker := fakeWorker(t, `echo '`+resultLine+`'`)
	failing := execerFunc(func(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
		if req.Argv[0] == worker {
			return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrUnavailable, "plugin exited unexpectedly")
		}
		return sb.Exec(ctx, req, eio)
	})
	d := &driver.Driver{Exec: failing, Worker: worker, Provider: "docker"}
	wf := workflowID(t)
	msgs, err := run(t, d, t.Context(), wf, sb)
	if len(msgs) != 0 || !errors.Is(err, sdk.ErrUnavailable) || !strings.Contains(err.Error(), "provider docker") ||
		!strings.Contains(err.Error(), "plugin exited unexpectedly") {
		t.Errorf("messages %s, error %v", types(msgs), err)
	}
	noFilesLeft(t, sb, wf)

	// A sandbox that cannot take the prompt: nothing runs, the error says
	// what failed.
	d.Exec = execerFunc(func(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
		return sdk.ExitStatus{}, sdk.Errorf(sdk.ErrNotFound, "sandbox %q does not exist", "dev")
	})
	_, err = run(t, d, t.Context(), wf, sb)
	if !errors.Is(err, sdk.ErrNotFound) || !strings.Contains(err.Error(), "write the prompt file") || !strings.Contains(err.Error(), "provider docker") {
		t.Errorf("error %v", err)
	}
}
