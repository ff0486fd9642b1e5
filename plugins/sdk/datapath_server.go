package sdk

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/yamux"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amelia-sandbox/amelia/plugins/sdk/internal/datachan"
	pb "github.com/amelia-sandbox/amelia/plugins/sdk/providerv1"
)

// pluginStreams are one exec's streams on the data channel, in the
// plugin: what the provider reads as stdin and writes as output, with the
// count of what it wrote, which the exit status tells the host.
type pluginStreams struct {
	all    []*yamux.Stream
	stdin  *yamux.Stream
	stdout *countedStream
	stderr *countedStream
}

// claimStreams takes the streams ExecStart.data names, which the host
// opened before it sent ExecStart, waiting for them while ctx lasts.
func (s *Server) claimStreams(ctx context.Context, start *pb.ExecStart) (*pluginStreams, error) {
	d := start.GetData()
	if s.data == nil {
		return nil, status.Error(codes.FailedPrecondition, "this provider plugin has no data channel: send the exec's bytes on the Exec stream")
	}
	var kinds []datachan.Kind
	if start.GetStdin() {
		kinds = append(kinds, datachan.Stdin)
	}
	if d.GetStdout() {
		kinds = append(kinds, datachan.Stdout)
	}
	if d.GetStderr() {
		kinds = append(kinds, datachan.Stderr)
	}
	got, err := s.data.Claim(ctx, d.GetId(), kinds...)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	ps := &pluginStreams{all: got}
	for i, k := range kinds {
		switch k {
		case datachan.Stdin:
			ps.stdin = got[i]
		case datachan.Stdout:
			ps.stdout = newCountedStream(got[i])
		case datachan.Stderr:
			ps.stderr = newCountedStream(got[i])
		}
	}
	return ps, nil
}

// io fills in eio's streams: the host's streams, or a discarding writer
// for output the host did not ask for (the provider sees the same
// non-nil writers as on the gRPC path).
func (ps *pluginStreams) io(eio *ExecIO) {
	eio.Stdout, eio.Stderr = io.Discard, io.Discard
	if ps.stdout != nil {
		eio.Stdout = ps.stdout
	}
	if ps.stderr != nil {
		eio.Stderr = ps.stderr
	}
	if ps.stdin != nil {
		eio.Stdin = ps.stdin
	}
}

// sent is how much output the provider wrote.
func (ps *pluginStreams) sent() *pb.DataSent {
	d := &pb.DataSent{}
	if ps.stdout != nil {
		d.Stdout = ps.stdout.n.Load()
	}
	if ps.stderr != nil {
		d.Stderr = ps.stderr.n.Load()
	}
	return d
}

// flush sends the output the provider's writes gathered, once it has
// returned: the exit status goes after it.
func (ps *pluginStreams) flush() {
	for _, c := range []*countedStream{ps.stdout, ps.stderr} {
		if c != nil {
			c.Close()
		}
	}
}

// end closes every stream at once: the provider's blocked reads and writes
// return, and the host sees the end of each.
func (ps *pluginStreams) end() {
	for _, s := range ps.all {
		datachan.End(s)
	}
	ps.flush() // returns at once now: the streams refuse writes
}

// coalesceMax is the most output an exec's stream gathers while its
// previous write is on its way.
const coalesceMax = 256 << 10

// countedStream is an output stream that counts what it sent, and
// gathers what the provider writes while the previous write is on its
// way into one frame: a provider that writes in small pieces (a Docker
// stream's frames, an SSH channel's packets) as fast as they come makes
// fewer, larger frames, each costing the same hand-offs and system calls
// whatever its size. Nothing waits for more: output goes out as soon as
// the stream is free. Write returns once its bytes are gathered; Close
// sends what is left.
type countedStream struct {
	s *yamux.Stream
	n atomic.Uint64 // bytes sent

	mu      sync.Mutex
	changed *sync.Cond // more gathered, room made, or the end
	buf     []byte     // gathered, not yet sent
	spare   []byte
	err     error // the stream's write error: no more is sent
	closed  bool
	sent    chan struct{} // closed when send returns
}

func newCountedStream(s *yamux.Stream) *countedStream {
	c := &countedStream{s: s, sent: make(chan struct{})}
	c.changed = sync.NewCond(&c.mu)
	go c.send()
	return c
}

func (c *countedStream) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for len(p) > 0 {
		for len(c.buf) >= coalesceMax && c.err == nil && !c.closed {
			c.changed.Wait()
		}
		switch {
		case c.err != nil:
			return n, c.err
		case c.closed:
			return n, errExecDone
		}
		take := min(len(p), coalesceMax-len(c.buf))
		c.buf = append(c.buf, p[:take]...)
		p, n = p[take:], n+take
		c.changed.Broadcast()
	}
	return n, nil
}

// send writes what is gathered, as one write, until Close or an error.
func (c *countedStream) send() {
	defer close(c.sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.buf) == 0 && !c.closed {
			c.changed.Wait()
		}
		if len(c.buf) == 0 {
			return // closed, all sent
		}
		out := c.buf
		c.buf = c.spare[:0]
		c.mu.Unlock()
		n, err := c.s.Write(out)
		c.n.Add(uint64(n))
		c.mu.Lock()
		c.spare = out
		c.changed.Broadcast()
		if err != nil {
			c.err = err
			return
		}
	}
}

// Close sends what is gathered and stops; a write after it fails.
func (c *countedStream) Close() {
	c.mu.Lock()
	c.closed = true
	c.changed.Broadcast()
	c.mu.Unlock()
	<-c.sent
}
