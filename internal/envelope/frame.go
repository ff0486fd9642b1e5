// Package envelope runs a sandbox command inside a framed exec, for
// transports whose own side channels are lossy. Daytona's SSH gateway is
// one: it drops stderr (and hangs once about 2 MiB of it is unread), loses
// the exit status now and then, never sends exit-signal, and leaves
// commands in the daemon's process group, where a cancel cannot find them.
//
// The in-sandbox end, Serve (amelia-worker exec), runs the command as the
// leader of its own session and speaks frames on its stdin and stdout, the
// one stream every transport carries whole. Out of the sandbox come the
// command's pid, both output streams, acknowledgements of its input, and
// how it ended; into it go the command to run, its input (with an explicit
// end, so that the end of input differs from the client going away) and
// a cancel. A client that goes away (its stream ends without the exit
// frame) gets the command's process tree killed.
//
// Run is the client end. Before the worker is in the sandbox, Bootstrap and
// BootstrapResult run shell scripts with nothing but stdout and an exit
// code written into it.
//
// ServeMux and Mux run many commands over one stream, each in a yamux
// stream of its own, for transports where a new session is dear.
//
// The package imports nothing but the standard library, shexec, flow and
// yamux, so the static worker that links it stays small.
//
// Both ends are Amelia's own: the worker and core use this package, and
// providers use its client end through the SDK's optional toolkit
// (plugins/sdk/toolkit/envelope).
package envelope

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// Hello is the first line Serve writes, before any frame; the client skips
// whatever a login shell prints before it.
const Hello = "amelia-envelope 1\n"

// Frame types. Client to worker: start, stdin, stdin closed, cancel.
// Worker to client: started (pid), stdout, stderr, ack, failed, exit.
const (
	frameStart      = 's'
	frameStdin      = 'i'
	frameStdinClose = 'c'
	frameCancel     = 'k'

	frameStarted = 'p'
	frameStdout  = 'o'
	frameStderr  = 'e'
	frameAck     = 'a'
	frameFailed  = 'f'
	frameExit    = 'x'
)

// maxPayload bounds a frame's payload; input goes in chunks of chunkSize,
// output in chunks of up to outputChunk (what the command's pipe held).
const (
	maxPayload  = 1 << 20
	chunkSize   = 64 << 10
	outputChunk = 256 << 10
)

// stdinWindow is how many bytes of input may be on their way to the
// command, not yet acknowledged: the worker always has room for them, so
// it never stops reading frames (and so never misses a cancel) because the
// command does not read its input. It is what a command's input may have
// in flight per round trip: through the Kubernetes API server and the
// kubelet (milliseconds away), 256 KiB held 1 GiB of input to 25 MB/s,
// a quarter of kubectl cp; 4 MiB, as much as a stream's output
// (streamWindow), keeps the pipe full. Both ends are the same build (the
// host installs its own worker), so they agree on it.
const stdinWindow = 4 << 20

// header is a frame's type and payload length.
const headerSize = 5

// ErrProtocol is what a malformed stream gives.
var ErrProtocol = errors.New("envelope: malformed frame")

// Command is the start frame: the command and how to run it.
type Command struct {
	Argv []string          `json:"argv"`
	Env  map[string]string `json:"env,omitempty"`
	// Dir is the working directory; "" keeps the worker's.
	Dir string `json:"dir,omitempty"`
	// Tag marks the command's processes (TagEnv=Tag in their
	// environment), so that those which leave its session are killed too;
	// Run makes one when it is empty.
	Tag string `json:"tag"`
	// Step, in place of Argv, is a typed request the worker serves itself
	// (see Step).
	Step *Step `json:"step,omitempty"`
}

// TagEnv carries an exec's tag in its processes' environment, as shexec's
// does, so that shexec.KillScript finds them too.
const TagEnv = shexec.TagEnv

// failure is the failed frame: the command did not start.
type failure struct {
	// Kind is "nodir" (no such working directory) or "start".
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// exit is the exit frame.
type exit struct {
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
}

// cancel is the cancel frame: SIGTERM now, SIGKILL after GraceMS.
type cancel struct {
	GraceMS int64 `json:"grace_ms"`
}

// frameWriter writes whole frames from any goroutine.
type frameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (fw *frameWriter) write(typ byte, payload []byte) error {
	if len(payload) > maxPayload {
		return fmt.Errorf("envelope: a %q frame of %d bytes is over the %d-byte limit", typ, len(payload), maxPayload)
	}
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.buf = append(fw.buf[:0], typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(fw.buf[1:], uint32(len(payload)))
	fw.buf = append(fw.buf, payload...)
	_, err := fw.w.Write(fw.buf)
	if cap(fw.buf) > 2*chunkSize {
		fw.buf = nil // one large control frame need not stay
	}
	return err
}

// writeFrame writes a frame already laid out in buf: headerSize bytes for
// the header, which it fills in, then the payload. Output goes out this
// way, without a copy.
func (fw *frameWriter) writeFrame(typ byte, buf []byte) error {
	buf[0] = typ
	binary.BigEndian.PutUint32(buf[1:headerSize], uint32(len(buf)-headerSize))
	fw.mu.Lock()
	defer fw.mu.Unlock()
	_, err := fw.w.Write(buf)
	return err
}

func (fw *frameWriter) json(typ byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return fw.write(typ, b)
}

// frameReader reads frames; the payload it returns is valid until the
// next read.
type frameReader struct {
	r   *bufio.Reader
	buf []byte
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

func (fr *frameReader) read() (byte, []byte, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(fr.r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxPayload {
		return 0, nil, fmt.Errorf("%w: a %q frame of %d bytes", ErrProtocol, h[0], n)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	fr.buf = fr.buf[:n]
	if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return h[0], fr.buf, nil
}
