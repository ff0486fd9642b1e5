package driver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/driver"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

func num(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// describe is a message as a short string for comparisons.
func describe(m protocol.AgenticMessage) string {
	switch m.Type {
	case protocol.ToolCall, protocol.ToolResult:
		s := string(m.Type) + ":" + str(m.ToolName)
		if m.IsError {
			s += "!"
		}
		return s
	case protocol.Thinking, protocol.Result:
		return string(m.Type) + ":" + str(m.Content)
	}
	return string(m.Type)
}

// The real worker against the scripted model: it writes a file with a tool
// call, and its messages reach the consumer while it runs — the model's
// second answer waits until the consumer has seen the tool's result, so a
// driver that yielded only once the exec ended would never get there.
func TestAgenticRealWorkerLive(t *testing.T) {
	sawResult := make(chan struct{})
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: func(i int, _ *llmtest.Request) llmtest.Turn {
		switch i {
		case 0:
			return llmtest.Turn{
				Text:      "I'll write it.",
				ToolCalls: []llmtest.ToolCall{{Name: "write_file", Arguments: `{"file_path": "hello.txt", "content": "hello\n"}`}},
				Usage:     &llmtest.Usage{PromptTokens: 100, CompletionTokens: 20},
			}
		case 1:
			select {
			case <-sawResult:
			case <-time.After(time.Minute):
				return llmtest.Turn{Status: 500, Error: "the driver did not yield the tool result while the worker ran"}
			}
			return llmtest.Turn{Text: "Done.", Usage: &llmtest.Usage{PromptTokens: 150, CompletionTokens: 5}}
		}
		return llmtest.Turn{Status: 500, Error: "unexpected request"}
	}})
	d, sb := realDriver(t, srv)
	wf := workflowID(t)

	req := driver.AgenticRequest{
		Workflow: wf, Prompt: "Write hello.txt.", Cwd: sb.Workdir, Model: "test-model",
		Instructions: "Be brief.", MaxTurns: 5,
	}
	msgs, err := collect(t, d.ExecuteAgentic(t.Context(), req), func(m protocol.AgenticMessage) {
		if m.Type == protocol.ToolResult {
			close(sawResult)
		}
	})
	if err != nil {
		t.Fatalf("error: %v", err)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, describe(m))
	}
	want := []string{"thinking:I'll write it.", "tool_call:write_file", "tool_result:write_file", "result:Done."}
	if !slices.Equal(got, want) {
		t.Errorf("messages:\n got %q\nwant %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(sb.Workdir, "hello.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("hello.txt = %q, %v", b, err)
	}

	u := d.Usage()
	if u == nil {
		t.Fatal("Usage() = nil after the run")
	}
	if num(u.InputTokens) != 250 || num(u.OutputTokens) != 25 || num(u.NumTurns) != 2 || str(u.Model) != "test-model" {
		t.Errorf("usage: input %d output %d turns %d model %s", num(u.InputTokens), num(u.OutputTokens), num(u.NumTurns), str(u.Model))
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d LLM requests, want 2; server errors: %v", len(reqs), srv.Errors())
	}
	first := reqs[0].Chat.Messages
	if last := first[len(first)-1]; last.Role != "user" || last.Text() != "Write hello.txt." {
		t.Errorf("the prompt did not reach the model: %s %q", last.Role, last.Text())
	}
	if !strings.Contains(first[0].Text(), "Be brief.") {
		t.Errorf("the instructions are not in the system prompt: %q", first[0].Text())
	}
	if auth := reqs[0].Header.Get("Authorization"); auth != "Bearer run-token-driver-test" {
		t.Errorf("Authorization = %q", auth)
	}
	noFilesLeft(t, sb, wf)
}

// Ctrl-C while the real worker waits for the model: the worker is stopped
// (it writes its interrupted result on the way out), the last thing yielded
// is ctx's error, and the prompt file is gone.
func TestAgenticRealWorkerCancelled(t *testing.T) {
	release := make(chan struct{})
	asked := make(chan struct{}, 1)
	srv := llmtest.NewWithOptions(t, llmtest.Options{Script: func(int, *llmtest.Request) llmtest.Turn {
		asked <- struct{}{}
		<-release
		return llmtest.Turn{Text: "too late"}
	}})
	t.Cleanup(func() { close(release) }) // before the server closes (cleanups run last first)
	d, sb := realDriver(t, srv)
	wf := workflowID(t)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	during := make(chan string, 1) // the calls' files while the worker runs
	go func() {
		select {
		case <-asked:
			r := sb.Run(t, nil, nil, "sh", "-c", callFilesScript, "sh", driver.FilePrefix)
			during <- r.Stdout
			cancel()
		case <-ctx.Done():
		}
	}()
	msgs, last := collect(t, d.ExecuteAgentic(ctx, driver.AgenticRequest{Workflow: wf, Prompt: "Wait.", Cwd: sb.Workdir, Model: "m"}), nil)
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("last yield = %v, want context.Canceled", last)
	}
	// The prompt file existed while the worker ran.
	if ls := <-during; !slices.ContainsFunc(strings.Fields(ls), func(f string) bool {
		return strings.HasPrefix(f, driver.FilePrefix+"agentic-"+wf+"-") && strings.HasSuffix(f, "/prompt.txt")
	}) {
		t.Errorf("%s* while the worker ran: %q, want %sagentic-%s-*/prompt.txt", driver.FilePrefix, ls, driver.FilePrefix, wf)
	}
	// The worker ends an interrupted run with a result that says so.
	if len(msgs) != 1 || !strings.HasPrefix(describe(msgs[0]), "result:") {
		t.Errorf("messages = %v, want the interrupted result", msgs)
	}
	noFilesLeft(t, sb, wf)
}

// A worker run that fails (here: the model answers with an error) ends with
// a result that has is_error and exit 1: that is the worker reporting, not
// a driver error.
func TestAgenticRealWorkerFailedRun(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Status: 400, Error: "model not found"})
	d, sb := realDriver(t, srv)
	wf := workflowID(t)
	msgs, err := collect(t, d.ExecuteAgentic(t.Context(), driver.AgenticRequest{Workflow: wf, Prompt: "Go.", Cwd: sb.Workdir, Model: "nope"}), nil)
	if err != nil {
		t.Fatalf("error: %v", err)
	}
	if len(msgs) != 1 || msgs[0].Type != protocol.Result || !msgs[0].IsError || !strings.Contains(str(msgs[0].Content), "model not found") {
		t.Fatalf("messages: %+v", msgs)
	}
	if d.Usage() == nil {
		t.Error("no usage after a failed run")
	}
	noFilesLeft(t, sb, wf)
}

// Requests that cannot run are refused before anything touches the
// sandbox.
func TestInvalidArguments(t *testing.T) {
	execer := execerFunc(func(context.Context, sdk.ExecRequest, sdk.ExecIO) (sdk.ExitStatus, error) {
		t.Error("an exec ran for an invalid request")
		return sdk.ExitStatus{}, errors.New("no")
	})
	d := &driver.Driver{Exec: execer, Worker: "/w", Provider: "test"}
	ok := driver.AgenticRequest{Workflow: "fix-1", Prompt: "p", Cwd: "/work", Model: "m"}
	cases := map[string]func(*driver.AgenticRequest){
		"empty prompt":      func(r *driver.AgenticRequest) { r.Prompt = "" },
		"blank prompt":      func(r *driver.AgenticRequest) { r.Prompt = " \n\t " },
		"no workflow":       func(r *driver.AgenticRequest) { r.Workflow = "" },
		"path in workflow":  func(r *driver.AgenticRequest) { r.Workflow = "../etc" },
		"dot dot":           func(r *driver.AgenticRequest) { r.Workflow = "a..b" },
		".lock":             func(r *driver.AgenticRequest) { r.Workflow = "fix.lock" },
		"leading dash":      func(r *driver.AgenticRequest) { r.Workflow = "-rf" },
		"space":             func(r *driver.AgenticRequest) { r.Workflow = "a b" },
		"too long":          func(r *driver.AgenticRequest) { r.Workflow = strings.Repeat("a", 64) },
		"no model":          func(r *driver.AgenticRequest) { r.Model = "" },
		"no cwd":            func(r *driver.AgenticRequest) { r.Cwd = "" },
		"negative maxturns": func(r *driver.AgenticRequest) { r.MaxTurns = -1 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			req := ok
			mutate(&req)
			n := 0
			for _, err := range d.ExecuteAgentic(t.Context(), req) {
				n++
				if !errors.Is(err, sdk.ErrInvalid) {
					t.Errorf("error %v, want sdk.ErrInvalid", err)
				}
			}
			if n != 1 {
				t.Errorf("%d yields, want one error", n)
			}
			if name == "no cwd" || name == "negative maxturns" {
				return // Generate has neither
			}
			_, _, err := d.Generate(t.Context(), driver.GenerateRequest{Workflow: req.Workflow, Prompt: req.Prompt, Model: req.Model}, nil)
			if !errors.Is(err, sdk.ErrInvalid) {
				t.Errorf("Generate: %v, want sdk.ErrInvalid", err)
			}
		})
	}
	_, _, err := d.Generate(t.Context(), driver.GenerateRequest{Workflow: "w", Prompt: "p", Model: "m"}, []byte(`{"type": 12}`))
	if !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "schema") {
		t.Errorf("bad schema: %v", err)
	}
}
