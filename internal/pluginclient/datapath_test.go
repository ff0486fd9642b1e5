package pluginclient_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// The bytes of an exec through the plugin, over each path they can take:
// the data channel, and gRPC when the host offers none or the plugin (of
// an older SDK) declines it.

// dataPaths are the ways a host and a plugin can agree to move exec bytes.
var dataPaths = []struct {
	name     string
	mode     string // the test plugin's mode
	opts     pluginclient.LaunchOptions
	wantData bool
}{
	{"data channel", "", pluginclient.LaunchOptions{}, true},
	{"host offers none", "", pluginclient.LaunchOptions{NoDataChannel: true}, false},
	{"plugin declines", "nodata", pluginclient.LaunchOptions{}, false},
}

// launchPath starts the test plugin as one of dataPaths says and checks
// that it took the path it should.
func launchPath(t *testing.T, mode string, opts pluginclient.LaunchOptions, wantData bool) *pluginclient.Plugin {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), testModeEnv+"="+mode)
	opts.Name = "test-" + mode
	p, err := pluginclient.Launch(cmd, opts)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	t.Cleanup(p.Close)
	if got := p.DataChannel(); got != wantData {
		t.Fatalf("DataChannel() = %v, want %v", got, wantData)
	}
	return p
}

// randomInput is n bytes of a seeded random stream and their sha256.
func randomInput(n int64, seed uint64) (io.Reader, [32]byte) {
	h := sha256.New()
	_, _ = io.Copy(h, io.LimitReader(rand.NewChaCha8(seedBytes(seed)), n))
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return io.LimitReader(rand.NewChaCha8(seedBytes(seed)), n), sum
}

func seedBytes(seed uint64) [32]byte {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return s
}

// hashWriter hashes and counts what it is given.
type hashWriter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newHashWriter() *hashWriter { return &hashWriter{h: sha256.New()} }

func (w *hashWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return w.h.Write(p)
}

func (w *hashWriter) sum() [32]byte {
	var s [32]byte
	copy(s[:], w.h.Sum(nil))
	return s
}

// 64 MiB go in through stdin and come back out of stdout unchanged, stdin's
// end reaches the process (cat ends on it), and stderr arrives beside.
func TestExecBytesArriveWhole(t *testing.T) {
	const size = 64 << 20
	for _, path := range dataPaths {
		t.Run(path.name, func(t *testing.T) {
			p := launchPath(t, path.mode, path.opts, path.wantData)
			in, want := randomInput(size, 1)
			out, errOut := newHashWriter(), &strings.Builder{}
			st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", "cat; echo stdin ended >&2"}},
				sdk.ExecIO{Stdin: in, Stdout: out, Stderr: errOut})
			if err != nil || st.Code != 0 {
				t.Fatalf("exec: %+v %v", st, err)
			}
			if out.n != size || out.sum() != want {
				t.Errorf("stdout: %d bytes, sha256 %x; want the %d bytes of stdin, sha256 %x", out.n, out.sum(), size, want)
			}
			if errOut.String() != "stdin ended\n" {
				t.Errorf("stderr = %q, want %q", errOut.String(), "stdin ended\n")
			}
		})
	}
}

// A plugin may give a process the caller's own output file
// (sdk.OutputFile) as it is, and only that: a pipe the host reads counts
// what comes through it, which a process writing it directly would
// bypass.
func TestExecOwnOutputFile(t *testing.T) {
	p := launchPath(t, "ownfile", pluginclient.LaunchOptions{}, true)
	const size = 8 << 20
	f, err := os.Create(t.TempDir() + "/out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, want := randomInput(size, 3)
	var errOut strings.Builder
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"cat"}}, sdk.ExecIO{Stdin: in, Stdout: sdk.OutputFile{File: f}, Stderr: &errOut})
	if err != nil || st.Code != 0 || errOut.String() != "own=true\n" {
		t.Fatalf("exec into a file: %+v %v, stderr %q", st, err, errOut.String())
	}
	got := newHashWriter()
	if _, err := io.Copy(got, io.NewSectionReader(f, 0, size+1)); err != nil || got.n != size || got.sum() != want {
		t.Errorf("the file holds %d bytes, sha256 %x (%v); want the %d of stdin, %x", got.n, got.sum(), err, size, want)
	}

	in, want = randomInput(size, 4)
	out := newHashWriter()
	errOut.Reset()
	st, err = p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"cat"}}, sdk.ExecIO{Stdin: in, Stdout: out, Stderr: &errOut})
	if err != nil || st.Code != 0 || errOut.String() != "own=false\n" || out.n != size || out.sum() != want {
		t.Errorf("exec into a writer: %+v %v, stderr %q, %d bytes", st, err, errOut.String(), out.n)
	}
}

// An exec without stdin, or with an empty one, sees its end at once; one
// without output writers still runs.
func TestExecStdinEnds(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path.name, func(t *testing.T) {
			p := launchPath(t, path.mode, path.opts, path.wantData)
			for _, stdin := range []io.Reader{nil, strings.NewReader("")} {
				var out strings.Builder
				st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"wc", "-c"}}, sdk.ExecIO{Stdin: stdin, Stdout: &out})
				if err != nil || st.Code != 0 || strings.TrimSpace(out.String()) != "0" {
					t.Errorf("stdin %v: wc -c said %q (%+v %v), want 0", stdin, out.String(), st, err)
				}
			}
			st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", "head -c 1000000 /dev/zero; exit 3"}}, sdk.ExecIO{})
			if err != nil || st.Code != 3 {
				t.Errorf("exec with no writers: %+v %v, want exit 3", st, err)
			}
		})
	}
}

// endless is stdin that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// cancelAfter cancels once it has been given n bytes.
type cancelAfter struct {
	n      int64
	cancel context.CancelFunc
}

func (w *cancelAfter) Write(p []byte) (int, error) {
	if w.n -= int64(len(p)); w.n <= 0 {
		w.cancel()
	}
	return len(p), nil
}

// Cancelling an exec in the middle of an endless stream both ways stops it,
// and its status says it was cancelled.
func TestExecCancelMidStream(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path.name, func(t *testing.T) {
			p := launchPath(t, path.mode, path.opts, path.wantData)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			st, err := p.Exec(ctx, sdk.ExecRequest{Sandbox: ref, Argv: []string{"cat"}},
				sdk.ExecIO{Stdin: endless{}, Stdout: &cancelAfter{n: 8 << 20, cancel: cancel}})
			if err != nil || !st.Canceled {
				t.Fatalf("exec: %+v %v, want a cancelled exit", st, err)
			}
			// The plugin is still good for the next exec.
			var out strings.Builder
			if st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"echo", "after"}}, sdk.ExecIO{Stdout: &out}); err != nil || st.Code != 0 || out.String() != "after\n" {
				t.Errorf("exec after the cancel: %+v %v, %q", st, err, out.String())
			}
		})
	}
}

// A failed write to the host's writer ends the exec with that error.
func TestExecWriteErrorEndsIt(t *testing.T) {
	for _, path := range dataPaths {
		t.Run(path.name, func(t *testing.T) {
			p := launchPath(t, path.mode, path.opts, path.wantData)
			_, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"cat", "/dev/zero"}}, sdk.ExecIO{Stdout: failingWriter{}})
			if err == nil || !strings.Contains(err.Error(), "write exec stdout: disk full") {
				t.Errorf("err = %v, want the write's error", err)
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }

// Many execs at once on one plugin each get their own bytes back.
func TestConcurrentExecsKeepTheirBytes(t *testing.T) {
	const execs, size = 16, 2 << 20
	for _, path := range dataPaths {
		t.Run(path.name, func(t *testing.T) {
			p := launchPath(t, path.mode, path.opts, path.wantData)
			var wg sync.WaitGroup
			errs := make(chan error, execs)
			for i := range execs {
				wg.Go(func() {
					in, want := randomInput(size, uint64(100+i))
					out, errOut := newHashWriter(), &strings.Builder{}
					argv := []string{"sh", "-c", fmt.Sprintf("cat; echo exec %d >&2", i)}
					st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: argv}, sdk.ExecIO{Stdin: in, Stdout: out, Stderr: errOut})
					switch {
					case err != nil || st.Code != 0:
						errs <- fmt.Errorf("exec %d: %+v %v", i, st, err)
					case out.n != size || out.sum() != want:
						errs <- fmt.Errorf("exec %d: stdout is not its stdin (%d bytes)", i, out.n)
					case errOut.String() != fmt.Sprintf("exec %d\n", i):
						errs <- fmt.Errorf("exec %d: stderr %q", i, errOut.String())
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// The plugin's processes do not inherit the data channel: their only
// sockets are none.
func TestDataChannelStaysWithThePlugin(t *testing.T) {
	p := launchPath(t, "", pluginclient.LaunchOptions{}, true)
	var out strings.Builder
	st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: []string{"sh", "-c", "ls -l /proc/$$/fd; env"}}, sdk.ExecIO{Stdout: &out})
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %+v %v", st, err)
	}
	if strings.Contains(out.String(), "socket:") {
		t.Errorf("a process of the plugin holds a socket:\n%s", out.String())
	}
	if strings.Contains(out.String(), "AMELIA_PROVIDER_DATA_FD") {
		t.Errorf("a process of the plugin sees the data channel's variable:\n%s", out.String())
	}
}
