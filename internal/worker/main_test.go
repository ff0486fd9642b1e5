package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/testbin"
)

// workerBin is the amelia-worker binary the tests run, built once by
// TestMain (with -race when the tests have it).
var workerBin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerBin, err = testbin.BuildWorker(dir)
		return err
	}))
}

// result is what one run of the worker did.
type result struct {
	stdout, stderr []byte
	code           int
	msgs           []*protocol.AgenticMessage
}

// runWorker runs amelia-worker with args and exactly the environment env
// (plus PATH, and a HOME of its own), feeding it stdin. Every stdout line
// must be a protocol message; the test fails otherwise.
func runWorker(t *testing.T, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, workerBin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0"}, env...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.Bytes(), stderr: stderr.Bytes()}
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
		r.code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("run amelia-worker %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("amelia-worker %v did not finish in time; stderr:\n%s", args, r.stderr)
	}
	return r
}

// decode reads r's stdout as protocol lines, failing the test on any line
// that is not one.
func (r *result) decode(t *testing.T) []*protocol.AgenticMessage {
	t.Helper()
	d := protocol.NewDecoder(bytes.NewReader(r.stdout))
	var msgs []*protocol.AgenticMessage
	for {
		m, err := d.Decode()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stdout is not only protocol lines: %v\nstdout:\n%s", err, r.stdout)
		}
		msgs = append(msgs, m)
	}
	r.msgs = msgs
	return msgs
}

// ending checks that the run ended as the protocol says, with a result
// (is_error as wantErr) then a usage line, and returns both.
func (r *result) ending(t *testing.T, wantErr bool) (res, usage *protocol.AgenticMessage) {
	t.Helper()
	msgs := r.decode(t)
	if len(msgs) < 2 {
		t.Fatalf("got %d lines, want at least result and usage; stdout:\n%s\nstderr:\n%s", len(msgs), r.stdout, r.stderr)
	}
	res, usage = msgs[len(msgs)-2], msgs[len(msgs)-1]
	if res.Type != protocol.Result || usage.Type != protocol.Usage || usage.Usage == nil {
		t.Fatalf("last lines are %s, %s; want result, usage (with usage)", res.Type, usage.Type)
	}
	if res.IsError != wantErr {
		t.Fatalf("result is_error = %v, want %v: %s\nstderr:\n%s", res.IsError, wantErr, str(res.Content), r.stderr)
	}
	for _, m := range msgs[:len(msgs)-2] {
		if m.Type == protocol.Result || m.Type == protocol.Usage {
			t.Errorf("a %s line before the end", m.Type)
		}
	}
	return res, usage
}

func str(p *string) string {
	if p == nil {
		return "<null>"
	}
	return *p
}

func num(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// writeFile writes a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func contains(t *testing.T, what, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Errorf("%s = %q, want it to contain %q", what, s, sub)
	}
}
