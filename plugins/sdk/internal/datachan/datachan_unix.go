//go:build unix

package datachan

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/hashicorp/yamux"
)

// Offer makes the socket pair of a data channel: host is the host's end,
// child the end to give the plugin process (in exec.Cmd.ExtraFiles, its
// fd number named by Env). Both are close-on-exec: only the file
// descriptor the child is handed crosses into it. The host closes child
// once the process has started.
func Offer() (host, child *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("make the data channel's socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "amelia-data-host"), os.NewFile(uintptr(fds[1]), "amelia-data-plugin"), nil
}

// Connect starts the host's end of a data channel on host, once the plugin
// has started (go-plugin's handshake is done). A plugin that took the
// channel wrote its hello before the handshake, so it is there to read
// now; without it (a plugin of an older SDK ignores the descriptor) there
// is no channel: Connect closes host and returns nil, and the execs keep
// their bytes on gRPC.
func Connect(host *os.File) (*Host, error) {
	defer host.Close() // the conn below has its own descriptor
	buf := make([]byte, len(hello))
	n, _, err := syscall.Recvfrom(int(host.Fd()), buf, syscall.MSG_DONTWAIT)
	if err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || (err == nil && n == 0) {
		return nil, nil // no hello: the plugin ignored the offer
	}
	if err != nil {
		return nil, fmt.Errorf("read the data channel's hello: %w", err)
	}
	if string(buf[:n]) != hello {
		return nil, fmt.Errorf("the plugin's data channel began with %q, not %q", buf[:n], hello)
	}
	conn, err := net.FileConn(host)
	if err != nil {
		return nil, fmt.Errorf("data channel: %w", err)
	}
	s, err := yamux.Client(newFrameConn(conn), config())
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("data channel: %w", err)
	}
	return &Host{session: s}, nil
}

// Accept takes the data channel the host offered in the environment
// variable Env, if it did: it removes the variable (the provider's
// processes are not to see it), says hello and serves the channel. It
// returns nil when the host offered none. Call it before go-plugin's
// handshake.
func Accept() (*Plugin, error) {
	v, ok := os.LookupEnv(Env)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(Env)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q does not name an inherited file descriptor", Env, v)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return nil, fmt.Errorf("%s=%d is not a socket", Env, fd)
	}
	f := os.NewFile(uintptr(fd), "amelia-data")
	// FileConn dups it close-on-exec, so the inherited descriptor, which
	// is not, can go: the provider's processes inherit neither.
	conn, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("data channel: %w", err)
	}
	return serve(conn)
}

// Take serves the plugin's end of a data channel on f, one end of a
// socket pair a host made with Offer and passed to a shared plugin over
// its socket (SCM_RIGHTS) rather than at its start. It says hello, as
// Accept does, and owns f from then on.
func Take(f *os.File) (*Plugin, error) {
	conn, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, fmt.Errorf("data channel: %w", err)
	}
	return serve(conn)
}

// serve says hello on conn and serves the plugin's end of the channel.
func serve(conn net.Conn) (*Plugin, error) {
	if _, err := conn.Write([]byte(hello)); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("data channel hello: %w", err)
	}
	s, err := yamux.Server(newFrameConn(conn), config())
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("data channel: %w", err)
	}
	return newPlugin(s), nil
}

// Pair is a data channel whose two ends are in this process, made as
// Offer, Accept and Connect make it: for tests of what uses it.
func Pair() (*Host, *Plugin, error) {
	host, child, err := Offer()
	if err != nil {
		return nil, nil, err
	}
	conn, err := net.FileConn(child)
	_ = child.Close()
	if err != nil {
		_ = host.Close()
		return nil, nil, fmt.Errorf("data channel: %w", err)
	}
	p, err := serve(conn)
	if err != nil {
		_ = host.Close()
		return nil, nil, err
	}
	h, err := Connect(host)
	if err != nil || h == nil {
		_ = p.Close()
		return nil, nil, fmt.Errorf("data channel: no hello (%v)", err)
	}
	return h, p, nil
}

// Decline refuses the data channel the host offered, if it did, as a
// plugin of an SDK without one does (the host then sees no hello): it
// removes the variable and closes the descriptor.
func Decline() {
	v, ok := os.LookupEnv(Env)
	if !ok {
		return
	}
	os.Unsetenv(Env)
	var st syscall.Stat_t
	if fd, err := strconv.Atoi(v); err == nil && fd >= 3 && syscall.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFSOCK {
		_ = syscall.Close(fd)
	}
}
