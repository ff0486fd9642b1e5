package pluginclient

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/amelia-sandbox/amelia/internal/flow"
	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"

	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// exitSlack is how long the host waits for the exit status beyond the cancel
// grace period before it gives up on the stream.
const exitSlack = 10 * time.Second

// cancelSendTimeout bounds how long a Cancel may wait for the stream while
// stdin is blocked by flow control; after it, the stream itself is cancelled,
// which the server also treats as a cancel.
const cancelSendTimeout = time.Second

// Client is the gRPC client shim: a Provider backed by a remote one.
type Client struct {
	rpc pb.ProviderClient
	// data carries execs' bytes beside gRPC when the plugin took the data
	// channel Launch offered; nil otherwise.
	data *datachan.Host
	bufs sync.Pool // *[]byte of dataCopyBuffer, for the exec pipes. copies
}

// NewClient returns a Provider that calls the provider served on cc.
func NewClient(cc grpc.ClientConnInterface) *Client {
	return newClient(cc, nil)
}

// newClient is NewClient with the data channel data (nil for none).
func newClient(cc grpc.ClientConnInterface, data *datachan.Host) *Client {
	c := &Client{rpc: pb.NewProviderClient(cc), data: data}
	c.bufs.New = func() any { b := make([]byte, dataCopyBuffer); return &b }
	return c
}

var (
	_ sdk.Provider          = (*Client)(nil)
	_ sdk.Lister            = (*Client)(nil)
	_ sdk.Forwarder         = (*Client)(nil)
	_ sdk.SettingsValidator = (*Client)(nil)
	_ sdk.Preflighter       = (*Client)(nil)
	_ sdk.Preparer          = (*Client)(nil)
	_ sdk.SetupPruner       = (*Client)(nil)
	_ sdk.Archiver          = (*Client)(nil)
)

func (c *Client) Info(ctx context.Context) (sdk.Info, error) {
	r, err := c.rpc.Info(ctx, &pb.InfoRequest{})
	if err != nil {
		return sdk.Info{}, fromStatus(err)
	}
	return infoFromPB(r), nil
}

func (c *Client) EnsureRunning(ctx context.Context, spec sdk.Spec) (sdk.Sandbox, error) {
	r, err := c.rpc.EnsureRunning(ctx, specToPB(spec))
	if err != nil {
		return sdk.Sandbox{}, fromStatus(err)
	}
	return sandboxFromPB(r), nil
}

func (c *Client) Teardown(ctx context.Context, ref sdk.SandboxRef) error {
	_, err := c.rpc.Teardown(ctx, &pb.TeardownRequest{Ref: refToPB(ref)})
	return fromStatus(err)
}

func (c *Client) HealthCheck(ctx context.Context, ref sdk.SandboxRef) (sdk.Health, error) {
	r, err := c.rpc.HealthCheck(ctx, &pb.HealthCheckRequest{Ref: refToPB(ref)})
	if err != nil {
		return sdk.Health{}, fromStatus(err)
	}
	return sdk.Health{State: sdk.HealthState(r.GetState()), Message: r.GetMessage(), NeverStops: r.GetNeverStops()}, nil
}

// List asks the remote provider for its sandboxes; a provider that cannot
// list gives ErrUnsupported.
func (c *Client) List(ctx context.Context, req sdk.ListRequest) ([]sdk.Listed, error) {
	r, err := c.rpc.List(ctx, &pb.ListRequest{Config: req.Config, Labels: req.Labels})
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]sdk.Listed, 0, len(r.GetSandboxes()))
	for _, l := range r.GetSandboxes() {
		out = append(out, listedFromPB(l))
	}
	return out, nil
}

// ValidateSettings asks the remote provider to check settings; a provider
// that cannot gives ErrUnsupported.
func (c *Client) ValidateSettings(ctx context.Context, req sdk.ValidateRequest) ([]sdk.Problem, error) {
	r, err := c.rpc.ValidateSettings(ctx, &pb.ValidateSettingsRequest{Config: req.Config, Network: networkToPB(req.Network)})
	if err != nil {
		return nil, fromStatus(err)
	}
	return problemsFromPB(r.GetProblems()), nil
}

// Preflight asks the remote provider why EnsureRunning(spec) would fail;
// a provider that cannot tell gives ErrUnsupported.
func (c *Client) Preflight(ctx context.Context, spec sdk.Spec) error {
	_, err := c.rpc.Preflight(ctx, specToPB(spec))
	return fromStatus(err)
}

// Prepare asks the remote provider to prepare spec's setup; a provider
// that cannot keep one gives ErrUnsupported.
func (c *Client) Prepare(ctx context.Context, spec sdk.Spec) (sdk.Prepared, error) {
	r, err := c.rpc.Prepare(ctx, specToPB(spec))
	if err != nil {
		return sdk.Prepared{}, fromStatus(err)
	}
	return sdk.Prepared{UpToDate: r.GetUpToDate(), Ref: r.GetRef(), Details: r.GetDetails()}, nil
}

// PruneSetups asks the remote provider to prune the setups it kept; a
// provider that keeps none gives ErrUnsupported.
func (c *Client) PruneSetups(ctx context.Context, req sdk.PruneRequest) ([]sdk.PrunedSetup, error) {
	in := &pb.PruneSetupsRequest{Spec: specToPB(req.Spec), OlderThanMs: req.OlderThan.Milliseconds(), DryRun: req.DryRun}
	for _, o := range req.Others {
		in.Others = append(in.Others, specToPB(o))
	}
	r, err := c.rpc.PruneSetups(ctx, in)
	if err != nil {
		return nil, fromStatus(err)
	}
	out := make([]sdk.PrunedSetup, 0, len(r.GetSetups()))
	for _, s := range r.GetSetups() {
		out = append(out, sdk.PrunedSetup{Ref: s.GetRef(), Age: time.Duration(s.GetAgeMs()) * time.Millisecond, Left: s.GetLeft()})
	}
	return out, nil
}

// Forward runs the provider's Forwarder (ErrUnsupported when it has none).
// It returns nil once ctx ends.
func (c *Client) Forward(ctx context.Context, req sdk.ForwardRequest, listening func(addr string)) error {
	stream, err := c.rpc.Forward(ctx, &pb.ForwardRequest{Sandbox: refToPB(req.Sandbox), Target: req.Target})
	if err != nil {
		return fromStatus(err)
	}
	ev, err := stream.Recv()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fromStatus(err)
	}
	listening(ev.GetListening())
	for {
		if _, err := stream.Recv(); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return errors.New("the provider ended the forward")
			}
			return fromStatus(err)
		}
	}
}

// Exec runs req remotely. When ctx ends it sends Cancel and keeps reading, so
// the provider can stop the process tree within the grace period and report
// how it ended; the error is non-nil only when no exit status arrived.
//
// With a data channel (Launch), stdin, stdout and stderr go through OS
// pipes passed to the plugin there, and the Exec stream carries the rest; Exec returns once the provider's output has all been written to
// eio. Without one, they go over the Exec stream: stdin within the server's
// credit, so a Cancel is never stuck behind input the process does not
// read; if it still cannot be sent in time, the stream is cancelled, which
// stops the process just the same, and the error matches ctx.Err().
func (c *Client) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	return c.exec(ctx, req, eio, nil)
}

// PutArchive asks the provider's Archiver to unpack the tar stream r into
// dir; a provider without one gives ErrUnsupported. It rides an exec
// stream, so its bytes go over the data channel as an exec's do.
// An *sdk.FileArchive goes as its file's bytes, and a Body that is a
// regular *os.File as the file itself, which the plugin reads: its bytes
// do not pass through this process.
func (c *Client) PutArchive(ctx context.Context, ref sdk.SandboxRef, dir string, r io.Reader) error {
	a := &pb.Archive{Op: pb.Archive_ARCHIVE_PUT, Path: dir}
	if fa, ok := r.(*sdk.FileArchive); ok && fa.Body != nil {
		a.File = &pb.ArchiveFile{Name: fa.Name, Mode: uint32(fa.Mode.Perm()), Uid: int64(fa.UID), Gid: int64(fa.GID), MtimeUnixNano: fa.ModTime.UnixNano(), Size: fa.Size}
		r = io.LimitReader(fa.Body, fa.Size)
		if f, ok := fa.Body.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				r = passFile{f}
			}
		}
	}
	return c.archive(ctx, ref, a, sdk.ExecIO{Stdin: r})
}

// passFile is an exec's stdin to pass to the plugin as the file it is,
// over the data channel; failing that, it is read and sent. (An exec's
// Stdout is passed so when it is an sdk.OutputFile.)
type passFile struct{ *os.File }

// GetArchive asks the provider's Archiver for a tar stream of path,
// written to w; a provider without one gives ErrUnsupported.
// An *sdk.FileFromArchive whose File is a regular *os.File, over the data
// channel, goes to the plugin as the file itself, which the plugin's SDK
// writes the one file's bytes to: they do not pass through this process.
func (c *Client) GetArchive(ctx context.Context, ref sdk.SandboxRef, path string, w io.Writer) error {
	a := &pb.Archive{Op: pb.Archive_ARCHIVE_GET, Path: path}
	if x, ok := w.(*sdk.FileFromArchive); ok && c.data.Usable() {
		if f, ok := x.File.(*os.File); ok {
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				start, serr := f.Seek(0, io.SeekCurrent)
				a.File = &pb.ArchiveFile{Name: x.Name}
				if err := c.archive(ctx, ref, a, sdk.ExecIO{Stdout: sdk.OutputFile{File: f}}); err != nil {
					return err
				}
				end, eerr := f.Seek(0, io.SeekCurrent)
				if serr != nil || eerr != nil {
					return fmt.Errorf("archive get %s: cannot tell how much was written to %s", path, f.Name())
				}
				x.Passed(&tar.Header{Typeflag: tar.TypeReg, Name: x.Name, Size: end - start})
				return nil
			}
		}
	}
	return c.archive(ctx, ref, a, sdk.ExecIO{Stdout: w})
}

func (c *Client) archive(ctx context.Context, ref sdk.SandboxRef, a *pb.Archive, eio sdk.ExecIO) error {
	label := "archive-" + strings.ToLower(strings.TrimPrefix(a.GetOp().String(), "ARCHIVE_"))
	st, err := c.exec(ctx, sdk.ExecRequest{Sandbox: ref, Argv: []string{label, a.GetPath()}, Traffic: sdk.TrafficBulk}, eio, a)
	if err == nil && (st.Code != 0 || st.Canceled || st.TimedOut) {
		err = fmt.Errorf("%s %s: the provider ended it (exit %d)", label, a.GetPath(), st.Code)
	}
	return err
}

// exec runs an exec stream: a process, or with archive an archive copy.
func (c *Client) exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO, archive *pb.Archive) (sdk.ExitStatus, error) {
	if err := ctx.Err(); err != nil {
		return sdk.ExitStatus{}, err
	}
	// The stream outlives ctx on purpose: cancelling is a message, so the
	// exit status can still come back. abort is the hard stop.
	sctx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	stream, err := c.rpc.Exec(sctx)
	if err != nil {
		return sdk.ExitStatus{}, fromStatus(err)
	}
	s := &execClientSender{stream: stream, lock: make(chan struct{}, 1)}
	startPB := execStartToPB(req, eio.Stdin != nil)
	startPB.Archive = archive
	// The bytes go over the data channel when there is one: the exec's
	// pipes are passed before ExecStart names them. Failing that, over
	// gRPC.
	var data *hostPipes
	if c.data.Usable() {
		var in, out *os.File
		if pf, ok := eio.Stdin.(passFile); ok {
			in = pf.File
		}
		if of, ok := eio.Stdout.(sdk.OutputFile); ok {
			out = of.File
		}
		if data, err = openPipesWith(c.data, in, out, eio, &c.bufs); err == nil {
			startPB.Data = data.startPB()
			data.run(eio, abort)
			defer data.end()
		}
	}
	if err := s.send(&pb.ExecRequest{Msg: &pb.ExecRequest_Start{Start: startPB}}); err != nil {
		if data != nil {
			return sdk.ExitStatus{}, data.explain(recvError(stream, err))
		}
		return sdk.ExitStatus{}, recvError(stream, err)
	}

	done := make(chan struct{})
	defer close(done)
	credit := flow.NewCredit(providerwire.StdinWindow)
	defer credit.Close()
	if eio.Stdin != nil && data == nil {
		go s.pumpStdin(eio.Stdin, credit, done)
	}
	if eio.Resize != nil {
		go s.pumpResize(eio.Resize, done)
	}
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		if !s.trySend(&pb.ExecRequest{Msg: &pb.ExecRequest_Cancel{Cancel: &pb.Cancel{}}}, cancelSendTimeout) {
			abort()
			return
		}
		t := time.NewTimer(req.Grace() + exitSlack)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			abort()
		}
	}()

	for {
		msg, err := stream.Recv()
		if err != nil && data != nil {
			if werr := data.explain(nil); werr != nil {
				return sdk.ExitStatus{}, werr
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = sdk.Errorf(sdk.ErrUnavailable, "exec stream ended without an exit status")
			} else {
				err = fromStatus(err)
			}
			if ctx.Err() != nil {
				// Cancel could not be delivered (stdin was blocked by flow
				// control), so the stream itself was cancelled: the server
				// stops the process the same way but cannot report how it
				// ended.
				return sdk.ExitStatus{}, fmt.Errorf("exec cancelled before the provider reported an exit status: %w", ctx.Err())
			}
			return sdk.ExitStatus{}, err
		}
		switch m := msg.GetMsg().(type) {
		case *pb.ExecResponse_Output:
			w, name := eio.Stdout, "stdout"
			if m.Output.GetStream() == pb.Stream_STREAM_STDERR {
				w, name = eio.Stderr, "stderr"
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(m.Output.GetData()); err != nil {
				abort() // the server sees the stream end and stops the process
				return sdk.ExitStatus{}, fmt.Errorf("write exec %s: %w", name, err)
			}
		case *pb.ExecResponse_StdinAck:
			credit.Give(int(m.StdinAck.GetBytes()))
		case *pb.ExecResponse_Exit:
			if data != nil {
				if err := data.finish(m.Exit.GetDataSent()); err != nil {
					return sdk.ExitStatus{}, err
				}
			}
			return exitFromPB(m.Exit), nil
		}
	}
}

// recvError explains a failed send: the stream's own status says why.
func recvError(stream pb.Provider_ExecClient, sendErr error) error {
	if _, err := stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
		return fromStatus(err)
	}
	return fromStatus(sendErr)
}

// execClientSender serialises sends: gRPC allows one sender at a time. lock is
// a one-slot channel so a Cancel can give up waiting for it.
type execClientSender struct {
	stream pb.Provider_ExecClient
	lock   chan struct{}
}

func (s *execClientSender) send(m *pb.ExecRequest) error {
	s.lock <- struct{}{}
	defer func() { <-s.lock }()
	return s.stream.Send(m)
}

func (s *execClientSender) trySend(m *pb.ExecRequest, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.lock <- struct{}{}:
	case <-t.C:
		return false
	}
	defer func() { <-s.lock }()
	return s.stream.Send(m) == nil
}

// pumpStdin copies r to the stream, within the credit the server gives back
// as the process reads, and ends it with StdinEOF. A read error other than EOF
// also ends stdin. If r blocks after the exec ends, this goroutine waits with
// it until r returns.
func (s *execClientSender) pumpStdin(r io.Reader, credit *flow.Credit, done <-chan struct{}) {
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		select {
		case <-done:
			return
		default:
		}
		if n > 0 {
			if !credit.Take(n) {
				return
			}
			if s.send(&pb.ExecRequest{Msg: &pb.ExecRequest_Stdin{Stdin: buf[:n]}}) != nil {
				return
			}
		}
		if err != nil {
			_ = s.send(&pb.ExecRequest{Msg: &pb.ExecRequest_StdinEof{StdinEof: &pb.StdinEOF{}}})
			return
		}
	}
}

func (s *execClientSender) pumpResize(ch <-chan sdk.TermSize, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case size, ok := <-ch:
			if !ok {
				return
			}
			if s.send(&pb.ExecRequest{Msg: &pb.ExecRequest_Resize{Resize: &pb.TermSize{Rows: size.Rows, Cols: size.Cols}}}) != nil {
				return
			}
		}
	}
}
