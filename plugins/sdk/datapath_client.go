package sdk

import (
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/yamux"

	"github.com/amelia-sandbox/amelia/plugins/sdk/internal/datachan"
	pb "github.com/amelia-sandbox/amelia/plugins/sdk/providerv1"
)

// dataCopyBuffer is the most one read of a data stream takes.
const dataCopyBuffer = 256 << 10

// hostStreams are one exec's streams on the data channel, at the host:
// stdin written from ExecIO.Stdin, stdout and stderr copied to ExecIO's
// writers, one write at a time (as the gRPC path writes them from one
// goroutine, a caller may give both the same writer).
type hostStreams struct {
	id    uint64
	stdin *yamux.Stream
	out   [2]*yamux.Stream // stdout, stderr; nil when not wanted
	got   [2]uint64        // bytes copied from each; read after copies.Wait

	bufs   *sync.Pool
	writes sync.Mutex // one write to ExecIO's writers at a time
	copies sync.WaitGroup

	mu       sync.Mutex
	writeErr error // the first failed write to an ExecIO writer
}

var outNames = [2]string{"stdout", "stderr"}

// openStreams opens the streams an exec with eio needs on h.
func openStreams(h *datachan.Host, eio ExecIO, bufs *sync.Pool) (*hostStreams, error) {
	hs := &hostStreams{id: h.NewID(), bufs: bufs}
	open := func(k datachan.Kind, want bool) (*yamux.Stream, error) {
		if !want {
			return nil, nil
		}
		return h.Open(hs.id, k)
	}
	var err error
	if hs.stdin, err = open(datachan.Stdin, eio.Stdin != nil); err == nil {
		if hs.out[0], err = open(datachan.Stdout, eio.Stdout != nil); err == nil {
			hs.out[1], err = open(datachan.Stderr, eio.Stderr != nil)
		}
	}
	if err != nil {
		hs.end()
		return nil, err
	}
	return hs, nil
}

// start is the DataStreams of ExecStart.
func (hs *hostStreams) startPB() *pb.DataStreams {
	return &pb.DataStreams{Id: hs.id, Stdout: hs.out[0] != nil, Stderr: hs.out[1] != nil}
}

// run copies the exec's streams: stdin from eio.Stdin until it ends (then
// the process sees end of file), output to eio's writers until the
// provider closes its streams. A failed write calls abort, which ends the
// exec, as on the gRPC path.
func (hs *hostStreams) run(eio ExecIO, abort func()) {
	if hs.stdin != nil {
		go hs.pumpStdin(eio.Stdin)
	}
	for i, w := range []io.Writer{eio.Stdout, eio.Stderr} {
		if hs.out[i] == nil {
			continue
		}
		hs.copies.Add(1)
		go hs.copyOut(i, w, abort)
	}
}

// pumpStdin writes r to the stdin stream, within yamux's window (the
// process's reads make room), and closes it when r ends, with EOF or any
// other error. If r blocks after the exec ends, this goroutine waits with
// it until r returns.
func (hs *hostStreams) pumpStdin(r io.Reader) {
	buf := hs.bufs.Get().(*[]byte)
	defer hs.bufs.Put(buf)
	// writerOnly hides nothing yamux has; it keeps io.CopyBuffer from
	// handing r's WriteTo a writer it would call with unbounded chunks.
	_, _ = io.CopyBuffer(writerOnly{hs.stdin}, r, *buf)
	_ = hs.stdin.Close()
}

type writerOnly struct{ io.Writer }

func (hs *hostStreams) copyOut(i int, w io.Writer, abort func()) {
	defer hs.copies.Done()
	buf := hs.bufs.Get().(*[]byte)
	defer hs.bufs.Put(buf)
	s := hs.out[i]
	for {
		n, err := s.Read(*buf)
		if n > 0 {
			hs.writes.Lock()
			_, werr := w.Write((*buf)[:n])
			hs.writes.Unlock()
			hs.got[i] += uint64(n)
			if werr != nil {
				hs.mu.Lock()
				if hs.writeErr == nil {
					hs.writeErr = fmt.Errorf("write exec %s: %w", outNames[i], werr)
				}
				hs.mu.Unlock()
				abort() // the server sees the stream end and stops the process
				datachan.End(s)
				return
			}
		}
		if err != nil {
			return // EOF once the provider closed it, or the exec was ended
		}
	}
}

// finish waits for the output the provider sent before its exit status,
// and checks that all of it came: sent is what the server wrote.
func (hs *hostStreams) finish(sent *pb.DataSent) error {
	hs.copies.Wait()
	if err := hs.failedWrite(); err != nil {
		return err
	}
	for i, want := range []uint64{sent.GetStdout(), sent.GetStderr()} {
		if hs.out[i] != nil && hs.got[i] != want {
			return Errorf(ErrUnavailable, "exec %s: the data channel delivered %d of the %d bytes the provider wrote", outNames[i], hs.got[i], want)
		}
	}
	return nil
}

// failedWrite is the first write to an ExecIO writer that failed, if any.
func (hs *hostStreams) failedWrite() error {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.writeErr
}

// end closes every stream at once and waits for the output copies to stop
// (a write to ExecIO already under way still completes).
func (hs *hostStreams) end() {
	for _, s := range []*yamux.Stream{hs.stdin, hs.out[0], hs.out[1]} {
		if s != nil {
			datachan.End(s)
		}
	}
	hs.copies.Wait()
}

// explain ends the streams of an exec whose gRPC stream failed with err;
// a failed write to ExecIO, which ended that stream, is the better
// explanation.
func (hs *hostStreams) explain(err error) error {
	hs.end()
	if werr := hs.failedWrite(); werr != nil {
		return werr
	}
	return err
}
