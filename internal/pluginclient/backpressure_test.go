package pluginclient_test

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// What a slow reader leaves in flight on the data channel is bounded by the
// pipes' buffers, whichever end is slow: the bytes a process wrote and the
// host has not yet been given, or the host's stdin not yet consumed by the
// process, stay within maxInFlight while many times that passes.

const (
	// paceEnv makes the test binary a process of an exec that writes
	// ("write") or reads ("read") pacedTotal bytes in pacedChunk pieces,
	// the reader working on each; progressEnv names the file where it
	// keeps the count of bytes it has moved so far (8 bytes, big-endian).
	paceEnv     = "AMELIA_SDK_TEST_PACE"
	progressEnv = "AMELIA_SDK_TEST_PROGRESS"

	pacedTotal = 64 << 20
	pacedChunk = 64 << 10
	// maxInFlight: two pipes of 1 MiB (the process's and the host's),
	// a read buffer of 256 KiB at each end, and slack.
	maxInFlight = 4 << 20
	// workRounds is how many times a slow reader hashes each chunk: its
	// work, which makes it slower than a writer of zeros.
	workRounds = 8
)

// runPaced is the process of a paced exec.
func runPaced(mode, progressFile string) int {
	progress, err := os.OpenFile(progressFile, os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	buf := make([]byte, pacedChunk)
	var done int64
	for done < pacedTotal {
		var n int
		if mode == "write" {
			n, err = os.Stdout.Write(buf)
		} else {
			n, err = os.Stdin.Read(buf)
			work(buf[:n])
		}
		done += int64(n)
		if _, perr := progress.WriteAt(binary.BigEndian.AppendUint64(nil, uint64(done)), 0); perr != nil {
			err = perr
		}
		if err == io.EOF && done == pacedTotal {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// work is what a slow reader does with each piece it reads.
func work(p []byte) {
	for range workRounds {
		sum := sha256.Sum256(p)
		p[0] ^= sum[0]
	}
}

// progressOf reads a paced process's count.
type progressOf struct {
	t *testing.T
	f *os.File
}

func (p progressOf) now() int64 {
	var b [8]byte
	if _, err := p.f.ReadAt(b[:], 0); err != nil {
		p.t.Fatalf("read the process's progress: %v", err)
	}
	return int64(binary.BigEndian.Uint64(b[:]))
}

// newProgress makes a paced process's progress file.
func newProgress(t *testing.T) progressOf {
	name := filepath.Join(t.TempDir(), "progress")
	if err := os.WriteFile(name, make([]byte, 8), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return progressOf{t: t, f: f}
}

func pacedArgv(t *testing.T, mode string, p progressOf) []string {
	return []string{"env", paceEnv + "=" + mode, progressEnv + "=" + p.f.Name(), os.Args[0]}
}

// slowWriter is a host's writer that works on what it is given, and
// notes the most the process had written beyond it.
type slowWriter struct {
	progress progressOf
	got      int64
	peak     int64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.peak = max(w.peak, w.progress.now()-w.got)
	work(p)
	w.got += int64(len(p))
	return len(p), nil
}

// countingZeros is a host's stdin of zeros that notes the most it had
// given beyond what the process consumed.
type countingZeros struct {
	progress progressOf
	given    int64
	peak     int64
}

func (z *countingZeros) Read(p []byte) (int, error) {
	if z.given >= pacedTotal {
		return 0, io.EOF
	}
	z.peak = max(z.peak, z.given-z.progress.now())
	p = p[:min(int64(len(p)), pacedTotal-z.given)]
	clear(p)
	z.given += int64(len(p))
	return len(p), nil
}

func TestSlowReaderBoundsWhatIsInFlight(t *testing.T) {
	p := launchPath(t, "", pluginclient.LaunchOptions{}, true)
	t.Run("host reads stdout slowly", func(t *testing.T) {
		progress := newProgress(t)
		w := &slowWriter{progress: progress}
		var errOut limitedBuffer
		st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: pacedArgv(t, "write", progress)}, sdk.ExecIO{Stdout: w, Stderr: &errOut})
		if err != nil || st.Code != 0 || w.got != pacedTotal {
			t.Fatalf("exec: %+v %v, %d bytes; stderr %q", st, err, w.got, errOut.String())
		}
		t.Logf("most in flight: %d KiB", w.peak>>10)
		if w.peak > maxInFlight {
			t.Errorf("the process was %d bytes ahead of the host's writer, more than %d", w.peak, maxInFlight)
		}
	})
	t.Run("process reads stdin slowly", func(t *testing.T) {
		progress := newProgress(t)
		in := &countingZeros{progress: progress}
		var errOut limitedBuffer
		st, err := p.Exec(t.Context(), sdk.ExecRequest{Sandbox: ref, Argv: pacedArgv(t, "read", progress)}, sdk.ExecIO{Stdin: in, Stderr: &errOut})
		if err != nil || st.Code != 0 || progress.now() != pacedTotal {
			t.Fatalf("exec: %+v %v, %d bytes consumed; stderr %q", st, err, progress.now(), errOut.String())
		}
		t.Logf("most in flight: %d KiB", in.peak>>10)
		if in.peak > maxInFlight {
			t.Errorf("the host had given %d bytes beyond what the process read, more than %d", in.peak, maxInFlight)
		}
	})
}

// limitedBuffer keeps the first 4 KiB written to it.
type limitedBuffer struct{ b []byte }

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.b = append(l.b, p[:min(len(p), max(0, 4096-len(l.b)))]...)
	return len(p), nil
}

func (l *limitedBuffer) String() string { return string(l.b) }
