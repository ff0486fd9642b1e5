package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"path"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amelia-sandbox/amelia/internal/flow"
	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// maxChunk bounds one output message; gRPC's default receive limit is 4 MiB.
const maxChunk = 256 << 10

// Causes of an exec's context ending, so the server can tell a cancel from a
// timeout from a shutdown when it fills in ExitStatus.
var (
	errClientCancel  = errors.New("exec cancelled by the host")
	errExecTimeout   = errors.New("exec timed out")
	errShutdown      = errors.New("provider plugin shutting down")
	errExecDone      = errors.New("exec finished")
	errStdinOverflow = errors.New("the host sent more stdin than its credit allows")
)

// server is the gRPC server shim: it serves a Provider over the
// amelia.provider.v1 contract. Serve uses it; so does ServeListener, for a
// test that serves a provider in its own process (as sdktest does).
type server struct {
	pb.UnimplementedProviderServer
	impl Provider
	// data is the data channel Serve took from the host, if it offered
	// one: execs that name it move their bytes over it.
	data *datachan.Plugin

	// healthTimeout bounds HealthCheck (HealthCheckTimeout).
	healthTimeout time.Duration

	// base is cancelled by Shutdown; every exec's context ends with it.
	base     context.Context
	shutdown context.CancelCauseFunc
	running  *sync.WaitGroup // shared with the servers withData made
}

// newServer returns the gRPC shim serving p.
func newServer(p Provider) *server {
	base, cancel := context.WithCancelCause(context.Background())
	return &server{impl: p, healthTimeout: HealthCheckTimeout, base: base, shutdown: cancel, running: &sync.WaitGroup{}}
}

// withData is s for one host's connection to a shared plugin: the same
// provider, whose execs the same Shutdown ends, with that host's data
// channel (nil for none).
func (s *server) withData(data *datachan.Plugin) *server {
	c := *s
	c.data = data
	return &c
}

// Shutdown cancels every running exec (so providers kill their processes,
// honouring each exec's grace period) and waits up to timeout for them to
// return. Providers that implement io.Closer are closed afterwards.
func (s *server) Shutdown(timeout time.Duration) {
	s.shutdown(errShutdown)
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	if c, ok := s.impl.(io.Closer); ok {
		_ = c.Close()
	}
}

func (s *server) Info(ctx context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	info, err := s.impl.Info(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	info.APIVersions = []int{APIVersion}
	if _, ok := s.impl.(Archiver); ok {
		info.Capabilities.Archive = true
	}
	return infoToPB(info), nil
}

func (s *server) EnsureRunning(ctx context.Context, r *pb.EnsureRunningRequest) (*pb.EnsureRunningResponse, error) {
	spec := specFromPB(r)
	if err := validateSpec(spec); err != nil {
		return nil, toStatus(err)
	}
	sb, err := s.impl.EnsureRunning(ctx, spec)
	if err != nil {
		return nil, toStatus(err)
	}
	if sb.Ref.Name == "" {
		sb.Ref.Name = spec.Name
	}
	if sb.Ref.Config == nil {
		sb.Ref.Config = spec.Config
	}
	return sandboxToPB(sb), nil
}

func (s *server) Teardown(ctx context.Context, r *pb.TeardownRequest) (*pb.TeardownResponse, error) {
	ref := refFromPB(r.GetRef())
	if err := ValidateName(ref.Name); err != nil {
		return nil, toStatus(err)
	}
	if err := s.impl.Teardown(ctx, ref); err != nil {
		return nil, toStatus(err)
	}
	return &pb.TeardownResponse{}, nil
}

// HealthCheck answers within HealthCheckTimeout even when the provider does
// not: a late answer is abandoned and reported as a timeout.
func (s *server) HealthCheck(ctx context.Context, r *pb.HealthCheckRequest) (*pb.HealthCheckResponse, error) {
	ref := refFromPB(r.GetRef())
	if err := ValidateName(ref.Name); err != nil {
		return nil, toStatus(err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.healthTimeout)
	defer cancel()
	type result struct {
		h   Health
		err error
	}
	ch := make(chan result, 1)
	go func() {
		h, err := s.impl.HealthCheck(ctx, ref)
		ch <- result{h, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			return nil, toStatus(res.err)
		}
		return &pb.HealthCheckResponse{State: string(res.h.State), Message: res.h.Message, NeverStops: res.h.NeverStops}, nil
	case <-ctx.Done():
		return nil, status.Errorf(codes.DeadlineExceeded, "health check of sandbox %q took longer than %s", ref.Name, s.healthTimeout)
	}
}

// Forward serves the provider's Forwarder, or UNIMPLEMENTED when it has
// none. The target must be a loopback address: a provider never connects a
// sandbox to anything else of the host's.
func (s *server) Forward(r *pb.ForwardRequest, stream pb.Provider_ForwardServer) error {
	f, ok := s.impl.(Forwarder)
	if !ok {
		return status.Error(codes.Unimplemented, "this provider cannot forward ports")
	}
	req := ForwardRequest{Sandbox: refFromPB(r.GetSandbox()), Target: r.GetTarget()}
	if err := ValidateName(req.Sandbox.Name); err != nil {
		return toStatus(err)
	}
	if err := checkLoopback(req.Target); err != nil {
		return toStatus(err)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(s.base, cancel)
	defer stop()
	var sendErr error
	err := f.Forward(ctx, req, func(addr string) {
		sendErr = stream.Send(&pb.ForwardEvent{Listening: addr})
	})
	if err == nil {
		err = sendErr
	}
	return toStatus(err)
}

// checkLoopback accepts host:port with a loopback IP address.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	ip, perr := netip.ParseAddr(host)
	if err != nil || perr != nil || !ip.IsLoopback() {
		return Errorf(ErrInvalid, "forward target %q is not a loopback address (127.0.0.1:PORT or [::1]:PORT)", addr)
	}
	return nil
}

// List answers from the provider's Lister, or UNIMPLEMENTED when it has
// none. A listed sandbox whose name is not valid is a provider bug: the
// host could not use its ref, so it fails the call.
func (s *server) List(ctx context.Context, r *pb.ListRequest) (*pb.ListResponse, error) {
	l, ok := s.impl.(Lister)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this provider cannot list its sandboxes")
	}
	found, err := l.List(ctx, ListRequest{Config: r.GetConfig(), Labels: r.GetLabels()})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.ListResponse{}
	for _, f := range found {
		if err := ValidateName(f.Ref.Name); err != nil {
			return nil, toStatus(fmt.Errorf("list: %w", err))
		}
		if f.Ref.Config == nil {
			f.Ref.Config = r.GetConfig()
		}
		out.Sandboxes = append(out.Sandboxes, listedToPB(f))
	}
	return out, nil
}

// ValidateSettings answers from the provider's SettingsValidator, or
// UNIMPLEMENTED when it has none. Each problem's message is made one line.
func (s *server) ValidateSettings(ctx context.Context, r *pb.ValidateSettingsRequest) (*pb.ValidateSettingsResponse, error) {
	v, ok := s.impl.(SettingsValidator)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this provider cannot check its settings")
	}
	req := ValidateRequest{Config: r.GetConfig(), Network: networkFromPB(r.GetNetwork())}
	if err := validateNetwork(req.Network); err != nil {
		return nil, toStatus(err)
	}
	problems, err := v.ValidateSettings(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ValidateSettingsResponse{Problems: problemsToPB(problems)}, nil
}

// Preflight answers from the provider's Preflighter, or UNIMPLEMENTED
// when it has none.
func (s *server) Preflight(ctx context.Context, r *pb.EnsureRunningRequest) (*pb.PreflightResponse, error) {
	p, ok := s.impl.(Preflighter)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this provider cannot tell what would stop its sandbox from starting")
	}
	spec := specFromPB(r)
	if err := validateSpec(spec); err != nil {
		return nil, toStatus(err)
	}
	if err := p.Preflight(ctx, spec); err != nil {
		return nil, toStatus(err)
	}
	return &pb.PreflightResponse{}, nil
}

// Prepare answers from the provider's Preparer, or UNIMPLEMENTED when it
// has none.
func (s *server) Prepare(ctx context.Context, r *pb.EnsureRunningRequest) (*pb.PrepareResponse, error) {
	p, ok := s.impl.(Preparer)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this provider cannot keep a sandbox's setup")
	}
	spec := specFromPB(r)
	if err := validateSpec(spec); err != nil {
		return nil, toStatus(err)
	}
	if len(spec.Setup) == 0 {
		return nil, toStatus(Errorf(ErrInvalid, "nothing to prepare: the spec has no setup commands"))
	}
	res, err := p.Prepare(ctx, spec)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PrepareResponse{UpToDate: res.UpToDate, Ref: res.Ref, Details: res.Details}, nil
}

// PruneSetups answers from the provider's SetupPruner, or UNIMPLEMENTED
// when it has none.
func (s *server) PruneSetups(ctx context.Context, r *pb.PruneSetupsRequest) (*pb.PruneSetupsResponse, error) {
	p, ok := s.impl.(SetupPruner)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this provider keeps no setups to prune")
	}
	spec := specFromPB(r.GetSpec())
	if err := validateSpec(spec); err != nil {
		return nil, toStatus(err)
	}
	if r.GetOlderThanMs() <= 0 {
		return nil, toStatus(Errorf(ErrInvalid, "prune setups: older_than must be positive"))
	}
	var others []Spec
	for _, o := range r.GetOthers() {
		others = append(others, specFromPB(o))
	}
	res, err := p.PruneSetups(ctx, PruneRequest{Spec: spec, Others: others,
		OlderThan: time.Duration(r.GetOlderThanMs()) * time.Millisecond, DryRun: r.GetDryRun()})
	if err != nil {
		return nil, toStatus(err)
	}
	out := &pb.PruneSetupsResponse{}
	for _, ps := range res {
		out.Setups = append(out.Setups, &pb.PrunedSetup{Ref: ps.Ref, AgeMs: ps.Age.Milliseconds(), Left: ps.Left})
	}
	return out, nil
}

// Exec runs one exec stream: ExecStart, then stdin, cancel and resize from the
// host while output flows back; ExitStatus goes last, after the provider has
// returned, so all output has been sent before it.
func (s *server) Exec(stream pb.Provider_ExecServer) error {
	s.running.Add(1)
	defer s.running.Done()

	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "an exec stream must begin with ExecStart")
	}
	var data *pluginPipes
	if start.GetData() != nil {
		// Claimed first, so that the pipes are closed (the host waits
		// for their end) however the exec ends.
		claimCtx, cancelClaim := context.WithCancel(stream.Context())
		stopClaim := context.AfterFunc(s.base, cancelClaim)
		data, err = s.claimPipes(claimCtx, start)
		stopClaim()
		cancelClaim()
		if err != nil {
			return err
		}
		defer data.end()
		// The host gone, blocked writes to it must fail, as they do on
		// the stream.
		stop := context.AfterFunc(stream.Context(), data.end)
		defer stop()
	}
	req := execStartFromPB(start)
	if err := validateExec(req); err != nil {
		return toStatus(err)
	}

	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	stop := context.AfterFunc(s.base, func() { cancel(errShutdown) })
	defer stop()
	if req.Timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeoutCause(ctx, req.Timeout, errExecTimeout)
		defer cancelTimeout()
	}

	out := &outputSender{stream: stream}
	eio := ExecIO{
		Stdout: streamWriter{out, pb.Stream_STREAM_STDOUT},
		Stderr: streamWriter{out, pb.Stream_STREAM_STDERR},
	}
	var stdin *flow.Queue
	if data != nil {
		data.io(&eio)
	} else if start.GetStdin() {
		stdin = flow.NewQueue(providerwire.StdinWindow)
		r, w := io.Pipe()
		eio.Stdin = r
		go feed(stdin, w, out)
		defer func() {
			stdin.Stop()
			r.CloseWithError(errExecDone) // unblocks a write the provider never read
		}()
	}
	resize := make(chan TermSize, 1)
	eio.Resize = resize
	go receiveExec(stream, stdin, resize, cancel)

	var st ExitStatus
	if a := start.GetArchive(); a != nil {
		err = s.archive(ctx, req.Sandbox, a, eio)
	} else {
		st, err = s.impl.Exec(ctx, req, eio)
	}
	cause := context.Cause(ctx)
	if cause == errStdinOverflow {
		out.close()
		return status.Error(codes.InvalidArgument, errStdinOverflow.Error())
	}
	if err != nil {
		out.close()
		return toStatus(err)
	}
	switch cause {
	case errClientCancel:
		st.Canceled = true
	case errExecTimeout:
		st.TimedOut = true
	}
	exit := exitToPB(st)
	if data != nil {
		// Its pipes close before the exit status is sent: the host has
		// all the output when it sees it.
		data.end()
		exit.DataSent = data.sent()
	}
	return out.finish(&pb.ExecResponse{Msg: &pb.ExecResponse_Exit{Exit: exit}})
}

// receiveExec handles what the host sends after ExecStart. It never blocks
// on the process: stdin goes into a queue the host's credit bounds, so a
// Cancel is always seen. It ends when the stream does.
func receiveExec(stream pb.Provider_ExecServer, stdin *flow.Queue, resize chan TermSize, cancel context.CancelCauseFunc) {
	for {
		msg, err := stream.Recv()
		if err != nil {
			// io.EOF: the host closed its side, which also ends stdin. Any
			// other error means the stream is gone and ctx ends with it.
			stdin.Close()
			return
		}
		switch m := msg.GetMsg().(type) {
		case *pb.ExecRequest_Stdin:
			if !stdin.Push(m.Stdin) {
				cancel(errStdinOverflow)
				return
			}
		case *pb.ExecRequest_StdinEof:
			stdin.Close()
		case *pb.ExecRequest_Cancel:
			cancel(errClientCancel)
		case *pb.ExecRequest_Resize:
			size := TermSize{Rows: m.Resize.GetRows(), Cols: m.Resize.GetCols()}
			select { // keep only the latest size
			case <-resize:
			default:
			}
			resize <- size
		}
	}
}

// feed writes the queue to the provider's stdin as the process reads it and
// gives the host credit back for each chunk consumed.
func feed(q *flow.Queue, w *io.PipeWriter, out *outputSender) {
	for {
		b, ok := q.Next()
		if !ok {
			_ = w.Close()
			return
		}
		if _, err := w.Write(b); err != nil {
			return // the exec is over
		}
		q.Consumed(len(b))
		_ = out.sendMsg(&pb.ExecResponse{Msg: &pb.ExecResponse_StdinAck{StdinAck: &pb.StdinAck{Bytes: uint64(len(b))}}})
	}
}

// outputSender serialises sends on the exec stream (gRPC allows one sender at
// a time) and refuses output once the exit status is on its way.
type outputSender struct {
	mu     sync.Mutex
	stream pb.Provider_ExecServer
	done   bool
}

func (o *outputSender) send(kind pb.Stream, p []byte) error {
	return o.sendMsg(&pb.ExecResponse{Msg: &pb.ExecResponse_Output{Output: &pb.Output{Stream: kind, Data: p}}})
}

func (o *outputSender) sendMsg(m *pb.ExecResponse) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return errExecDone
	}
	return o.stream.Send(m)
}

func (o *outputSender) close() {
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
}

func (o *outputSender) finish(last *pb.ExecResponse) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.done = true
	return o.stream.Send(last)
}

type streamWriter struct {
	out  *outputSender
	kind pb.Stream
}

func (w streamWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), maxChunk)]
		if err := w.out.send(w.kind, chunk); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// archive serves an exec stream that carries an archive copy (the
// provider's Archiver) instead of a process: stdin is the tar stream to
// put, stdout the one got.
func (s *server) archive(ctx context.Context, ref SandboxRef, a *pb.Archive, eio ExecIO) error {
	ar, ok := s.impl.(Archiver)
	if !ok {
		return Errorf(ErrUnsupported, "this provider cannot copy archives into or out of a sandbox")
	}
	p := a.GetPath()
	if !path.IsAbs(p) || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return Errorf(ErrInvalid, "archive path %q is not a clean absolute path", p)
	}
	switch a.GetOp() {
	case pb.Archive_ARCHIVE_PUT:
		if eio.Stdin == nil {
			return Errorf(ErrInvalid, "an archive put needs its tar stream on stdin")
		}
		if f := a.GetFile(); f != nil {
			// Stdin is the file's bytes: the provider gets its tar stream.
			return ar.PutArchive(ctx, ref, p, &FileArchive{
				Name: f.GetName(), Mode: fs.FileMode(f.GetMode()).Perm(), UID: int(f.GetUid()), GID: int(f.GetGid()),
				ModTime: time.Unix(0, f.GetMtimeUnixNano()), Size: f.GetSize(), Body: eio.Stdin,
			})
		}
		return ar.PutArchive(ctx, ref, p, eio.Stdin)
	case pb.Archive_ARCHIVE_GET:
		if f := a.GetFile(); f != nil {
			// Stdout is to be the one file's bytes, not a tar stream.
			x := &FileFromArchive{Name: f.GetName(), File: eio.Stdout}
			err := ar.GetArchive(ctx, ref, p, x)
			if cerr := x.Close(); cerr != nil { // the better reason
				err = Errorf(ErrInvalid, "archive get %s: %v", p, cerr)
			}
			return err
		}
		return ar.GetArchive(ctx, ref, p, eio.Stdout)
	}
	return Errorf(ErrInvalid, "unknown archive operation %v", a.GetOp())
}
