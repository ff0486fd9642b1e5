package providerwire

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Flock takes how (unix.LOCK_SH or LOCK_EX) on f, waiting for it.
func Flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// PeerCred is the credentials of conn's peer process.
func PeerCred(conn *net.UnixConn) (*unix.Ucred, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return nil, fmt.Errorf("peer credentials: %w", credErr)
	}
	return cred, nil
}

// WatchedConn closes Gone (once) when its connection fails or is closed.
type WatchedConn struct {
	*net.UnixConn
	Once *sync.Once
	Gone chan struct{}
}

// Read reads from the connection; an error closes Gone.
func (c *WatchedConn) Read(p []byte) (int, error) {
	n, err := c.UnixConn.Read(p)
	if err != nil {
		c.Once.Do(func() { close(c.Gone) })
	}
	return n, err
}

// Close closes the connection and Gone.
func (c *WatchedConn) Close() error {
	c.Once.Do(func() { close(c.Gone) })
	return c.UnixConn.Close()
}
