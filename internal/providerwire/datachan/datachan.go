// Package datachan carries the bytes of a plugin's execs beside its gRPC
// connection, without TLS and without copying them through a protocol: for
// each exec the host makes OS pipes for the streams it carries (stdin,
// stdout, stderr) and passes the plugin's ends to it (SCM_RIGHTS) over a
// unix socket pair that the host made and handed to the plugin process
// when it started it (no listening socket, no peer but the child). Each
// pass names the exec by an id the host chose, the one it sends in the
// gRPC Exec call; cancel, resize and the exit status stay on gRPC. A
// pipe's buffer bounds what a slow reader leaves in flight, and a provider
// whose process writes to a pipe of its own moves the bytes into the
// host's in the kernel (splice).
//
// The wire format is described at DataStreams in provider.proto.
package datachan

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
)

// Env names, in the plugin's environment, the file descriptor of its end of
// the socket pair.
const Env = "AMELIA_PROVIDER_DATA_FD"

// hello is what a plugin that takes the data channel writes on it before
// go-plugin's handshake line, so the host can tell it from a plugin that
// ignores the offer (an older SDK's) without waiting. The number is the
// channel's version: 1 was a yamux session, which a host of this SDK does
// not speak (it then moves the bytes over gRPC).
const (
	helloPrefix = "amelia-provider-data "
	hello       = helloPrefix + "2\n"
)

// PipeSize is what the host grows each exec pipe to, where it can: a
// 64 KiB pipe makes a fast writer hand over its output in small pieces,
// each one a wakeup of the reader. It is also most of what a slow reader
// leaves in flight on a stream.
const PipeSize = 1 << 20

// Kind is which of an exec's streams a pipe carries.
type Kind byte

// The kinds of stream, as on the wire.
const (
	Stdin  Kind = 1
	Stdout Kind = 2
	Stderr Kind = 3
)

var kinds = [...]Kind{Stdin, Stdout, Stderr}

func (k Kind) String() string {
	switch k {
	case Stdin:
		return "stdin"
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return fmt.Sprintf("kind %d", byte(k))
}

func (k Kind) bit() byte { return 1 << (k - 1) }

// recordSize is the length of the record that carries one exec's pipes:
// the exec's id (8 bytes, big-endian), a byte whose bits 0, 1 and 2 say
// whether stdin, stdout and stderr come, in that order, as the record's
// descriptors, and 7 zero bytes.
const recordSize = 16

// Ends are the host's ends of one exec's pipes: the write end of stdin,
// the read ends of stdout and stderr; nil where the exec has none.
type Ends struct {
	Stdin, Stdout, Stderr *os.File
}

// Close closes every end.
func (e Ends) Close() {
	for _, f := range []*os.File{e.Stdin, e.Stdout, e.Stderr} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// Host is the host's end of a plugin's data channel.
type Host struct {
	conn   *net.UnixConn
	mu     sync.Mutex // one record at a time
	nextID uint64
	gone   chan struct{} // closed when the plugin's end closed
}

func newHost(conn *net.UnixConn) *Host {
	h := &Host{conn: conn, gone: make(chan struct{})}
	go h.watch()
	return h
}

// watch waits for the plugin's end to close: the plugin sends nothing
// after its hello, so a read returns only then.
func (h *Host) watch() {
	defer close(h.gone)
	var b [1]byte
	for {
		if _, err := h.conn.Read(b[:]); err != nil {
			return
		}
	}
}

// Usable reports whether execs can still use the channel.
func (h *Host) Usable() bool {
	if h == nil {
		return false
	}
	select {
	case <-h.gone:
		return false
	default:
		return true
	}
}

// Open makes the pipes of a new exec, those of the streams asked for,
// passes the plugin's ends to it and returns the exec's id and the host's
// ends, which the caller closes.
func (h *Host) Open(stdin, stdout, stderr bool) (uint64, Ends, error) {
	return h.open(nil, nil, stdin, stdout, stderr)
}

// OpenFile is Open with in, a file of the host's, as the exec's stdin
// instead of a pipe: the plugin gets a descriptor of in itself (sharing
// its offset), reads it to its end, and the host has no stdin end to
// write (Ends.Stdin is nil). The caller keeps in, and must not read it
// until the exec ends.
func (h *Host) OpenFile(in *os.File, stdout, stderr bool) (uint64, Ends, error) {
	return h.open(in, nil, true, stdout, stderr)
}

// OpenOutFile is Open with out, a file of the host's, as the exec's
// stdout instead of a pipe: the plugin gets a descriptor of out itself
// and writes there, and the host has no stdout end to read (Ends.Stdout
// is nil). The caller keeps out.
func (h *Host) OpenOutFile(out *os.File, stdin, stderr bool) (uint64, Ends, error) {
	return h.open(nil, out, stdin, true, stderr)
}

func (h *Host) open(in, out *os.File, stdin, stdout, stderr bool) (uint64, Ends, error) {
	var ends Ends
	var theirs []*os.File
	defer func() {
		for _, f := range theirs {
			_ = f.Close() // the plugin has its own copies now, or none
		}
	}()
	var rec [recordSize]byte
	for _, s := range []struct {
		k    Kind
		want bool
		mine **os.File
	}{{Stdin, stdin, &ends.Stdin}, {Stdout, stdout, &ends.Stdout}, {Stderr, stderr, &ends.Stderr}} {
		if !s.want {
			continue
		}
		if pass := map[Kind]*os.File{Stdin: in, Stdout: out}[s.k]; pass != nil {
			dup, err := dupFile(pass)
			if err != nil {
				ends.Close()
				return 0, Ends{}, fmt.Errorf("pass the %s file of an exec: %w", s.k, err)
			}
			theirs = append(theirs, dup)
			rec[8] |= s.k.bit()
			continue
		}
		r, w, err := os.Pipe()
		if err != nil {
			ends.Close()
			return 0, Ends{}, fmt.Errorf("make the %s pipe of an exec: %w", s.k, err)
		}
		growPipe(w)
		if s.k == Stdin {
			*s.mine = w
			theirs = append(theirs, r)
		} else {
			*s.mine = r
			theirs = append(theirs, w)
		}
		rec[8] |= s.k.bit()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextID++
	id := h.nextID
	binary.BigEndian.PutUint64(rec[:8], id)
	if err := send(h.conn, rec[:], theirs); err != nil {
		ends.Close()
		return 0, Ends{}, fmt.Errorf("pass the pipes of exec %d to the plugin: %w", id, err)
	}
	return id, ends, nil
}

// Close ends the channel. Execs whose pipes were passed keep them.
func (h *Host) Close() error { return h.conn.Close() }

// Files are the plugin's ends of one exec's pipes, by kind.
type Files map[Kind]*os.File

func (fs Files) close() {
	for _, f := range fs {
		_ = f.Close()
	}
}

// Plugin is the plugin's end of its data channel: it takes the pipes the
// host passes and holds each exec's until the exec claims them.
type Plugin struct {
	conn *net.UnixConn

	mu      sync.Mutex
	pending map[uint64]Files
	// abandoned are execs whose claim gave up before their pipes came:
	// the pipes are closed when they do.
	abandoned map[uint64]struct{}
	arrived   chan struct{} // closed (and replaced) when pipes arrive
	closed    chan struct{} // closed when the channel ends
}

func newPlugin(conn *net.UnixConn) *Plugin {
	p := &Plugin{conn: conn, pending: map[uint64]Files{}, abandoned: map[uint64]struct{}{},
		arrived: make(chan struct{}), closed: make(chan struct{})}
	go p.receive()
	return p
}

// ErrClosed: the data channel is closed.
var ErrClosed = errors.New("the data channel is closed")

// receive takes every record the host sends and files its pipes, until
// the channel ends.
func (p *Plugin) receive() {
	defer p.closePending()
	for {
		id, fs, err := recv(p.conn)
		if err != nil {
			return
		}
		p.mu.Lock()
		if _, gone := p.abandoned[id]; gone {
			delete(p.abandoned, id)
			p.mu.Unlock()
			fs.close()
			continue
		}
		if _, dup := p.pending[id]; dup {
			p.mu.Unlock()
			fs.close() // a host bug: keep what came first
			continue
		}
		p.pending[id] = fs
		close(p.arrived)
		p.arrived = make(chan struct{})
		p.mu.Unlock()
	}
}

// Claim waits for exec id's pipes and takes them; the exec is to have
// exactly the kinds given. It gives up when ctx ends or the channel
// closes.
func (p *Plugin) Claim(ctx context.Context, id uint64, want ...Kind) (Files, error) {
	for {
		p.mu.Lock()
		fs, ok := p.pending[id]
		if ok {
			delete(p.pending, id)
		}
		arrived := p.arrived
		p.mu.Unlock()
		if ok {
			if len(fs) != len(want) {
				fs.close()
				return nil, fmt.Errorf("exec %d: the host passed %d pipes, not the %d it asked for", id, len(fs), len(want))
			}
			for _, k := range want {
				if fs[k] == nil {
					fs.close()
					return nil, fmt.Errorf("exec %d: the host passed no %s pipe", id, k)
				}
			}
			return fs, nil
		}
		select {
		case <-arrived:
		case <-p.closed:
			return nil, ErrClosed
		case <-ctx.Done():
			p.abandon(id)
			return nil, fmt.Errorf("wait for the pipes of exec %d: %w", id, context.Cause(ctx))
		}
	}
}

// abandon closes exec id's pipes, now or when they come.
func (p *Plugin) abandon(id uint64) {
	p.mu.Lock()
	fs, ok := p.pending[id]
	if ok {
		delete(p.pending, id)
	} else {
		p.abandoned[id] = struct{}{}
	}
	p.mu.Unlock()
	fs.close()
}

func (p *Plugin) closePending() {
	p.mu.Lock()
	pending := p.pending
	p.pending = map[uint64]Files{}
	close(p.closed)
	p.mu.Unlock()
	for _, fs := range pending {
		fs.close()
	}
}

// Close ends the channel. Execs keep the pipes they claimed.
func (p *Plugin) Close() error { return p.conn.Close() }

// checkHello checks the hello read on a data channel's host end: nil for
// a hello of this version, errOtherVersion for a plugin's of another.
func checkHello(got []byte) error {
	switch {
	case string(got) == hello:
		return nil
	case len(got) > len(helloPrefix) && string(got[:len(helloPrefix)]) == helloPrefix:
		return errOtherVersion
	}
	return fmt.Errorf("the plugin's data channel began with %q, not %q", got, hello)
}

// errOtherVersion: the plugin speaks another version of the channel.
var errOtherVersion = errors.New("the plugin's data channel is of another version")
