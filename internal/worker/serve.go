package worker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

func (w *worker) serveCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run agentic and generate commands one after another, sent as length-prefixed requests on stdin",
		Long: `serve is the persistent worker: it reads requests from stdin, each a 4-byte
big-endian length and the JSON of a WorkerRequest {mode: agentic|generate,
prompt, model, cwd, instructions, schema_path}, runs them one at a time, and
answers each with frames on stdout: {"frame":"msg","msg":"<a protocol line>",
"error":null} per message, {"frame":"error",...} when the command failed, then
{"frame":"done",...}. A failed command leaves the worker serving. It exits 0
when stdin ends between requests, and 1, writing nothing more, on a request
that is cut short, empty, larger than 64 MiB or not a WorkerRequest.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return w.serve(cmd.Context())
		},
	}
}

// request is what the reader of stdin hands to the serve loop.
type request struct {
	req *protocol.Request
	err error // io.EOF at the end of stdin
}

// serve runs the requests on stdin until it ends. The requests are read
// ahead, by a goroutine of their own, so that an interruption is noticed
// between commands; they still run one at a time, in order, and a request
// that is not valid ends serve only after the commands before it.
func (w *worker) serve(ctx context.Context) error {
	reqs := make(chan request)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			req, err := protocol.ReadRequest(w.p.Stdin)
			select {
			case reqs <- request{req, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	w.log.Info("serving requests")
	for n := 1; ; n++ {
		var r request
		select {
		case r = <-reqs:
		case <-ctx.Done():
			w.log.Info("interrupted between requests")
			return exitCode(exitInterrupted)
		}
		switch {
		case r.err == io.EOF:
			w.log.Info("stdin closed: done serving", "requests", n-1)
			return nil
		case r.err != nil:
			fmt.Fprintf(w.p.Stderr, "amelia-worker serve: request %d: %v\n", n, r.err)
			return exitCode(exitFailed)
		}
		if err := w.serveOne(ctx, r.req); err != nil {
			fmt.Fprintf(w.p.Stderr, "amelia-worker serve: request %d: write frames: %v\n", n, err)
			return exitCode(exitFailed)
		}
		if ctx.Err() != nil {
			return exitCode(exitInterrupted)
		}
	}
}

// serveOne runs one request, its lines in msg frames, then an error frame
// if it failed and the done frame. Its error is one of writing the frames:
// stdout is gone.
func (w *worker) serveOne(ctx context.Context, req *protocol.Request) error {
	defer w.busy()() // each request is activity, not the wait between them
	fw := &frameWriter{w: w.p.Stdout}
	out := protocol.NewEncoder(fw)
	w.log.Info("request", "mode", req.Mode, "model", req.Model)
	var err error
	switch req.Mode {
	case protocol.ModeAgentic:
		err = w.runAgent(out, req.Model, func() error {
			cwd, err := orWorkdir(req.Cwd)
			if err != nil {
				return err
			}
			return w.agentic(ctx, out, agenticJob{
				prompt: req.Prompt, cwd: cwd, model: req.Model, instructions: deref(req.Instructions), maxTurns: req.MaxTurns,
			})
		})
	case protocol.ModeGenerate:
		err = w.runAgent(out, req.Model, func() error {
			return w.generate(ctx, out, generateJob{
				prompt: req.Prompt, model: req.Model, system: deref(req.Instructions), schema: deref(req.SchemaPath),
			})
		})
	default: // ReadRequest lets no other mode through
		err = fmt.Errorf("unknown mode %q", req.Mode)
	}
	if fw.err != nil {
		return fw.err
	}
	var tail []byte
	if err != nil {
		tail = protocol.AppendErrorFrame(tail, err.Error())
	}
	tail = protocol.AppendDoneFrame(tail)
	_, werr := w.p.Stdout.Write(tail)
	return werr
}

// orWorkdir is the request's cwd, or the worker's own working directory,
// as the Python worker does.
func orWorkdir(cwd *string) (string, error) {
	if cwd != nil {
		return *cwd, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", setupError{fmt.Errorf("no cwd in the request, and the worker's own: %w", err)}
	}
	return dir, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// frameWriter wraps each line written to it in a msg frame: the Encoder
// writes every line whole, its newline included, in one Write. After a
// failed write it fails every write, with that error.
type frameWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func (f *frameWriter) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	f.buf = protocol.AppendMsgFrame(f.buf[:0], bytes.TrimSuffix(p, []byte("\n")))
	if _, err := f.w.Write(f.buf); err != nil {
		f.err = err
		return 0, err
	}
	return len(p), nil
}
