package envelope_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// testSteps are the steps the test worker serves in its own process:
// "upper" copies its input to stdout in capitals, "exit" exits with the
// code its arguments give, "block" says so and waits for its cancel.
func testSteps(ctx context.Context, s envelope.Step, stdin io.Reader, stdout, stderr io.Writer) int {
	switch s.Name {
	case "upper":
		b, err := io.ReadAll(stdin)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		stdout.Write(bytes.ToUpper(b))
		fmt.Fprint(stderr, "upper done")
		return 0
	case "exit":
		var code int
		if err := json.Unmarshal(s.Args, &code); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return code
	case "block":
		fmt.Fprintln(stdout, "waiting")
		<-ctx.Done()
		return 130
	}
	fmt.Fprintf(stderr, "no step %q", s.Name)
	return 127
}

func step(name, args string) envelope.Command {
	s := envelope.Step{Name: name}
	if args != "" {
		s.Args = json.RawMessage(args)
	}
	return envelope.Command{Step: &s}
}

// A worker serving steps runs them in its own process, input, output and
// exit code as for a command; beside them, commands run as before.
func TestMuxSteps(t *testing.T) {
	w := startServing(t, "", "steps")
	m, err := envelope.NewMux(w.in, w.out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	big := strings.Repeat("input that is more than one window of the envelope\n", 20000)
	tests := []struct {
		name           string
		cmd            envelope.Command
		stdin          string
		code           int
		stdout, stderr string
	}{
		{"input to output", step("upper", ""), big, 0, strings.ToUpper(big), "upper done"},
		{"an exit code", step("exit", "7"), "", 7, "", ""},
		{"a step it does not know", step("nope", ""), "", 127, "", `no step "nope"`},
		{"a command beside", sh("echo from a shell; exit 3"), "", 3, "from a shell\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			eio := envelope.IO{Stdout: &out, Stderr: &errb}
			if tc.stdin != "" {
				eio.Stdin = strings.NewReader(tc.stdin)
			}
			res, err := m.Run(t.Context(), tc.cmd, eio, time.Second)
			if err != nil || res.Code != tc.code || out.String() != tc.stdout || errb.String() != tc.stderr {
				t.Errorf("got %+v %v, stdout %d bytes (want %d), stderr %q; want code %d, stderr %q", res, err, out.Len(), len(tc.stdout), errb.String(), tc.code, tc.stderr)
			}
		})
	}
}

// A cancel ends the step's context; its exit comes back as the cancelled
// command's would.
func TestMuxStepCancel(t *testing.T) {
	w := startServing(t, "", "steps")
	m, err := envelope.NewMux(w.in, w.out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan envelope.Result, 1)
	go func() {
		res, _ := m.Run(ctx, step("block", ""), envelope.IO{Stdout: pw}, time.Second)
		pw.Close()
		done <- res
	}()
	if line, err := bufio.NewReader(pr).ReadString('\n'); err != nil || line != "waiting\n" {
		t.Fatalf("the step's first line: %q %v", line, err)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if res := <-done; !res.Canceled || res.Code != 130 {
		t.Errorf("a cancelled step: %+v, want cancelled with code 130", res)
	}
}

// A worker serving no steps refuses one as a shell refuses a command it
// cannot find.
func TestMuxWithoutSteps(t *testing.T) {
	_, m := startMux(t, "")
	var errb bytes.Buffer
	res, err := m.Run(t.Context(), step("upper", ""), envelope.IO{Stderr: &errb}, time.Second)
	if err != nil || res.Code != 127 || !strings.Contains(errb.String(), `serves no steps here (step "upper")`) {
		t.Errorf("a step on a worker without steps: %+v %v %q", res, err, errb.String())
	}
}
