package sdk

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"
	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

// helloTimeout bounds how long a shared plugin waits for a host that
// connected to say hello.
const helloTimeout = 30 * time.Second

// sharedServer is a shared plugin: the hosts connected to it and what
// decides when it stops.
type sharedServer struct {
	srv      *server
	cfg      serveConfig
	log      *slog.Logger
	lis      *net.UnixListener
	files    providerwire.SharedFiles
	dev, ino uint64 // its socket's, to tell it from a later plugin's
	idle     time.Duration

	mu      sync.Mutex
	hosts   map[*grpc.Server]int // each connected host's server, and its pid
	closing bool
	timer   *time.Timer // the idle timer, while no host is connected
}

// serveShared serves srv as a shared plugin on the socket sc names until
// it has had no host for sc.idle, or it is told to stop (SIGTERM, SIGINT
// or SIGHUP): then it removes its socket, ends every host's connection
// and shuts srv down. It writes providerwire.ReadyLine on handshake once it listens.
func serveShared(srv *server, cfg serveConfig, handshake *os.File, sc sharedConfig) error {
	if os.Getenv(providerwire.Handshake.MagicCookieKey) != providerwire.Handshake.MagicCookieValue {
		return errors.New("this binary is a plugin, which amelia starts itself; it is not meant to be run by hand")
	}
	lis, err := net.ListenUnix("unix", &net.UnixAddr{Name: sc.sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sc.sock, err)
	}
	// It goes when it is this plugin's still (stop), not whenever the
	// listener closes.
	lis.SetUnlinkOnClose(false)
	var st unix.Stat_t
	if err := unix.Stat(sc.sock, &st); err != nil {
		lis.Close()
		return fmt.Errorf("listen on %s: %w", sc.sock, err)
	}
	if err := os.Chmod(sc.sock, 0o600); err != nil {
		lis.Close()
		return fmt.Errorf("listen on %s: %w", sc.sock, err)
	}
	s := &sharedServer{
		srv: srv, cfg: cfg, log: cfg.logger, lis: lis, files: providerwire.FilesOf(sc.sock),
		dev: st.Dev, ino: st.Ino, idle: sc.idle, hosts: map[*grpc.Server]int{},
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		got := <-sig
		s.stop("it was told to (" + got.String() + ")")
	}()
	s.mu.Lock()
	s.armIdle()
	s.mu.Unlock()
	if _, err := io.WriteString(handshake, providerwire.ReadyLine); err != nil {
		s.stop("its starter is gone")
	}
	_ = handshake.Close()
	s.log.Info("shared provider plugin listening", "socket", sc.sock, "idle", sc.idle.String(), "pid", os.Getpid())
	for {
		conn, err := lis.AcceptUnix()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if !closing {
				s.log.Error("accept hosts", "error", err)
				s.stop("it cannot accept hosts")
			}
			break
		}
		go s.serveHost(conn)
	}
	s.mu.Lock()
	servers := make([]*grpc.Server, 0, len(s.hosts))
	for gs := range s.hosts {
		servers = append(servers, gs)
	}
	s.mu.Unlock()
	for _, gs := range servers {
		gs.Stop() // the host's execs end with its connection
	}
	srv.Shutdown(shutdownWait)
	s.log.Info("shared provider plugin stopped")
	return nil
}

// serveHost serves one host's connection: it checks the peer is of this
// user, takes its hello and data channel, answers, and serves gRPC on it
// until it closes.
func (s *sharedServer) serveHost(conn *net.UnixConn) {
	cred, err := providerwire.PeerCred(conn)
	if err != nil || int(cred.Uid) != os.Geteuid() {
		if err == nil {
			err = fmt.Errorf("it runs as uid %d (pid %d), not as this plugin's user (uid %d)", cred.Uid, cred.Pid, os.Geteuid())
		}
		s.log.Warn("refused a connection", "error", err)
		conn.Close()
		return
	}
	data, err := s.takeHello(conn)
	if err != nil {
		s.log.Warn("refused a host", "pid", cred.Pid, "error", err)
		conn.Close()
		return
	}
	gs := grpc.NewServer(providerwire.ServerOptions()...)
	pb.RegisterProviderServer(gs, s.srv.withData(data))
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		if data != nil {
			data.Close()
		}
		conn.Close()
		return
	}
	// Counted before it is answered: a host that has its answer keeps
	// an idle plugin from stopping (idleExpired).
	s.hosts[gs] = int(cred.Pid)
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	n := len(s.hosts)
	s.mu.Unlock()
	s.log.Debug("host connected", "pid", cred.Pid, "hosts", n, "data_channel", data != nil)
	var once sync.Once
	gone := make(chan struct{})
	if _, err := conn.Write([]byte(providerwire.AckLine)); err == nil {
		_ = conn.SetDeadline(time.Time{})
		go func() {
			_ = gs.Serve(&oneConnListener{conn: &providerwire.WatchedConn{UnixConn: conn, Once: &once, Gone: gone}, closed: make(chan struct{})})
		}()
		<-gone
	}
	gs.Stop()
	conn.Close()
	if data != nil {
		data.Close()
	}
	s.mu.Lock()
	delete(s.hosts, gs)
	n = len(s.hosts)
	if n == 0 {
		s.armIdle()
	}
	s.mu.Unlock()
	s.log.Debug("host left", "pid", cred.Pid, "hosts", n)
}

// takeHello reads a host's hello and the end of its data channel that
// comes with it (SCM_RIGHTS), and serves the channel; nil when the host
// offered none or the plugin declines it.
func (s *sharedServer) takeHello(conn *net.UnixConn) (*datachan.Plugin, error) {
	_ = conn.SetDeadline(time.Now().Add(helloTimeout))
	buf := make([]byte, len(providerwire.HelloLine))
	oob := make([]byte, unix.CmsgSpace(4)) // one descriptor; the kernel closes any more
	var fds []int
	truncated := false
	for n := 0; n < len(buf); {
		k, oobn, flags, _, err := conn.ReadMsgUnix(buf[n:], oob)
		if oobn > 0 {
			if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for _, m := range msgs {
					if got, perr := unix.ParseUnixRights(&m); perr == nil {
						fds = append(fds, got...)
					}
				}
			}
		}
		truncated = truncated || flags&unix.MSG_CTRUNC != 0
		if err == nil && k == 0 {
			err = io.EOF
		}
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("read its hello: %w", err)
		}
		n += k
	}
	switch {
	case string(buf) != providerwire.HelloLine:
		closeFDs(fds)
		return nil, fmt.Errorf("it said %q, not %q", buf, providerwire.HelloLine)
	case truncated || len(fds) > 1:
		closeFDs(fds)
		return nil, errors.New("it sent more than its data channel")
	case len(fds) == 0:
		return nil, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fds[0], &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		closeFDs(fds)
		return nil, errors.New("what it sent as its data channel is not a socket")
	}
	f := os.NewFile(uintptr(fds[0]), "amelia-data")
	if s.cfg.noDataChannel {
		f.Close() // the host sees no hello: its execs' bytes go over gRPC
		return nil, nil
	}
	data, err := datachan.Take(f)
	if err != nil {
		s.log.Warn("the host's data channel cannot be used; exec bytes go over gRPC", "error", err)
		return nil, nil
	}
	return data, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// armIdle starts the idle timer, s.mu held.
func (s *sharedServer) armIdle() {
	if s.closing || s.timer != nil {
		return
	}
	s.timer = time.AfterFunc(s.idle, s.idleExpired)
}

// idleExpired stops the plugin if it still has no host. It holds the lock
// file meanwhile, as a host starting a plugin does: no host is between
// finding this one and being counted by it (hosts take the lock while
// they connect), and none starts another until this one's socket is gone.
func (s *sharedServer) idleExpired() {
	if lock, err := os.OpenFile(s.files.Lock, os.O_RDWR|os.O_CREATE, 0o600); err == nil {
		defer lock.Close() // and with it the lock
		if err := providerwire.Flock(lock, unix.LOCK_EX); err != nil {
			s.log.Warn("lock the shared plugin's lock file", "error", err)
		}
	}
	s.mu.Lock()
	idle := len(s.hosts) == 0
	s.timer = nil
	if !idle {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.stop(fmt.Sprintf("it had no host for %s", s.idle))
}

// stop stops accepting hosts and removes the socket, if it is this
// plugin's still.
func (s *sharedServer) stop(why string) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return
	}
	s.closing = true
	if s.timer != nil {
		s.timer.Stop()
	}
	hosts := slices.Collect(maps.Values(s.hosts))
	s.mu.Unlock()
	s.log.Info("shared provider plugin stopping", "why", why, "hosts", hosts)
	var st unix.Stat_t
	if unix.Stat(s.files.Sock, &st) == nil && st.Dev == s.dev && st.Ino == s.ino {
		_ = os.Remove(s.files.Sock)
	}
	_ = s.lis.Close()
}

// oneConnListener hands a gRPC server one connection, then nothing until
// it is closed.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
	close  sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.close.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }
