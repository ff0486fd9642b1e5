package tunnel_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coresandbox "github.com/amelia-sandbox/amelia/core/sandbox"
	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/tunnel"
	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// workerBin is amelia-worker, built once by TestMain. The local provider runs
// host processes, so its host path is also its path "inside the sandbox".
var workerBin string

// The test binary doubles as the local provider plugin (sandboxtest), so the
// tests reach the sandbox exactly as amelia does.
func TestMain(m *testing.M) {
	if sandboxtest.ServePlugin() {
		return
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if _, err := exec.LookPath("curl"); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL: the tunnel tests need curl on PATH (apt-get install curl); it is what connects through the tunnel inside the sandbox")
		return 1
	}
	return testbin.Main(m, func(dir string) (err error) {
		workerBin, err = testbin.BuildWorker(dir)
		return err
	})
}

// workerEnv is the tunnel exec's extra environment: a race-enabled worker
// would otherwise sleep a second at exit.
var workerEnv = map[string]string{"GORACE": "atexit_sleep_ms=0"}

// amelia run opens tunnels on core/sandbox's sandboxes.
var _ sandboxexec.Execer = (*coresandbox.Sandbox)(nil)

// sandbox is a local sandbox behind the provider plugin that counts its
// Execs: an sandboxexec.Execer, as core/sandbox.Sandbox is.
type sandbox struct {
	*sandboxtest.Sandbox
	execs atomic.Int32
}

func (s *sandbox) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	s.execs.Add(1)
	return s.Sandbox.Exec(ctx, req, eio)
}

func newSandbox(t testing.TB) *sandbox {
	return &sandbox{Sandbox: sandboxtest.New(t, "tunnel")}
}

type result = sandboxtest.Result

// run runs argv in the sandbox, beside the tunnel's exec.
func (s *sandbox) run(t testing.TB, stdin io.Reader, argv ...string) result {
	t.Helper()
	return s.Run(t, nil, stdin, argv...)
}

// curl fetches url from inside the sandbox.
func (s *sandbox) curl(t testing.TB, args ...string) result {
	t.Helper()
	return s.run(t, nil, append([]string{"curl", "-sS", "--max-time", "20"}, args...)...)
}

// Exit codes of curl.
const (
	curlCannotConnect = 7
	curlTimedOut      = 28
)

// open opens a tunnel to target and closes it when the test ends, checking
// then that nothing of it is left running.
func open(t testing.TB, ex sandboxexec.Execer, opts tunnel.HostOptions) *tunnel.Host {
	t.Helper()
	if opts.Worker == "" {
		opts.Worker = workerBin
	}
	if opts.Env == nil {
		opts.Env = workerEnv
	}
	if opts.Logger == nil {
		opts.Logger = testLogger(t, nil)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	h, err := tunnel.Open(ctx, ex, opts)
	if err != nil {
		t.Fatalf("open tunnel: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		checkNoGoroutines(t)
	})
	return h
}

// testLogger logs to the test's log, and to w when it is not nil.
func testLogger(t testing.TB, w io.Writer) *slog.Logger {
	out := io.Writer(tWriter{t})
	if w != nil {
		out = io.MultiWriter(out, w)
	}
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// lockedBuffer is a bytes.Buffer for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// leaked are functions that must not be running once a tunnel is done: its
// own goroutines, and the plugin client's stdin pump of the tunnel exec.
var leaked = []string{"core/tunnel.(*Host)", "core/tunnel.pipe", "core/tunnel.Open", "(*execClientSender).pumpStdin"}

// checkNoGoroutines fails when a goroutine of a finished tunnel is still
// there. A goroutine that has signalled that it is done may still be on its
// way out, so the check is retried for a while before it fails: a minute,
// which a goroutine on its way out does not take even at load 20+, and a
// leaked one outlasts.
func checkNoGoroutines(t testing.TB) {
	t.Helper()
	var stacks string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		found := false
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, f := range leaked {
				if strings.Contains(g, f) && !strings.Contains(g, "checkNoGoroutines") {
					found = true
				}
			}
		}
		if !found {
			return
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // polling, as goleak does
	}
	t.Errorf("tunnel goroutines still running after the tunnel ended:\n%s", stacks)
}

// waitDone waits for the tunnel to end; the test's deadline bounds it.
func waitDone(t *testing.T, h *tunnel.Host) {
	t.Helper()
	<-h.Done()
}

// hostServer is the tunnel's target: an HTTP server on host loopback that
// records the requests it gets.
type hostServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newHostServer(t *testing.T, extra http.Handler) *hostServer {
	s := &hostServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("/sha256", func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d %x", n, h.Sum(nil))
	})
	if extra != nil {
		mux.Handle("/block", extra)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		fmt.Fprintf(w, "hello from the host: %s", r.URL.Path)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *hostServer) record(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, r.Method+" "+r.URL.Path)
}

func (s *hostServer) saw(req string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.seen {
		if r == req {
			return true
		}
	}
	return false
}

func (s *hostServer) target() string { return s.Listener.Addr().String() }

// Through the real plugin: curl inside the sandbox reaches the HTTP server on
// host loopback, one request, several at once, and an 8 MiB body intact.
func TestEndToEnd(t *testing.T) {
	sb := newSandbox(t)
	srv := newHostServer(t, nil)
	h := open(t, sb, tunnel.HostOptions{Target: srv.target()})
	if host, port, err := net.SplitHostPort(h.Addr()); err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("Addr = %q, want 127.0.0.1 and the port chosen in the sandbox", h.Addr())
	}
	base := "http://" + h.Addr()

	r := sb.curl(t, base+"/path")
	if r.Status.Code != 0 || r.Stdout != "hello from the host: /path" {
		t.Fatalf("curl through the tunnel: %v", r)
	}
	if !srv.saw("GET /path") {
		t.Error("the host server did not see GET /path")
	}

	t.Run("concurrent", func(t *testing.T) {
		const n = 8
		var wg sync.WaitGroup
		results := make([]result, n)
		for i := range n {
			wg.Go(func() { results[i] = sb.curl(t, fmt.Sprintf("%s/c/%d", base, i)) })
		}
		wg.Wait()
		for i, r := range results {
			if want := fmt.Sprintf("hello from the host: /c/%d", i); r.Status.Code != 0 || r.Stdout != want {
				t.Errorf("curl %d: %v, want %q", i, r, want)
			}
			if !srv.saw(fmt.Sprintf("GET /c/%d", i)) {
				t.Errorf("the host server did not see GET /c/%d", i)
			}
		}
	})

	t.Run("8MiB body", func(t *testing.T) {
		body := make([]byte, 8<<20)
		rand.Read(body)
		if r := sb.run(t, bytes.NewReader(body), "sh", "-c", "cat > body.bin"); r.Status.Code != 0 {
			t.Fatalf("write body.bin in the sandbox: %v", r)
		}
		sum := sha256.Sum256(body)
		r := sb.curl(t, "--data-binary", "@body.bin", "-H", "Content-Type: application/octet-stream", base+"/sha256")
		if want := fmt.Sprintf("%d %x", len(body), sum); r.Status.Code != 0 || r.Stdout != want {
			t.Fatalf("POST 8 MiB: %v, want %q", r, want)
		}
	})

	select {
	case <-h.Done():
		t.Fatalf("the tunnel ended: %v", h.Err())
	default:
	}
}

// wrapper writes a shell script that stands in for the worker path: it runs
// amelia-worker after noting something about it (its pid, its exit status)
// in the sandbox's working directory.
func wrapper(t *testing.T, script string) string {
	path := filepath.Join(t.TempDir(), "worker-wrapper")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func withEnv(kv ...string) map[string]string {
	env := map[string]string{"TUNNEL_WORKER": workerBin}
	for k, v := range workerEnv {
		env[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return env
}

// The tunnel exec is killed while a connection is open through it: Done
// closes with the exit status, the open request fails at once instead of
// hanging, the host side of the connection ends, and the address is gone.
func TestExecDies(t *testing.T) {
	sb := newSandbox(t)
	entered := make(chan struct{}, 1)
	hostSideGone := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := newHostServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		entered <- struct{}{}
		select {
		case <-r.Context().Done():
			hostSideGone <- struct{}{}
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for handlers

	// exec keeps the pid: the wrapper's pid is the worker's.
	worker := wrapper(t, `echo $$ > tunnel.pid; exec "$TUNNEL_WORKER" "$@"`)
	h := open(t, sb, tunnel.HostOptions{Worker: worker, Target: srv.target(), Env: withEnv()})
	base := "http://" + h.Addr()

	curled := make(chan result, 1)
	go func() { curled <- sb.curl(t, base+"/block") }()
	select {
	case <-entered:
	case r := <-curled:
		t.Fatalf("curl ended before the host handler ran: %v", r)
	}

	if r := sb.run(t, nil, "sh", "-c", "kill -KILL $(cat tunnel.pid)"); r.Status.Code != 0 {
		t.Fatalf("kill the tunnel worker: %v", r)
	}
	waitDone(t, h)
	err := h.Err()
	if err == nil || !strings.Contains(err.Error(), "exit status 137 (signal KILL)") ||
		!strings.HasPrefix(err.Error(), "tunnel to sandbox ended: ") || strings.Contains(err.Error(), "\n") {
		t.Errorf("Err = %v, want one line: tunnel to sandbox ended: ... exit status 137 (signal KILL)", err)
	}

	r := <-curled
	if r.Status.Code == 0 || r.Status.Code == curlTimedOut {
		t.Errorf("the open request through the dead tunnel: %v, want a failure other than a timeout", r)
	}
	<-hostSideGone // the host side of the connection closes after the tunnel died
	if r := sb.curl(t, base+"/path"); r.Status.Code != curlCannotConnect {
		t.Errorf("a new connection after the tunnel died: %v, want curl exit %d (cannot connect)", r, curlCannotConnect)
	}
	checkNoGoroutines(t)
}

func TestOpenWithMissingWorker(t *testing.T) {
	sb := newSandbox(t)
	srv := newHostServer(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	h, err := tunnel.Open(ctx, sb, tunnel.HostOptions{Worker: "/nonexistent/amelia-worker", Target: srv.target(), Logger: testLogger(t, nil)})
	if err == nil {
		h.Close()
		t.Fatal("Open with a missing worker succeeded")
	}
	if !strings.Contains(err.Error(), "exit status 127") || !strings.Contains(err.Error(), "/nonexistent/amelia-worker") {
		t.Errorf("err = %v, want the exit code 127 and the worker path", err)
	}
	checkNoGoroutines(t)
}

// A worker that exits with an error before its hello: its status and stderr
// are in Open's error.
func TestOpenWithFailingWorker(t *testing.T) {
	sb := newSandbox(t)
	srv := newHostServer(t, nil)
	worker := wrapper(t, `echo "cannot start: no space left" >&2; exit 3`)
	_, err := tunnel.Open(t.Context(), sb, tunnel.HostOptions{Worker: worker, Target: srv.target(), Logger: testLogger(t, nil)})
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "cannot start: no space left") {
		t.Errorf("err = %v, want exit code 3 and the stderr line", err)
	}
	checkNoGoroutines(t)
}

// Open gives up when its context ends before the hello, and stops the exec.
// The context ends once the worker has said something on stderr (it then
// writes to a FIFO the test reads), whatever the machine's speed.
func TestOpenBoundedByContext(t *testing.T) {
	sb := newSandbox(t)
	srv := newHostServer(t, nil)
	fifo := filepath.Join(t.TempDir(), "said")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Read-write, so opening it waits for no writer; closing it ends the
	// read below if the worker never writes.
	said, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer said.Close()
	worker := wrapper(t, `echo started >&2; echo said >"`+fifo+`"; exec sleep 600`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	opened := make(chan error, 1)
	go func() {
		_, err := tunnel.Open(ctx, sb, tunnel.HostOptions{Worker: worker, Target: srv.target(), Logger: testLogger(t, nil)})
		opened <- err
	}()
	spoke := make(chan struct{})
	go func() {
		if _, err := said.Read(make([]byte, 1)); err == nil {
			close(spoke)
		}
	}()
	select {
	case <-spoke:
		cancel()
	case err := <-opened:
		t.Fatalf("Open ended before the worker spoke: %v", err)
	}
	if err := <-opened; err == nil || !strings.Contains(err.Error(), "context canceled") || !strings.Contains(err.Error(), "started") {
		t.Errorf("err = %v, want the context's end and the worker's stderr", err)
	}
	checkNoGoroutines(t)
}

// warnings is a slog handler that keeps the records of level Warn and
// above, and hands every record on to next.
type warnings struct {
	next    slog.Handler
	mu      *sync.Mutex
	records *[]slog.Record
}

func newWarnings(next slog.Handler) *warnings {
	return &warnings{next: next, mu: &sync.Mutex{}, records: &[]slog.Record{}}
}

func (w *warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || w.next.Enabled(ctx, l)
}

func (w *warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		*w.records = append(*w.records, r.Clone())
		w.mu.Unlock()
	}
	return w.next.Handle(ctx, r)
}

func (w *warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return &warnings{next: w.next.WithAttrs(as), mu: w.mu, records: w.records}
}

func (w *warnings) WithGroup(name string) slog.Handler {
	return &warnings{next: w.next.WithGroup(name), mu: w.mu, records: w.records}
}

// messages are the kept records' messages.
func (w *warnings) messages() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var m []string
	for _, r := range *w.records {
		m = append(m, r.Message)
	}
	return m
}

// A run's tunnel (HostOptions.Run) carried by the real worker ends with
// its run: once the run that said hello through it has ended, Err is
// ErrRunEnded and nothing is logged as a warning, for that is how such a
// tunnel ends.
func TestRunTunnelEndsWithItsRun(t *testing.T) {
	sb := newSandbox(t)
	srv := newHostServer(t, nil)
	// The run's command lasts until the test writes to go-on.
	goOn := filepath.Join(t.TempDir(), "go-on")
	if err := syscall.Mkfifo(goOn, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	if r := sb.Run(t, withEnv("AMELIA_PROXY_TOKEN", "run-token"), nil,
		workerBin, "detach", "--dir", dir, "--grace", "2s", "--tunnel", "--", "cat", goOn); r.Status.Code != 0 {
		t.Fatalf("detach --tunnel: %s", r)
	}
	t.Cleanup(func() { exec.Command(workerBin, "stop", "--dir", dir).Run() })

	warned := newWarnings(testLogger(t, nil).Handler())
	h := open(t, sb, tunnel.HostOptions{Run: dir, Target: srv.target(), Logger: slog.New(warned)})
	if h.Addr() == "" {
		t.Fatal("the run's tunnel said hello without an address")
	}
	if err := os.WriteFile(goOn, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitDone(t, h)
	if err := h.Err(); !errors.Is(err, tunnel.ErrRunEnded) {
		t.Errorf("Err = %v, want ErrRunEnded", err)
	}
	if w := warned.messages(); len(w) != 0 {
		t.Errorf("the tunnel of a run that ended warned: %q", w)
	}
}

func TestOpenRefusesNonLoopbackTargets(t *testing.T) {
	sb := &sandbox{} // never used: nothing may start
	for _, target := range []string{"0.0.0.0:80", "192.0.2.1:80", "host.example:80", "localhost:80", "[::]:80", "198.51.100.1:8080", "127.0.0.1", "127.0.0.1:0", ""} {
		_, err := tunnel.Open(t.Context(), sb, tunnel.HostOptions{Worker: workerBin, Target: target})
		if err == nil || !strings.Contains(err.Error(), "tunnel target") {
			t.Errorf("target %q: err = %v, want a refusal naming the target", target, err)
		}
	}
	for _, listen := range []string{"0.0.0.0:0", "192.0.2.1:8080", ":8080"} {
		_, err := tunnel.Open(t.Context(), sb, tunnel.HostOptions{Worker: workerBin, Target: "127.0.0.1:8080", Listen: listen})
		if err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("listen %q: err = %v, want a refusal", listen, err)
		}
	}
	if n := sb.execs.Load(); n != 0 {
		t.Errorf("%d execs started for refused options", n)
	}
}

// Close closes the exec's stdin and the worker exits 0 on its own.
func TestCloseIsGraceful(t *testing.T) {
	sb := newSandbox(t)
	srv := newHostServer(t, nil)
	worker := wrapper(t, `"$TUNNEL_WORKER" "$@"; code=$?; echo $code > tunnel.status; exit $code`)
	h := open(t, sb, tunnel.HostOptions{Worker: worker, Target: srv.target(), Env: withEnv()})
	if r := sb.curl(t, "http://"+h.Addr()+"/before-close"); r.Status.Code != 0 {
		t.Fatalf("curl: %v", r)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	default:
		t.Fatal("Done is open after Close returned")
	}
	if err := h.Err(); err != nil {
		t.Errorf("Err after Close = %v, want nil", err)
	}
	// The worker wrote its status: it exited on its own, and was not
	// cancelled after Close's wait (the exec's SIGTERM would have killed the
	// wrapper before that).
	if r := sb.run(t, nil, "cat", "tunnel.status"); r.Status.Code != 0 || strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("the worker's exit status: %v, want 0", r)
	}
	if r := sb.curl(t, "http://"+h.Addr()+"/after-close"); r.Status.Code != curlCannotConnect {
		t.Errorf("a connection after Close: %v, want curl exit %d (cannot connect)", r, curlCannotConnect)
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	checkNoGoroutines(t)
}

// With nothing listening at Target, a connection through the tunnel is
// closed, the tunnel stays up, and it serves the next connection once Target
// listens.
func TestTargetUnreachable(t *testing.T) {
	sb := newSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()

	var logs lockedBuffer
	h := open(t, sb, tunnel.HostOptions{Target: target, Logger: testLogger(t, &logs)})
	r := sb.curl(t, "http://"+h.Addr()+"/nobody-home")
	if r.Status.Code == 0 || r.Status.Code == curlTimedOut || r.Status.Code == curlCannotConnect {
		t.Errorf("curl with the target down: %v, want the connection closed by the tunnel", r)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "cannot reach the target") {
		t.Errorf("no warning about the unreachable target in the log:\n%s", logs.String())
	}
	select {
	case <-h.Done():
		t.Fatalf("the tunnel ended: %v", h.Err())
	default:
	}

	ln, err = net.Listen("tcp", target)
	if err != nil {
		t.Fatalf("listen on the target's port again: %v", err)
	}
	srv := &hostServer{}
	srv.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.record(r)
		io.WriteString(w, "up now")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	if r := sb.curl(t, "http://"+h.Addr()+"/again"); r.Status.Code != 0 || r.Stdout != "up now" || !srv.saw("GET /again") {
		t.Errorf("curl once the target listens: %v", r)
	}
}

// Every connection's bytes pass through unchanged, in both directions, when
// the target only answers after the client has finished sending (half-close).
func TestHalfClose(t *testing.T) {
	sb := newSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: close the listener, then wait.
	var served sync.WaitGroup
	t.Cleanup(served.Wait)
	t.Cleanup(func() { ln.Close() })
	served.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			served.Go(func() {
				defer c.Close()
				got, _ := io.ReadAll(c) // until the sandbox side's half-close
				io.WriteString(c, strconv.Itoa(len(got))+" bytes, reversed: "+reverse(string(got)))
			})
		}
	})
	h := open(t, sb, tunnel.HostOptions{Target: ln.Addr().String()})
	// The local sandbox shares the host's loopback, so the test process can
	// be the client inside the sandbox (curl cannot half-close).
	c, err := net.Dial("tcp", h.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "abcdef")
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "6 bytes, reversed: fedcba" {
		t.Errorf("answer after half-close: %q, %v", got, err)
	}
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// The exec's address is reported as the sandbox end resolved it, and Listen
// is passed through.
func TestListenAddress(t *testing.T) {
	sb := newSandbox(t)
	srv := newHostServer(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	want := ln.Addr().String()
	ln.Close()
	h := open(t, sb, tunnel.HostOptions{Target: srv.target(), Listen: want})
	if h.Addr() != want {
		t.Errorf("Addr = %q, want %q", h.Addr(), want)
	}
	if r := sb.curl(t, "http://"+want+"/fixed"); r.Status.Code != 0 || r.Stdout != "hello from the host: /fixed" {
		t.Errorf("curl: %v", r)
	}
}
