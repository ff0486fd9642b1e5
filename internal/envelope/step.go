package envelope

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/internal/flow"
)

// Step is a typed request that a worker serves in its own process, in
// place of a command (Command.Step): no shell and no process of its own,
// so on a session that is open a request costs a stream, not a fork and
// an exec of a shell and the tools it calls. Only a worker serving with a
// StepFunc (ServeMuxSteps) knows steps; Serve and ServeMux refuse them.
type Step struct {
	// Name says which step; Args are its arguments, as the step reads them.
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// StepFunc serves one Step: it reads the step's input from stdin (at its
// end once the client closed it), writes its output to stdout and stderr
// and returns its exit code. ctx ends when the client cancels the step or
// goes away, and the step must then return soon; it ends no process but
// those it started.
type StepFunc func(ctx context.Context, step Step, stdin io.Reader, stdout, stderr io.Writer) int

// ServeMuxSteps is ServeMux, serving the Steps in commands with steps.
func ServeMuxSteps(in io.Reader, out io.Writer, environ []string, steps StepFunc) error {
	return serveMux(in, out, environ, steps)
}

// exitNoStep is the exit code of a step the worker does not serve, as a
// shell's for a command it cannot find.
const exitNoStep = 127

// serveStep serves cmd.Step with steps, after Serve read it: the started
// frame carries the worker's own pid (the step runs in it), then output
// and acknowledgements of input as for a command, then the exit.
func serveStep(fw *frameWriter, fr *frameReader, step Step, steps StepFunc) error {
	if steps == nil {
		_ = fw.write(frameStderr, []byte("this amelia-worker serves no steps here (step "+strconv.Quote(step.Name)+")\n"))
		return fw.json(frameExit, exit{Code: exitNoStep})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &stepRun{fw: fw, cancel: cancel, input: flow.NewQueue(stdinWindow)}
	if err := fw.write(frameStarted, []byte(strconv.Itoa(os.Getpid()))); err != nil {
		s.clientGone()
	}
	inR, inW := io.Pipe()
	go feedInput(s.input, inW, fw)
	go readClientFrames(fr, s.input, func(time.Duration) { s.cancel() }, s.clientGone)
	code := steps(ctx, step, inR, &stepOutput{s: s, typ: frameStdout}, &stepOutput{s: s, typ: frameStderr})
	// Input the step did not read is dropped, and still acknowledged.
	inR.Close()
	if s.isGone() {
		return nil
	}
	return fw.json(frameExit, exit{Code: code})
}

// stepRun is a step being served.
type stepRun struct {
	fw     *frameWriter
	cancel context.CancelFunc
	input  *flow.Queue

	mu   sync.Mutex
	gone bool
}

func (s *stepRun) clientGone() {
	s.mu.Lock()
	s.gone = true
	s.mu.Unlock()
	s.input.Stop()
	s.cancel()
}

func (s *stepRun) isGone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// stepOutput frames what a step writes to one of its streams; once the
// client is gone, writes fail.
type stepOutput struct {
	s   *stepRun
	typ byte
}

func (o *stepOutput) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := p[:min(len(p), chunkSize)]
		if err := o.s.fw.write(o.typ, c); err != nil {
			o.s.clientGone()
			return n, err
		}
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}
