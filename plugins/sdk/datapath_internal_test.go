package sdk

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/amelia-sandbox/amelia/plugins/sdk/internal/datachan"
)

// serveData puts p behind the gRPC shim with a data channel, both ends in
// this process, so a test can see both sides of a stream at once.
func serveData(t *testing.T, p Provider) *Client {
	t.Helper()
	host, plugin, err := datachan.Pair()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(p)
	srv.data = plugin
	gs := grpc.NewServer()
	RegisterServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		gs.Stop()
		_ = host.Close()
		_ = plugin.Close()
	})
	return newClient(cc, host)
}

// ratchet lets the consumer of a stream take one more piece each time the
// producer has got well ahead of it, and records how far ahead it ever
// got: with working flow control never more than a window (and a copy
// buffer) however slow the consumer, without it the whole stream.
type ratchet struct {
	total    int64
	produced atomic.Int64
	consumed atomic.Int64
	ahead    atomic.Int64 // the most produced ever exceeded consumed by
	progress chan struct{}
	turn     chan struct{} // one piece for the consumer
}

func newRatchet(total int64) *ratchet {
	return &ratchet{total: total, progress: make(chan struct{}, 1), turn: make(chan struct{})}
}

// produce counts n bytes the producer got through.
func (r *ratchet) produce(n int) {
	p := r.produced.Add(int64(n))
	if d := p - r.consumed.Load(); d > r.ahead.Load() {
		r.ahead.Store(d) // produce has one caller at a time
	}
	select {
	case r.progress <- struct{}{}:
	default:
	}
}

// consume waits for its turn, then counts n bytes consumed.
func (r *ratchet) consume(ctx context.Context, n int) bool {
	select {
	case <-r.turn:
		r.consumed.Add(int64(n))
		return true
	case <-ctx.Done():
		return false
	}
}

// run gives the consumer its turns, each once the producer is half a
// window ahead (or done), until it has consumed everything.
func (r *ratchet) run(ctx context.Context) bool {
	for r.consumed.Load() < r.total {
		for r.produced.Load() < min(r.total, r.consumed.Load()+datachan.Window/2) {
			select {
			case <-r.progress:
			case <-ctx.Done():
				return false
			}
		}
		select {
		case r.turn <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// ratchetWriter is a consumer of output that takes a piece per turn.
type ratchetWriter struct {
	ctx context.Context
	r   *ratchet
}

func (w ratchetWriter) Write(p []byte) (int, error) {
	if !w.r.consume(w.ctx, len(p)) {
		return 0, w.ctx.Err()
	}
	return len(p), nil
}

// countingReader is endless input that counts what was read from it.
type countingReader struct{ r *ratchet }

func (c countingReader) Read(p []byte) (int, error) {
	left := c.r.total - c.r.produced.Load()
	if left <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), left)]
	clear(p)
	c.r.produce(len(p))
	return len(p), nil
}

// flowProvider writes stdout as fast as it is taken, or reads stdin a
// piece per turn, through a ratchet.
type flowProvider struct {
	stubProvider
	r     *ratchet
	stdin bool
}

func (p *flowProvider) Exec(ctx context.Context, _ ExecRequest, eio ExecIO) (ExitStatus, error) {
	buf := make([]byte, 64<<10)
	if p.stdin {
		for {
			if !p.r.consume(ctx, 0) {
				return ExitStatus{}, ctx.Err()
			}
			n, err := eio.Stdin.Read(buf)
			p.r.consumed.Add(int64(n))
			if err == io.EOF {
				return ExitStatus{}, nil
			}
			if err != nil {
				return ExitStatus{}, err
			}
		}
	}
	for p.r.produced.Load() < p.r.total {
		n, err := eio.Stdout.Write(buf)
		p.r.produce(n)
		if err != nil {
			return ExitStatus{}, err
		}
	}
	return ExitStatus{}, nil
}

// A slow reader holds the other end back: neither the plugin (output) nor
// the host (stdin) gets more than a window and a copy buffer ahead of it,
// so neither buffers without bound.
func TestDataChannelBackPressure(t *testing.T) {
	const total = 64 << 20
	bound := int64(datachan.Window + dataCopyBuffer)
	for _, stdin := range []bool{false, true} {
		name := map[bool]string{false: "slow output reader", true: "slow stdin reader"}[stdin]
		t.Run(name, func(t *testing.T) {
			r := newRatchet(total)
			c := serveData(t, &flowProvider{r: r, stdin: stdin})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			eio := ExecIO{Stdout: ratchetWriter{ctx, r}}
			if stdin {
				eio = ExecIO{Stdin: countingReader{r}}
			}
			done := make(chan error, 1)
			go func() {
				st, err := c.Exec(ctx, ExecRequest{Sandbox: SandboxRef{Name: "t"}, Argv: []string{"x"}}, eio)
				if err == nil && st.Code != 0 {
					err = io.ErrUnexpectedEOF
				}
				done <- err
			}()
			if !r.run(ctx) {
				t.Fatalf("the stream stalled: %d of %d bytes through", r.consumed.Load(), total)
			}
			if stdin {
				go func() { // the provider's last read, which sees the end
					select {
					case r.turn <- struct{}{}:
					case <-ctx.Done():
					}
				}()
			}
			if err := <-done; err != nil {
				t.Fatalf("exec: %v", err)
			}
			if ahead := r.ahead.Load(); ahead > bound || ahead < datachan.Window/2 {
				t.Errorf("the producer got %d bytes ahead of the slow reader; want at most %d (a window and a copy buffer) and at least half a window", ahead, bound)
			}
		})
	}
}
