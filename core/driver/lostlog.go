package driver

import (
	"context"
	"fmt"
	"io"
	"iter"
	"path"

	"github.com/amelia-sandbox/amelia/core/execreport"
	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// runLog is the file of a run directory the worker's detach writes the
// agent's protocol lines to (internal/worker: runMessages).
const runLog = "messages.jsonl"

// LostAgenticLog yields the messages the detached run r wrote, from r.Seen
// on, and counts them in r.Seen, for a run whose supervisor is gone without
// an exit status (following it gave ErrRunLost). The worker's follow shows
// nothing of such a run, but the log it wrote until then stays in its run
// directory: this reads it as it is, leaving out a last line the run was cut
// off in.
func (d *Driver) LostAgenticLog(ctx context.Context, r *Detached) iter.Seq2[protocol.AgenticMessage, error] {
	return func(yield func(protocol.AgenticMessage, error) bool) {
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		pr, pw := io.Pipe()
		defer pr.Close()
		var stderr execreport.Stderr
		ended := make(chan execEnd, 1)
		go func() {
			req := sdk.ExecRequest{Argv: []string{"cat", "--", path.Join(r.Dir, runLog)}}
			st, err := d.Exec.Exec(ctx, req, sdk.ExecIO{Stdout: pw, Stderr: &stderr})
			pw.Close()
			ended <- execEnd{st, err}
		}()
		dec := protocol.NewDecoder(&wholeLines{r: pr}, protocol.WithMaxLineBytes(d.MaxLineBytes))
		seen := r.Seen
		var lineErr error
		stopped := false
		for !stopped {
			m, err := dec.Decode()
			if err == io.EOF {
				break
			}
			if err != nil {
				lineErr = err
				break
			}
			switch {
			case dec.Line() <= seen:
			case m.Type == protocol.Usage:
				d.setUsage(m.Usage)
			default:
				stopped = !yield(*m, nil)
			}
		}
		r.Seen = max(seen, dec.Line())
		if lineErr != nil || stopped {
			stop()
		}
		_, _ = io.Copy(io.Discard, pr)
		end := <-ended
		var err error
		switch {
		case stopped:
			return
		case lineErr != nil:
			err = fmt.Errorf("the agent's log on %s holds a line that is not a protocol message: %w", d.provider(), lineErr)
		case end.err != nil:
			err = fmt.Errorf("read the agent's log on %s: %w", d.provider(), end.err)
		case end.status.Code != 0:
			err = fmt.Errorf("read the agent's log %s on %s: %s%s", path.Join(r.Dir, runLog), d.provider(), execreport.Status(end.status), stderr.Note())
		default:
			return
		}
		yield(protocol.AgenticMessage{}, err)
	}
}
