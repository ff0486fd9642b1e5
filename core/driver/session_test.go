package driver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// liveExecer passes execs on and counts them, and those still running.
type liveExecer struct {
	sandboxexec.Execer
	execs, running atomic.Int32
}

func (l *liveExecer) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	l.execs.Add(1)
	l.running.Add(1)
	defer l.running.Add(-1)
	return l.Execer.Exec(ctx, req, eio)
}

// session is a Session of the real worker in a fresh local sandbox, with
// srv as its proxy, and the execer that counts its execs.
func session(t *testing.T, srv *llmtest.Server) (*driver.Session, *liveExecer, realSandbox) {
	t.Helper()
	sb := newRealSandbox(t)
	d := sb.driverFor(srv)
	ex := &liveExecer{Execer: d.Exec}
	d.Exec = ex
	s := d.Persistent()
	t.Cleanup(func() { s.Close() })
	return s, ex, sb
}

// echoModel answers every request with its last message, or the turn the
// test gives for it.
func echoModel(t *testing.T, special func(i int, req *llmtest.Request) (llmtest.Turn, bool)) *llmtest.Server {
	return llmtest.NewWithOptions(t, llmtest.Options{Script: func(i int, req *llmtest.Request) llmtest.Turn {
		if special != nil {
			if turn, ok := special(i, req); ok {
				return turn
			}
		}
		msgs := req.Chat.Messages
		return llmtest.Turn{Text: "echo: " + msgs[len(msgs)-1].Text(), Usage: &llmtest.Usage{PromptTokens: 3, CompletionTokens: 1}}
	}})
}

// Many calls through one worker: ten Generate calls, concurrent ones, an
// agentic run and Generate with a schema all go through one exec of
// `amelia-worker serve`; the schema is written once, and Close removes it
// and ends the worker.
func TestSessionManyCalls(t *testing.T) {
	review := `{"verdict": "approve", "comments": ["fine"]}`
	srv := echoModel(t, func(i int, req *llmtest.Request) (llmtest.Turn, bool) {
		last := req.Chat.Messages[len(req.Chat.Messages)-1].Text()
		switch {
		case last == "Write hello.txt.":
			return llmtest.Turn{Text: "Writing.", ToolCalls: []llmtest.ToolCall{{Name: "write_file", Arguments: `{"file_path": "hello.txt", "content": "hi\n"}`}},
				Usage: &llmtest.Usage{PromptTokens: 100, CompletionTokens: 20}}, true
		case strings.Contains(last, "tool result") || req.Chat.Messages[len(req.Chat.Messages)-1].Role == "tool":
			return llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 50, CompletionTokens: 5}}, true
		case strings.HasPrefix(last, "Review"):
			return llmtest.Turn{Text: review}, true
		}
		return llmtest.Turn{}, false
	})
	s, ex, sb := session(t, srv)
	wf := workflowID(t)

	for i := range 10 {
		prompt := fmt.Sprintf("call %d", i)
		got, usage, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: wf, Prompt: prompt, Model: "m", System: "Echo."}, nil)
		if want := `"echo: ` + prompt + `"`; err != nil || string(got) != want {
			t.Fatalf("call %d: %s, %v; want %s", i, got, err, want)
		}
		if num(usage.InputTokens) != 3 || str(usage.Model) != "m" {
			t.Errorf("call %d: usage %d tokens, model %s", i, num(usage.InputTokens), str(usage.Model))
		}
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			prompt := fmt.Sprintf("concurrent %d", i)
			got, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: wf, Prompt: prompt, Model: "m"}, nil)
			if want := `"echo: ` + prompt + `"`; err != nil || string(got) != want {
				t.Errorf("%s: %s, %v", prompt, got, err)
			}
		})
	}
	wg.Wait()

	msgs, err := collect(t, s.ExecuteAgentic(t.Context(), driver.AgenticRequest{
		Workflow: wf, Prompt: "Write hello.txt.", Cwd: sb.Workdir, Model: "test-model", Instructions: "Be brief.", MaxTurns: 5,
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, describe(m))
	}
	if want := []string{"thinking:Writing.", "tool_call:write_file", "tool_result:write_file", "result:Done."}; !slices.Equal(got, want) {
		t.Errorf("messages:\n got %q\nwant %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(sb.Workdir, "hello.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("hello.txt = %q, %v", b, err)
	}
	if u := s.Usage(); u == nil || num(u.InputTokens) != 150 || num(u.NumTurns) != 2 {
		t.Errorf("Usage() = %+v", u)
	}

	for range 2 {
		got, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: wf, Prompt: "Review this.", Model: "m"}, json.RawMessage(llmtest.ReviewSchema))
		if err != nil || string(got) != `{"verdict":"approve","comments":["fine"]}` {
			t.Errorf("Generate with a schema: %s, %v", got, err)
		}
	}
	reqs := srv.Requests()
	if !strings.Contains(string(reqs[len(reqs)-1].Chat.ResponseFormat), `"enum":["approve","reject"]`) {
		t.Errorf("the schema did not reach the model: %s", reqs[len(reqs)-1].Chat.ResponseFormat)
	}
	if sys := reqs[0].Chat.Messages[0]; sys.Role != "system" || sys.Text() != "Echo." {
		t.Errorf("Generate's system prompt: %s %q", sys.Role, sys.Text())
	}
	// One worker, one schema file.
	if n := ex.execs.Load(); n != 2 {
		t.Errorf("%d execs for 15 Generate calls and an agentic run, want 2 (the worker, the schema file)", n)
	}
	if left := filesOf(t, sb.Sandbox, "schema-"); len(left) != 1 {
		t.Errorf("schema files %v, want one", left)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := ex.running.Load(); n != 0 {
		t.Errorf("%d execs still run after Close", n)
	}
	if left := filesOf(t, sb.Sandbox, "schema-"); len(left) != 0 {
		t.Errorf("schema files left after Close: %v", left)
	}
	if _, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: wf, Prompt: "p", Model: "m"}, nil); err == nil || !strings.Contains(err.Error(), "the session is closed") {
		t.Errorf("Generate after Close: %v", err)
	}
	noFilesLeft(t, sb.Sandbox, wf)
}

// A cancelled call ends its worker; the next call starts a fresh one.
func TestSessionCancelledCall(t *testing.T) {
	asked := make(chan struct{})
	release := make(chan struct{})
	srv := echoModel(t, func(i int, _ *llmtest.Request) (llmtest.Turn, bool) {
		if i == 0 {
			close(asked)
			<-release
			return llmtest.Turn{Text: "too late"}, true
		}
		return llmtest.Turn{}, false
	})
	t.Cleanup(func() { close(release) }) // before the server closes
	s, ex, sb := session(t, srv)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-asked
		cancel()
	}()
	msgs, err := collect(t, s.ExecuteAgentic(ctx, driver.AgenticRequest{Workflow: "w", Prompt: "wait", Cwd: sb.Workdir, Model: "m"}), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, messages %s; want context.Canceled", err, types(msgs))
	}
	if n := ex.running.Load(); n != 0 {
		t.Errorf("%d execs still run after the cancelled call returned", n)
	}
	got, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: "w", Prompt: "again", Model: "m"}, nil)
	if err != nil || string(got) != `"echo: again"` {
		t.Fatalf("the next call: %s, %v", got, err)
	}
	if n := ex.execs.Load(); n != 2 {
		t.Errorf("%d execs, want 2: a fresh worker after the cancelled one", n)
	}
}

// A consumer that stops iterating ends the worker; the next call starts a
// fresh one.
func TestSessionEarlyBreak(t *testing.T) {
	srv := echoModel(t, func(i int, _ *llmtest.Request) (llmtest.Turn, bool) {
		if i == 0 {
			return llmtest.Turn{Text: "Looking.", ToolCalls: []llmtest.ToolCall{{Name: "ls", Arguments: `{"path": "."}`}}}, true
		}
		return llmtest.Turn{}, false
	})
	s, ex, sb := session(t, srv)
	for _, err := range s.ExecuteAgentic(t.Context(), driver.AgenticRequest{Workflow: "w", Prompt: "look", Cwd: sb.Workdir, Model: "m"}) {
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	if n := ex.running.Load(); n != 0 {
		t.Errorf("%d execs still run after the loop was left", n)
	}
	if got, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: "w", Prompt: "next", Model: "m"}, nil); err != nil || string(got) != `"echo: next"` {
		t.Fatalf("the next call: %s, %v", got, err)
	}
	if n := ex.execs.Load(); n != 2 {
		t.Errorf("%d execs, want 2", n)
	}
}

// fakeServe is a Driver whose worker is a script standing in for
// `amelia-worker serve`: it appends its pid to $PIDFILE, waits for the
// first byte of a request and runs script; $FRAMES is a file holding
// frames.
func fakeServe(t *testing.T, frames []byte, script string) (*driver.Driver, *liveExecer, *sandboxtest.Sandbox, string) {
	t.Helper()
	sb := sandboxtest.New(t, "fake")
	pid := pidFile(t)
	framesFile := filepath.Join(t.TempDir(), "frames")
	if err := os.WriteFile(framesFile, frames, 0o644); err != nil {
		t.Fatal(err)
	}
	ex := &liveExecer{Execer: sb}
	return &driver.Driver{
		Exec:     ex,
		Worker:   fakeWorker(t, `[ "$1" = serve ] || exit 2; echo $$ >> "$PIDFILE"; head -c 1 >/dev/null`+"\n"+script),
		Provider: "local",
		Env:      map[string]string{"PIDFILE": pid, "FRAMES": framesFile},
	}, ex, sb, pid
}

// persistent is d.Persistent(), closed by the test's end.
func persistent(t *testing.T, d *driver.Driver) *driver.Session {
	s := d.Persistent()
	t.Cleanup(func() { s.Close() })
	return s
}

func frames(parts ...[]byte) []byte { return slices.Concat(parts...) }
func msg(line string) []byte        { return protocol.AppendMsgFrame(nil, []byte(line)) }
func errFrame(s string) []byte      { return protocol.AppendErrorFrame(nil, s) }
func done() []byte                  { return protocol.AppendDoneFrame(nil) }

// How a command's frames end, for ExecuteAgentic and for Generate.
func TestSessionFrames(t *testing.T) {
	for _, tt := range []struct {
		name          string
		frames        []byte
		types         string // the messages ExecuteAgentic yields
		agenticIs     error  // nil: no error
		generateIs    error
		want          string // in the errors
		generateValue string // Generate's answer when no error
	}{
		{name: "success", frames: frames(msg(thinkingLine), msg(resultLine), msg(usageLine), done()),
			types: "thinking,result", generateValue: `"all done"`},
		{name: "failed result, then the error (amelia's worker)", frames: frames(msg(failLine), msg(usageLine), errFrame("it broke"), done()),
			types: "result", generateIs: driver.ErrWorkerFailed, want: "it broke"},
		{name: "the error alone (the Python worker)", frames: frames(errFrame("Traceback: boom"), done()),
			agenticIs: driver.ErrWorkerFailed, generateIs: driver.ErrWorkerFailed, want: "Traceback: boom"},
		{name: "an error after a successful result", frames: frames(msg(resultLine), errFrame("late"), done()),
			types: "result", agenticIs: driver.ErrWorkerFailed, generateIs: driver.ErrWorkerFailed, want: `it reported "late" after a successful result`},
		{name: "done without a result", frames: frames(msg(thinkingLine), done()),
			types: "thinking", agenticIs: driver.ErrNoResult, generateIs: driver.ErrNoResult, want: "worker did not emit a result message"},
		{name: "a frame that is not one", frames: frames(msg(thinkingLine), []byte("Traceback (most recent call last):\n"), done()),
			types: "thinking", agenticIs: protocol.ErrInvalid, generateIs: protocol.ErrInvalid, want: "line 2: invalid message"},
		{name: "a msg that is no message", frames: frames(msg(`{"type":"bogus"}`), done()),
			agenticIs: protocol.ErrInvalid, generateIs: protocol.ErrInvalid, want: `msg: invalid message: unknown type "bogus"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []string{"agentic", "generate"} {
				d, _, sb, pid := fakeServe(t, tt.frames, `cat "$FRAMES"; exec cat >/dev/null`)
				s := persistent(t, d)
				var err error
				var got json.RawMessage
				if mode == "agentic" {
					var msgs []protocol.AgenticMessage
					msgs, err = collect(t, s.ExecuteAgentic(t.Context(), driver.AgenticRequest{Workflow: "w", Prompt: "p", Cwd: sb.Workdir, Model: "m"}), nil)
					if types(msgs) != tt.types {
						t.Errorf("agentic yields %q, want %q", types(msgs), tt.types)
					}
				} else {
					got, _, err = s.Generate(t.Context(), driver.GenerateRequest{Workflow: "w", Prompt: "p", Model: "m"}, nil)
				}
				is := map[string]error{"agentic": tt.agenticIs, "generate": tt.generateIs}[mode]
				switch {
				case is == nil && err != nil:
					t.Errorf("%s: %v", mode, err)
				case is != nil && (!errors.Is(err, is) || !strings.Contains(err.Error(), tt.want)):
					t.Errorf("%s: %v; want an error matching %v with %q", mode, err, is, tt.want)
				case mode == "generate" && is == nil && string(got) != tt.generateValue:
					t.Errorf("generate: %s, want %s", got, tt.generateValue)
				}
				if err := s.Close(); err != nil && is == nil {
					t.Errorf("Close: %v", err)
				}
				assertGone(t, pid)
			}
		})
	}
}

// A worker in an untrusted sandbox cannot make the host buffer without
// end: a frame line longer than the bound, or a message in a frame longer
// than MaxLineBytes, is an error once the bound is passed, the worker is
// stopped, and the next call starts a fresh one.
func TestSessionBounds(t *testing.T) {
	long := `{"type":"result","content":"` + strings.Repeat("x", 2000) + `"}`
	for _, tt := range []struct {
		name, script string
		frames       []byte
		want         string
	}{
		// A line that never ends: NUL bytes for ever.
		{"endless frame line", `exec cat /dev/zero`, nil, "line 1: longer than the 2112-byte limit"},
		{"a message over the limit", `cat "$FRAMES"; exec cat >/dev/null`, frames(msg(long), done()), "line 1: msg: longer than the 1024-byte limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, ex, _, pid := fakeServe(t, tt.frames, tt.script)
			d.MaxLineBytes = 1024
			s := persistent(t, d)
			for i := range 2 {
				_, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: "w", Prompt: "p", Model: "m"}, nil)
				if !errors.Is(err, protocol.ErrLineTooLong) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("call %d: %v; want ErrLineTooLong with %q", i+1, err, tt.want)
				}
				if n := ex.running.Load(); n != 0 {
					t.Errorf("call %d: %d execs still run", i+1, n)
				}
			}
			if n := len(pids(t, pid)); n != 2 {
				t.Errorf("%d workers started, want 2: a fresh one for the second call", n)
			}
			assertGone(t, pid)
		})
	}
}

// A worker that dies in the middle of a command fails that call, with its
// exit status and the end of its stderr; the next call starts a fresh one.
func TestSessionWorkerDies(t *testing.T) {
	d, ex, _, pid := fakeServe(t, frames(msg(resultLine), msg(usageLine), done()), `
if [ "$(wc -l < "$PIDFILE")" -eq 1 ]; then
	printf '%s' '`+string(msg(thinkingLine))+`'
	echo "panic: the worker died" >&2
	exit 3
fi
cat "$FRAMES"
exec cat >/dev/null`)
	s := persistent(t, d)
	_, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: "w", Prompt: "p", Model: "m"}, nil)
	if !errors.Is(err, driver.ErrNoResult) || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "panic: the worker died") {
		t.Fatalf("the dying worker's call: %v", err)
	}
	got, _, err := s.Generate(t.Context(), driver.GenerateRequest{Workflow: "w", Prompt: "p", Model: "m"}, nil)
	if err != nil || string(got) != `"all done"` {
		t.Fatalf("the next call: %s, %v", got, err)
	}
	if n := len(pids(t, pid)); n != 2 || ex.execs.Load() != 2 {
		t.Errorf("%d workers started in %d execs, want 2", n, ex.execs.Load())
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	assertGone(t, pid)
}
