package envelope

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/internal/flow"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// Errors Run's error matches.
var (
	// ErrNoDir: the working directory does not exist; nothing ran.
	ErrNoDir = errors.New("no such working directory")
	// ErrBroken: the stream ended before the command's exit frame, so how
	// it ended is unknown. The worker, its client gone, kills it.
	ErrBroken = errors.New("the exec stream ended before the command's exit")
	// ErrNoWorker: something other than the worker answered and the stream
	// ended (a shell saying there is no such file): nothing ran.
	ErrNoWorker = errors.New("no exec envelope from the worker")
)

// IO carries a command's streams: nil Stdin is empty input, nil Stdout or
// Stderr discard.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Result is how a command ended.
type Result struct {
	// Code is the exit code, 128+N when signal N killed the command.
	Code int
	// Signal names the signal that killed it ("KILL"), "" otherwise.
	Signal string
	// Canceled reports that ctx ended and the command was stopped.
	Canceled bool
	// Pid is the command's pid in the sandbox (the leader of its session),
	// 0 before it started.
	Pid int
}

// helloLimit bounds what may come before the hello (a login shell's
// banner); more than that is not an envelope.
const helloLimit = 64 << 10

// exitWait bounds the wait for the exit frame after a cancel, beyond the
// grace period: the worker's own SIGKILL and drain take at most drainWait.
const exitWait = drainWait + 5*time.Second

// Run runs cmd through a worker serving the envelope (`amelia-worker
// exec`) at the other end of a stream: in carries frames to it, out is
// its output. It returns once the exit frame came. When ctx ends first, it
// asks the worker to stop the command (SIGTERM, then SIGKILL after grace)
// and waits for the exit; if none comes, it closes in, which the worker
// takes as its client gone. Run does not close in otherwise: the caller
// ends the stream when Run returns.
func Run(ctx context.Context, in io.WriteCloser, out io.Reader, cmd Command, eio IO, grace time.Duration) (Result, error) {
	if cmd.Tag == "" {
		cmd.Tag = shexec.NewTag()
	}
	fw := &frameWriter{w: in}
	// A failed send shows as the stream's end, where read quotes what came
	// instead of the worker (a shell saying it has none, say).
	_ = fw.json(frameStart, cmd)
	c := &client{fw: fw, eio: eio, credit: flow.NewCredit(stdinWindow)}
	done := make(chan struct{})
	var res Result
	var err error
	go func() {
		defer close(done)
		res, err = c.read(out)
	}()
	go c.send(eio.Stdin)
	defer c.credit.Close()

	select {
	case <-done:
		return res, err
	case <-ctx.Done():
	}
	if fw.json(frameCancel, cancel{GraceMS: grace.Milliseconds()}) != nil {
		in.Close() // the stream is broken: the worker sees its client gone
	}
	t := time.NewTimer(grace + exitWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		in.Close()
		select {
		case <-done:
		case <-time.After(exitWait):
			// Nothing comes back at all: the reader stays behind until the
			// caller ends the stream.
			return Result{Canceled: true, Pid: c.pidNow()}, fmt.Errorf("%w: no exit %v after the cancel", ErrBroken, grace+2*exitWait)
		}
	}
	res.Canceled = true
	return res, err
}

// client is Run's side of one command.
type client struct {
	fw     *frameWriter
	eio    IO
	credit *flow.Credit

	mu  sync.Mutex
	pid int
}

func (c *client) pidNow() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid
}

// read reads the worker's frames up to the exit.
func (c *client) read(out io.Reader) (Result, error) {
	br := bufio.NewReaderSize(out, 64<<10)
	if err := skipTo(br, Hello); err != nil {
		return Result{}, err
	}
	fr := &frameReader{r: br}
	var fail *failure
	var writeErr error
	write := func(w io.Writer, p []byte, what string) {
		if w == nil || writeErr != nil {
			return
		}
		if _, err := w.Write(p); err != nil {
			writeErr = fmt.Errorf("write the command's %s: %w", what, err)
		}
	}
	for {
		typ, p, err := fr.read()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Result{Pid: c.pid}, fmt.Errorf("%w (%v)", ErrBroken, err)
		}
		switch typ {
		case frameStarted:
			pid, _ := strconv.Atoi(string(p))
			c.mu.Lock()
			c.pid = pid
			c.mu.Unlock()
		case frameStdout:
			write(c.eio.Stdout, p, "stdout")
		case frameStderr:
			write(c.eio.Stderr, p, "stderr")
		case frameAck:
			if len(p) == 4 {
				c.credit.Give(int(binary.BigEndian.Uint32(p)))
			}
		case frameFailed:
			fail = &failure{}
			if json.Unmarshal(p, fail) != nil {
				return Result{Pid: c.pid}, fmt.Errorf("%w: failed frame %q", ErrProtocol, p)
			}
		case frameExit:
			var x exit
			if err := json.Unmarshal(p, &x); err != nil {
				return Result{Pid: c.pid}, fmt.Errorf("%w: exit frame %q", ErrProtocol, p)
			}
			res := Result{Code: x.Code, Signal: x.Signal, Pid: c.pid}
			switch {
			case fail != nil && fail.Kind == "nodir":
				return res, fmt.Errorf("%w: %s", ErrNoDir, fail.Message)
			case fail != nil:
				return res, errors.New(fail.Message)
			}
			return res, writeErr
		default:
			return Result{Pid: c.pid}, fmt.Errorf("%w: unknown frame type %q", ErrProtocol, typ)
		}
	}
}

// skipTo reads up to the end of the hello line, past what a login shell
// may print first.
func skipTo(br *bufio.Reader, hello string) error {
	var seen bytes.Buffer
	for seen.Len() < helloLimit {
		line, err := br.ReadSlice('\n')
		if bytes.HasSuffix(line, []byte(hello)) {
			return nil
		}
		seen.Write(line)
		switch {
		case err == bufio.ErrBufferFull:
		case err != nil && seen.Len() > 0:
			return fmt.Errorf("%w: %q came instead, then the stream ended (%v)", ErrNoWorker, tail(seen.Bytes()), err)
		case err != nil:
			return fmt.Errorf("%w before the worker answered (%v)", ErrBroken, err)
		}
	}
	return fmt.Errorf("%w: not in the first %d bytes (is it an amelia-worker with exec?): %q", ErrNoWorker, helloLimit, tail(seen.Bytes()))
}

// tail is the end of what came instead of a hello, for messages.
func tail(b []byte) []byte {
	if len(b) > 200 {
		return b[len(b)-200:]
	}
	return b
}

// send sends the input in chunks, within the window, then its end.
func (c *client) send(stdin io.Reader) {
	if stdin != nil {
		buf := make([]byte, headerSize+chunkSize)
		for {
			n, err := stdin.Read(buf[headerSize:])
			if n > 0 {
				if !c.credit.Take(n) || c.fw.writeFrame(frameStdin, buf[:headerSize+n]) != nil {
					return
				}
			}
			if err != nil {
				break // EOF, or input that failed: either way it ends here
			}
		}
	}
	_ = c.fw.write(frameStdinClose, nil)
}
