package driver

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// workerOutput is what a worker run wrote that the driver keeps.
type workerOutput struct {
	result *protocol.AgenticMessage // the result line, or nil
	usage  *protocol.DriverUsage    // the usage line's usage, or nil
	lines  int                      // lines read, blank ones included
}

// take notes m in o, its usage or its result, and hands it to each unless
// it is the usage line; it reports whether the consumer wants more.
func (o *workerOutput) take(m *protocol.AgenticMessage, each func(*protocol.AgenticMessage) bool) bool {
	switch m.Type {
	case protocol.Usage:
		o.usage = m.Usage
		return true
	case protocol.Result:
		o.result = m
	}
	return each(m)
}

// execEnd is how a worker's exec ended.
type execEnd struct {
	status sdk.ExitStatus
	err    error
}

// runWorker runs argv (amelia-worker and a subcommand) and calls each for
// every message but usage, as the lines arrive. It returns when the exec is
// over: after the worker exited, or after it was stopped because a line was
// bad, each returned false, or ctx is done. The error follows the package's
// error contract; when each returned false it is nil. With follow, argv
// reads a detached run's log, which outlives the exec: a line the stream
// was cut in is left to be read again, a broken exec is ErrDisconnected,
// and exit 125 says the run is gone (ErrRunLost).
func (d *Driver) runWorker(ctx context.Context, argv []string, follow bool, each func(*protocol.AgenticMessage) bool) (workerOutput, error) {
	sub := argv[1]
	var out workerOutput
	log := d.logger().With("worker", sub)
	start := time.Now()

	// The worker's own context: cancelled to stop it early without
	// touching the caller's.
	execCtx, stop := context.WithCancel(ctx)
	defer stop()
	pr, pw := io.Pipe()
	// Should the consumer panic, the exec's writes fail instead of
	// blocking forever (the normal paths read pr to its end first).
	defer pr.Close()
	var stderr execreport.Stderr
	ended := make(chan execEnd, 1)
	req := sdk.ExecRequest{Argv: argv, Env: d.Env, CancelGrace: cancelGrace}
	go func() {
		st, err := d.Exec.Exec(execCtx, req, sdk.ExecIO{Stdout: pw, Stderr: &stderr})
		pw.Close()
		ended <- execEnd{st, err}
	}()
	log.Debug("worker started", "argv", argv[1:])

	var lines io.Reader = pr
	if follow {
		lines = &wholeLines{r: pr}
	}
	dec := protocol.NewDecoder(lines, protocol.WithMaxLineBytes(d.MaxLineBytes))
	var lineErr error
	stopped := false
	for {
		m, err := dec.Decode()
		if err == io.EOF {
			break
		}
		if err != nil {
			lineErr = err
			break
		}
		if !out.take(m, each) {
			stopped = true
			break
		}
	}
	if lineErr != nil || stopped {
		stop()
	}
	// Read on to the end, so the provider is never blocked writing and can
	// report how the process ended (a write error would make the SDK drop
	// the stream without an exit status).
	_, _ = io.Copy(io.Discard, pr)
	end := <-ended
	out.lines = dec.Line()
	log.Debug("worker ended", "status", execreport.Status(end.status), "exec_err", end.err,
		"stopped", stopped, "bad_line", lineErr != nil, "duration", time.Since(start))

	switch {
	case ctx.Err() != nil:
		// Interrupted by the caller: ctx's error is the one to report,
		// whatever the worker wrote while it was being stopped.
		return out, fmt.Errorf("amelia-worker %s on %s: %w", sub, d.provider(), ctx.Err())
	case lineErr != nil:
		return out, fmt.Errorf("amelia-worker %s on %s wrote a line that is not a protocol message, so it was stopped: %w%s",
			sub, d.provider(), lineErr, stderr.Note())
	case stopped:
		// The consumer is gone; how the stopped worker ended is no news.
		return out, nil
	case end.err != nil && follow:
		return out, fmt.Errorf("follow the agent on %s: %w: %w", d.provider(), ErrDisconnected, end.err)
	case end.err != nil:
		return out, fmt.Errorf("run amelia-worker %s on %s: %w%s", sub, d.provider(), end.err, stderr.Note())
	case follow && end.status.Code == exitNoRun && out.result == nil:
		return out, fmt.Errorf("follow the agent on %s: %w%s", d.provider(), ErrRunLost, stderr.Note())
	case out.result == nil:
		return out, fmt.Errorf("amelia-worker %s on %s: %w (%s)%s", sub, d.provider(), ErrNoResult, execreport.Status(end.status), stderr.Note())
	case end.status.Code != 0 && !out.result.IsError:
		return out, fmt.Errorf("amelia-worker %s on %s: %w: %s after a successful result%s",
			sub, d.provider(), ErrWorkerFailed, execreport.Status(end.status), stderr.Note())
	}
	return out, nil
}
