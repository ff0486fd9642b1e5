package pluginclient

import (
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// dataCopyBuffer is the most one read of an exec's pipe takes.
const dataCopyBuffer = 256 << 10

// hostPipes are one exec's pipes on the data channel, at the host: stdin
// written from ExecIO.Stdin, stdout and stderr copied to ExecIO's
// writers, one write at a time (as the gRPC path writes them from one
// goroutine, a caller may give both the same writer).
type hostPipes struct {
	id   uint64
	ends datachan.Ends
	out  [2]*os.File // stdout, stderr; nil when not wanted (or passed)
	// passedOut: stdout is a file of the host's the plugin writes itself.
	passedOut bool
	got       [2]uint64 // bytes copied from each; read after copies.Wait

	bufs   *sync.Pool
	writes sync.Mutex // one write to sdk.ExecIO's writers at a time
	copies sync.WaitGroup
	once   sync.Once

	mu       sync.Mutex
	writeErr error // the first failed write to an sdk.ExecIO writer
}

var outNames = [2]string{"stdout", "stderr"}

// openPipesWith makes the pipes an exec with eio needs and passes the
// plugin's ends to it on h; with the file in, if not nil, passed to the
// plugin as the exec's stdin itself (eio.Stdin is not read), or out as
// its stdout (eio.Stdout is not written; not both).
func openPipesWith(h *datachan.Host, in, out *os.File, eio sdk.ExecIO, bufs *sync.Pool) (*hostPipes, error) {
	var id uint64
	var ends datachan.Ends
	var err error
	switch {
	case in != nil:
		id, ends, err = h.OpenFile(in, eio.Stdout != nil, eio.Stderr != nil)
	case out != nil:
		id, ends, err = h.OpenOutFile(out, eio.Stdin != nil, eio.Stderr != nil)
	default:
		id, ends, err = h.Open(eio.Stdin != nil, eio.Stdout != nil, eio.Stderr != nil)
	}
	if err != nil {
		return nil, err
	}
	return &hostPipes{id: id, ends: ends, out: [2]*os.File{ends.Stdout, ends.Stderr}, passedOut: out != nil, bufs: bufs}, nil
}

// startPB is the DataStreams of ExecStart.
func (hp *hostPipes) startPB() *pb.DataStreams {
	return &pb.DataStreams{Id: hp.id, Stdout: hp.out[0] != nil || hp.passedOut, Stderr: hp.out[1] != nil, StdoutOwn: hp.passedOut}
}

// run copies the exec's streams: stdin from eio.Stdin until it ends (then
// the process sees end of file), output to eio's writers until the
// plugin closes its ends. A failed write calls abort, which ends the
// exec, as on the gRPC path.
func (hp *hostPipes) run(eio sdk.ExecIO, abort func()) {
	if hp.ends.Stdin != nil {
		go hp.pumpStdin(eio.Stdin)
	}
	for i, w := range []io.Writer{eio.Stdout, eio.Stderr} {
		if hp.out[i] == nil {
			continue
		}
		hp.copies.Add(1)
		go hp.copyOut(i, w, abort)
	}
}

// pumpStdin writes r to the stdin pipe, as the process reads it, and
// closes the pipe when r ends, with EOF or any other error. If r blocks
// after the exec ends, this goroutine waits with it until r returns.
func (hp *hostPipes) pumpStdin(r io.Reader) {
	buf := hp.bufs.Get().(*[]byte)
	defer hp.bufs.Put(buf)
	// writerOnly hides (*os.File).ReadFrom, which would copy in 32 KiB
	// steps and ignore buf.
	_, _ = io.CopyBuffer(writerOnly{hp.ends.Stdin}, r, *buf)
	_ = hp.ends.Stdin.Close()
}

type writerOnly struct{ io.Writer }

func (hp *hostPipes) copyOut(i int, w io.Writer, abort func()) {
	defer hp.copies.Done()
	buf := hp.bufs.Get().(*[]byte)
	defer hp.bufs.Put(buf)
	f := hp.out[i]
	for {
		n, err := f.Read(*buf)
		if n > 0 {
			hp.writes.Lock()
			_, werr := w.Write((*buf)[:n])
			hp.writes.Unlock()
			hp.got[i] += uint64(n)
			if werr != nil {
				hp.mu.Lock()
				if hp.writeErr == nil {
					hp.writeErr = fmt.Errorf("write exec %s: %w", outNames[i], werr)
				}
				hp.mu.Unlock()
				abort() // the server sees the stream end and stops the process
				_ = f.Close()
				return
			}
		}
		if err != nil {
			return // EOF once the plugin closed its end, or the exec was ended
		}
	}
}

// finish waits for the output the provider sent before its exit status,
// and checks that all of it came: sent is what the server wrote.
func (hp *hostPipes) finish(sent *pb.DataSent) error {
	hp.copies.Wait()
	if err := hp.failedWrite(); err != nil {
		return err
	}
	for i, want := range []uint64{sent.GetStdout(), sent.GetStderr()} {
		if hp.out[i] != nil && hp.got[i] != want {
			return sdk.Errorf(sdk.ErrUnavailable, "exec %s: the data channel delivered %d of the %d bytes the provider wrote", outNames[i], hp.got[i], want)
		}
	}
	return nil
}

// failedWrite is the first write to an ExecIO writer that failed, if any.
func (hp *hostPipes) failedWrite() error {
	hp.mu.Lock()
	defer hp.mu.Unlock()
	return hp.writeErr
}

// end closes the host's ends at once (a blocked read or write on them
// returns) and waits for the output copies to stop (a write to ExecIO
// already under way still completes).
func (hp *hostPipes) end() {
	hp.once.Do(func() {
		for _, f := range []*os.File{hp.ends.Stdin, hp.out[0], hp.out[1]} {
			if f != nil {
				_ = f.Close()
			}
		}
	})
	hp.copies.Wait()
}

// explain ends the pipes of an exec whose gRPC stream failed with err;
// a failed write to ExecIO, which ended that stream, is the better
// explanation.
func (hp *hostPipes) explain(err error) error {
	hp.end()
	if werr := hp.failedWrite(); werr != nil {
		return werr
	}
	return err
}
