// Package datachan carries the bytes of a plugin's execs beside its gRPC
// connection, without TLS: a yamux session over a unix socket pair that
// the host makes and hands to the plugin process when it starts it (no
// listening socket, no peer but the child). Each exec's stdin, stdout and
// stderr go on streams of their own, which the host opens and names by an
// id it chose, the one it sends in the gRPC Exec call; cancel, resize and
// the exit status stay on gRPC. yamux's windows bound what a slow reader
// leaves in flight on each stream.
//
// The wire format is described at DataStreams in provider.proto.
package datachan

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// Env names, in the plugin's environment, the file descriptor of its end of
// the socket pair.
const Env = "AMELIA_PROVIDER_DATA_FD"

// hello is what a plugin that takes the data channel writes on it before
// go-plugin's handshake line, so the host can tell it from a plugin that
// ignores the offer (an older SDK's) without waiting.
const hello = "amelia-provider-data 1\n"

// Window is how many bytes of one stream may be in flight: written and
// not yet read by the other end. It bounds what a slow reader makes the
// other side buffer, per stream; at 4 MiB a stream moves pipe-speed output
// with few window updates.
const Window = 4 << 20

// Kind is which of an exec's streams a data stream carries.
type Kind byte

// The kinds of stream, as on the wire.
const (
	Stdin  Kind = 1
	Stdout Kind = 2
	Stderr Kind = 3
)

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

// headerSize is the length of what begins each stream: the exec's id and
// the stream's kind.
const headerSize = 9

// config is the yamux configuration of both ends. Keepalives are off: the
// peer is a process on this machine whose death closes the socket. The
// write timeout is long since a write waits only for the peer's read loop,
// which never blocks (windows keep it from having to), however loaded the
// machine.
func config() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = false
	cfg.MaxStreamWindowSize = Window
	cfg.AcceptBacklog = 1024
	cfg.ConnectionWriteTimeout = 2 * time.Minute
	cfg.LogOutput = io.Discard
	return cfg
}

// Host is the host's end of a plugin's data channel.
type Host struct {
	session *yamux.Session
	mu      sync.Mutex
	nextID  uint64
}

// Usable reports whether execs can still use the channel.
func (h *Host) Usable() bool { return h != nil && !h.session.IsClosed() }

// NewID is an exec id not used before on this channel.
func (h *Host) NewID() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextID++
	return h.nextID
}

// Open opens exec id's stream of kind k.
func (h *Host) Open(id uint64, k Kind) (*yamux.Stream, error) {
	s, err := h.session.OpenStream()
	if err != nil {
		return nil, fmt.Errorf("open the %s stream of exec %d on the data channel: %w", k, id, err)
	}
	var hdr [headerSize]byte
	binary.BigEndian.PutUint64(hdr[:8], id)
	hdr[8] = byte(k)
	if _, err := s.Write(hdr[:]); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("open the %s stream of exec %d on the data channel: %w", k, id, err)
	}
	return s, nil
}

// Close ends the channel and every stream on it.
func (h *Host) Close() error { return h.session.Close() }

// Plugin is the plugin's end of its data channel: it accepts the streams
// the host opens and holds each until the exec it names claims it.
type Plugin struct {
	session *yamux.Session

	mu      sync.Mutex
	pending map[uint64]map[Kind]*yamux.Stream
	arrived chan struct{} // closed (and replaced) when a stream arrives
}

func newPlugin(session *yamux.Session) *Plugin {
	p := &Plugin{session: session, pending: map[uint64]map[Kind]*yamux.Stream{}, arrived: make(chan struct{})}
	go p.accept()
	return p
}

// ErrClosed: the data channel is closed.
var ErrClosed = errors.New("the data channel is closed")

// accept takes every stream the host opens, reads which exec's it is and
// files it, until the session ends.
func (p *Plugin) accept() {
	for {
		s, err := p.session.Accept()
		if err != nil {
			p.closePending()
			return
		}
		go p.file(s.(*yamux.Stream))
	}
}

// file reads a new stream's header and files it for its exec.
func (p *Plugin) file(s *yamux.Stream) {
	var hdr [headerSize]byte
	if _, err := io.ReadFull(s, hdr[:]); err != nil {
		_ = s.Close()
		return
	}
	id, k := binary.BigEndian.Uint64(hdr[:8]), Kind(hdr[8])
	p.mu.Lock()
	defer p.mu.Unlock()
	byKind := p.pending[id]
	if byKind == nil {
		byKind = map[Kind]*yamux.Stream{}
		p.pending[id] = byKind
	}
	if _, dup := byKind[k]; dup || (k != Stdin && k != Stdout && k != Stderr) {
		_ = s.Close() // a host bug: keep what came first
		return
	}
	byKind[k] = s
	close(p.arrived)
	p.arrived = make(chan struct{})
}

// Claim waits for exec id's streams of the given kinds and takes them, in
// that order. It gives up when ctx ends or the channel closes; streams of
// the exec that did arrive are closed then.
func (p *Plugin) Claim(ctx context.Context, id uint64, kinds ...Kind) ([]*yamux.Stream, error) {
	for {
		p.mu.Lock()
		byKind := p.pending[id]
		if len(byKind) >= len(kinds) {
			out := make([]*yamux.Stream, 0, len(kinds))
			for _, k := range kinds {
				if s, ok := byKind[k]; ok {
					out = append(out, s)
				}
			}
			if len(out) == len(kinds) {
				delete(p.pending, id)
				p.mu.Unlock()
				return out, nil
			}
		}
		arrived := p.arrived
		p.mu.Unlock()
		select {
		case <-arrived:
		case <-p.session.CloseChan():
			p.Discard(id)
			return nil, ErrClosed
		case <-ctx.Done():
			p.Discard(id)
			return nil, fmt.Errorf("wait for the data streams of exec %d: %w", id, context.Cause(ctx))
		}
	}
}

// Discard closes what arrived of exec id's streams.
func (p *Plugin) Discard(id uint64) {
	p.mu.Lock()
	byKind := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	for _, s := range byKind {
		End(s)
	}
}

func (p *Plugin) closePending() {
	p.mu.Lock()
	pending := p.pending
	p.pending = map[uint64]map[Kind]*yamux.Stream{}
	p.mu.Unlock()
	for _, byKind := range pending {
		for _, s := range byKind {
			End(s)
		}
	}
}

// Close ends the channel and every stream on it.
func (p *Plugin) Close() error { return p.session.Close() }

// End closes s at once: a Read or Write blocked on it returns (with an
// error), and the peer sees its end of the stream.
func End(s *yamux.Stream) {
	_ = s.SetDeadline(time.Now())
	_ = s.Close()
}
