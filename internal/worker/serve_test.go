package worker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// request is one serve request, framed.
func request(t *testing.T, r protocol.Request) []byte {
	t.Helper()
	b, err := protocol.AppendRequest(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// command is what serve answered to one request.
type command struct {
	msgs []*protocol.AgenticMessage
	err  *string // the error frame's, or nil
}

// commands reads serve's stdout: every line must be a frame, written byte
// for byte as pydantic writes a ResponseFrame; msg frames come first, then
// at most one error frame, then done, for each command.
func commands(t *testing.T, stdout []byte) []command {
	t.Helper()
	fd := protocol.NewFrameDecoder(bytes.NewReader(stdout))
	lines := bytes.SplitAfter(stdout, []byte("\n"))
	var out []command
	var cur command
	for i := 0; ; i++ {
		f, err := fd.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("stdout is not only frames: %v\nstdout:\n%s", err, stdout)
		}
		var want []byte
		switch f.Kind {
		case protocol.FrameMsg:
			if cur.err != nil {
				t.Fatalf("frame %d: a msg after the error frame", i+1)
			}
			line, err := protocol.AppendJSON(nil, f.Msg)
			if err != nil {
				t.Fatal(err)
			}
			want = protocol.AppendMsgFrame(nil, line)
			cur.msgs = append(cur.msgs, f.Msg)
		case protocol.FrameError:
			if cur.err != nil || f.Error == nil {
				t.Fatalf("frame %d: a second error frame, or one without error: %s", i+1, lines[i])
			}
			cur.err = f.Error
			want = protocol.AppendErrorFrame(nil, *f.Error)
		case protocol.FrameDone:
			want = protocol.AppendDoneFrame(nil)
			out = append(out, cur)
			cur = command{}
		}
		if !bytes.Equal(lines[i], want) {
			t.Errorf("frame %d is not as pydantic writes it:\n got %q\nwant %q", i+1, lines[i], want)
		}
	}
	if cur.msgs != nil || cur.err != nil {
		t.Fatalf("frames after the last done: %+v", cur)
	}
	return out
}

// ends checks a command ended with a result (is_error as wantErr) and its
// usage, and returns the result's content.
func (c command) ends(t *testing.T, wantErr bool) string {
	t.Helper()
	if len(c.msgs) < 2 {
		t.Fatalf("%d messages, want at least result and usage", len(c.msgs))
	}
	res, u := c.msgs[len(c.msgs)-2], c.msgs[len(c.msgs)-1]
	if res.Type != protocol.Result || u.Type != protocol.Usage || u.Usage == nil || res.IsError != wantErr {
		t.Fatalf("ends with %s (is_error %v), %s; want result (is_error %v), usage", res.Type, res.IsError, u.Type, wantErr)
	}
	if (c.err != nil) != wantErr {
		t.Fatalf("error frame %v, want one: %v", c.err, wantErr)
	}
	return str(res.Content)
}

// Several requests on one worker, one of which fails: each is answered in
// order, the failure with an error frame, and the worker goes on.
func TestServeSeveralRequests(t *testing.T) {
	var inFlight, most atomic.Int32
	answers := []llmtest.Turn{
		{Text: "Looking.", ToolCalls: []llmtest.ToolCall{call("write_file", `{"file_path": "a.txt", "content": "é\n"}`)}},
		{Text: "Wrote it."},
		{Status: 400, Error: "context too long"},
		{Text: `{"verdict": "approve", "comments": ["ok"]}`, Usage: &llmtest.Usage{PromptTokens: 7, CompletionTokens: 3}},
		{Text: "free text"},
	}
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: func(i int, _ *llmtest.Request) llmtest.Turn {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		return answers[i]
	}})
	cwd := t.TempDir()
	schema := writeFile(t, t.TempDir(), "review.json", llmtest.ReviewSchema)
	var stdin []byte
	stdin = append(stdin, request(t, protocol.Request{Mode: protocol.ModeAgentic, Prompt: "Write a.txt", Model: "m1", Cwd: &cwd})...)
	stdin = append(stdin, request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "fails", Model: "m2"})...)
	stdin = append(stdin, request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "review", Model: "m3", SchemaPath: &schema})...)
	stdin = append(stdin, request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "say", Model: "m4", Instructions: new("Be terse.")})...)

	r := runWorker(t, proxyEnv(srv), bytes.NewReader(stdin), "serve")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	cmds := commands(t, r.stdout)
	if len(cmds) != 4 {
		t.Fatalf("%d commands answered, want 4", len(cmds))
	}
	if got := cmds[0].ends(t, false); got != "Wrote it." {
		t.Errorf("agentic result %q", got)
	}
	if types := msgTypes(cmds[0].msgs); types != "thinking tool_call tool_result result usage" {
		t.Errorf("agentic messages: %s", types)
	}
	if got := readFile(t, cwd+"/a.txt"); got != "é\n" {
		t.Errorf("a.txt = %q", got)
	}
	if got := cmds[1].ends(t, true); !strings.Contains(got, "context too long") || !strings.Contains(*cmds[1].err, "context too long") {
		t.Errorf("failed command: result %q, error frame %q", got, *cmds[1].err)
	}
	if got := cmds[2].ends(t, false); got != `{"verdict":"approve","comments":["ok"]}` {
		t.Errorf("generate with a schema: %q", got)
	}
	if u := cmds[2].msgs[1].Usage; num(u.InputTokens) != "7" || str(u.Model) != "m3" {
		t.Errorf("usage %s tokens, model %s", num(u.InputTokens), str(u.Model))
	}
	if got := cmds[3].ends(t, false); got != "free text" {
		t.Errorf("generate: %q", got)
	}
	reqs := srv.Requests()
	if sys := reqs[len(reqs)-1].Chat.Messages[0]; sys.Role != "system" || sys.Text() != "Be terse." {
		t.Errorf("generate's instructions are its system prompt: got %s %q", sys.Role, sys.Text())
	}
	if most.Load() != 1 {
		t.Errorf("%d model requests at once, want commands one at a time", most.Load())
	}
}

func msgTypes(msgs []*protocol.AgenticMessage) string {
	var s []string
	for _, m := range msgs {
		s = append(s, string(m.Type))
	}
	return strings.Join(s, " ")
}

// A request that is not one ends the worker with exit 1 and nothing more
// on stdout, after the commands before it were answered.
func TestServeBadRequests(t *testing.T) {
	good := func(t *testing.T) []byte {
		return request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "p", Model: "m"})
	}
	prefixed := func(payload string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)
	}
	for _, tt := range []struct {
		name   string
		bad    func(t *testing.T) []byte
		stderr string
	}{
		{"prefix cut", func(t *testing.T) []byte { return good(t)[:2] }, "truncated request: the input ends after 2 bytes of the length prefix"},
		{"payload cut", func(t *testing.T) []byte { b := good(t); return b[:len(b)-1] }, "truncated request"},
		{"zero length", func(*testing.T) []byte { return []byte{0, 0, 0, 0} }, "request length 0"},
		{"over 64 MiB", func(*testing.T) []byte { return binary.BigEndian.AppendUint32(nil, 64<<20+1) }, "request length 67108865"},
		{"not JSON", func(*testing.T) []byte { return prefixed("hello") }, "invalid JSON"},
		{"unknown mode", func(*testing.T) []byte { return prefixed(`{"mode":"serve","prompt":"p","model":"m"}`) }, `unknown mode "serve"`},
		{"no model", func(*testing.T) []byte { return prefixed(`{"mode":"agentic","prompt":"p"}`) }, "model is required"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := llmtest.New(t, llmtest.Turn{Text: "first"})
			r := runWorker(t, proxyEnv(srv), bytes.NewReader(append(good(t), tt.bad(t)...)), "serve")
			if r.code != 1 {
				t.Errorf("exit %d, want 1", r.code)
			}
			cmds := commands(t, r.stdout)
			if len(cmds) != 1 || cmds[0].ends(t, false) != "first" {
				t.Errorf("stdout holds more than the first command's answer:\n%s", r.stdout)
			}
			contains(t, "stderr", string(r.stderr), "request 2: ")
			contains(t, "stderr", string(r.stderr), tt.stderr)
		})
	}
	t.Run("nothing at all", func(t *testing.T) {
		r := runWorker(t, nil, bytes.NewReader(nil), "serve")
		if r.code != 0 || len(r.stdout) != 0 {
			t.Errorf("empty stdin: exit %d, stdout %q; want 0 and nothing", r.code, r.stdout)
		}
	})
}

// stdin closing while a command runs does not stop it: it finishes, is
// answered in full, and the worker then exits 0.
func TestServeEOFMidCommand(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: func(int, *llmtest.Request) llmtest.Turn {
		close(started)
		<-release
		return llmtest.Turn{Text: "finished anyway"}
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, "serve")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0"}, proxyEnv(srv)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write(request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "p", Model: "m"})); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatalf("the command never reached the model; stderr:\n%s", stderr.String())
	}
	stdin.Close()
	close(release)
	err = cmd.Wait()
	if err != nil {
		t.Fatalf("serve: %v; stderr:\n%s", err, stderr.String())
	}
	cmds := commands(t, stdout.Bytes())
	if len(cmds) != 1 || cmds[0].ends(t, false) != "finished anyway" {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

// SIGTERM mid-command interrupts it: its failure is answered, then the
// worker exits 130.
func TestServeInterrupted(t *testing.T) {
	started := make(chan struct{})
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: func(_ int, req *llmtest.Request) llmtest.Turn {
		close(started)
		<-t.Context().Done()
		return llmtest.Turn{Text: "too late"}
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, "serve")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0"}, proxyEnv(srv)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Write(request(t, protocol.Request{Mode: protocol.ModeGenerate, Prompt: "p", Model: "m"}))
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatalf("the command never reached the model; stderr:\n%s", stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); !ok || exitErr.ExitCode() != 130 {
		t.Fatalf("serve: %v, want exit 130; stderr:\n%s", err, stderr.String())
	}
	cmds := commands(t, stdout.Bytes())
	if len(cmds) != 1 {
		t.Fatalf("stdout:\n%s", stdout.String())
	}
	cmds[0].ends(t, true)
}

// amelia's max_turns key bounds an agentic request as --max-turns does; a
// request without it gets the default.
func TestServeMaxTurns(t *testing.T) {
	loop := llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("ls", `{"path": "."}`)}}
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: func(int, *llmtest.Request) llmtest.Turn { return loop }})
	cwd := t.TempDir()
	r := runWorker(t, proxyEnv(srv), bytes.NewReader(request(t, protocol.Request{Mode: protocol.ModeAgentic, Prompt: "loop", Model: "m", Cwd: &cwd, MaxTurns: 2})), "serve")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	cmds := commands(t, r.stdout)
	if got := cmds[0].ends(t, true); !strings.Contains(got, "stopped after 2 turns") || len(srv.Requests()) != 2 {
		t.Errorf("result %q after %d requests; want the 2-turn limit", got, len(srv.Requests()))
	}
}
