package worker_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// SIGTERM in the middle of a tool call (what a provider sends when the host
// cancels): the command's group is killed, and the run still ends with a
// result (is_error) and usage, then exit 130.
func TestAgenticInterrupted(t *testing.T) {
	cwd := t.TempDir()
	srv := llmtest.New(t, llmtest.Turn{ToolCalls: []llmtest.ToolCall{
		call("execute", `{"command": "echo $$ > ready; sleep 1000"}`),
	}})
	// bash tells the test it runs, and its pid, through a FIFO: opening it
	// for reading blocks until bash writes.
	ready := filepath.Join(cwd, "ready")
	if err := syscall.Mkfifo(ready, 0o600); err != nil {
		t.Fatal(err)
	}
	prompt := writeFile(t, t.TempDir(), "p.txt", "wait")
	cmd := exec.Command(workerBin, "agentic", "--prompt-file", prompt, "--cwd", cwd, "--model", "m")
	cmd.Env = append(proxyEnv(srv), "PATH="+os.Getenv("PATH"), "HOME="+t.TempDir(), "GORACE=atexit_sleep_ms=0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	r := bufio.NewReader(stdout)
	first, err := r.ReadBytes('\n')
	if err != nil || !bytes.Contains(first, []byte(`"type":"tool_call"`)) {
		t.Fatalf("first line %q, %v; want the execute call", first, err)
	}
	bashPid := pidFrom(t, ready)
	cmd.Process.Signal(syscall.SIGTERM)

	rest := result{stdout: append(first, mustReadAll(t, r)...)}
	err = cmd.Wait()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); !ok || exitErr.ExitCode() != 130 {
		t.Fatalf("worker ended with %v, want exit 130", err)
	}
	res, _ := rest.ending(t, true)
	contains(t, "result", str(res.Content), "interrupted")
	if m := rest.msgs[1]; m.Type != protocol.ToolResult || !m.IsError {
		t.Errorf("line 2 = %s is_error %v, want the cancelled tool result", m.Type, m.IsError)
	}
	waitGone(t, bashPid)
}

func mustReadAll(t *testing.T, r *bufio.Reader) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := b.ReadFrom(r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
