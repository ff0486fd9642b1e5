package sdk

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// pluginPipes are one exec's pipes from the data channel, in the plugin:
// what the provider reads as stdin and writes as output, with the count
// of what it wrote, which the exit status tells the host.
type pluginPipes struct {
	files  datachan.Files
	stdin  *PipeReader
	stdout *PipeWriter
	stderr *PipeWriter
	once   sync.Once
}

// claimPipes takes the pipes ExecStart.data names, which the host passed
// before it sent ExecStart, waiting for them while ctx lasts.
func (s *server) claimPipes(ctx context.Context, start *pb.ExecStart) (*pluginPipes, error) {
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
	files, err := s.data.Claim(ctx, d.GetId(), kinds...)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	pp := &pluginPipes{files: files}
	if f := files[datachan.Stdin]; f != nil {
		pp.stdin = &PipeReader{f: f}
	}
	if f := files[datachan.Stdout]; f != nil {
		pp.stdout = &PipeWriter{f: f, own: d.GetStdoutOwn()}
	}
	if f := files[datachan.Stderr]; f != nil {
		pp.stderr = &PipeWriter{f: f}
	}
	return pp, nil
}

// io fills in eio's streams: the host's pipes, or a discarding writer for
// output the host did not ask for (the provider sees the same non-nil
// writers as on the gRPC path).
func (pp *pluginPipes) io(eio *ExecIO) {
	eio.Stdout, eio.Stderr = io.Discard, io.Discard
	if pp.stdout != nil {
		eio.Stdout = pp.stdout
	}
	if pp.stderr != nil {
		eio.Stderr = pp.stderr
	}
	if pp.stdin != nil {
		eio.Stdin = pp.stdin
	}
}

// sent is how much output the provider wrote.
func (pp *pluginPipes) sent() *pb.DataSent {
	d := &pb.DataSent{}
	if pp.stdout != nil {
		d.Stdout = pp.stdout.n.Load()
	}
	if pp.stderr != nil {
		d.Stderr = pp.stderr.n.Load()
	}
	return d
}

// end closes the plugin's ends of the pipes: the provider's blocked reads
// and writes return, the host sees the end of the output once it has read
// what the pipes hold, and its writes to stdin fail. Once the provider has
// returned, all it wrote is in the pipes.
func (pp *pluginPipes) end() {
	pp.once.Do(func() {
		for _, f := range pp.files {
			_ = f.Close()
		}
	})
}
