package sdk

import (
	"context"
	"io"
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
			ps.stdout = &countedStream{s: got[i]}
		case datachan.Stderr:
			ps.stderr = &countedStream{s: got[i]}
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

// end closes every stream at once: the provider's blocked reads and writes
// return, and the host sees the end of each. Once the provider has
// returned, all it wrote has been sent before.
func (ps *pluginStreams) end() {
	for _, s := range ps.all {
		datachan.End(s)
	}
}

// countedStream is an output stream that counts what it sent.
type countedStream struct {
	s *yamux.Stream
	n atomic.Uint64
}

func (c *countedStream) Write(p []byte) (int, error) {
	n, err := c.s.Write(p)
	c.n.Add(uint64(n))
	return n, err
}
