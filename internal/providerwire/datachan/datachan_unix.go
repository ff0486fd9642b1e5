//go:build unix

package datachan

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Offer makes the socket pair of a data channel: host is the host's end,
// child the end to give the plugin process (in exec.Cmd.ExtraFiles, its
// fd number named by Env). Both are close-on-exec: only the file
// descriptor the child is handed crosses into it. The host closes child
// once the process has started.
func Offer() (host, child *os.File, err error) {
	fds, err := socketpair()
	if err != nil {
		return nil, nil, fmt.Errorf("make the data channel's socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "amelia-data-host"), os.NewFile(uintptr(fds[1]), "amelia-data-plugin"), nil
}

// Connect starts the host's end of a data channel on host, once the plugin
// has started (go-plugin's handshake is done). A plugin that took the
// channel wrote its hello before the handshake, so it is there to read
// now; without it (a plugin of an older SDK ignores the descriptor), or
// with the hello of another version of the channel, there is no channel:
// Connect closes host and returns nil, and the execs keep their bytes on
// gRPC.
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
	if err := checkHello(buf[:n]); errors.Is(err, errOtherVersion) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	conn, err := unixConn(host)
	if err != nil {
		return nil, err
	}
	return newHost(conn), nil
}

// unixConn is the unix socket f, as a conn with a descriptor of its own.
func unixConn(f *os.File) (*net.UnixConn, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("data channel: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("data channel: %T is not a unix socket", c)
	}
	return uc, nil
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
	// FileConn dups it close-on-exec, so the inherited descriptor, which
	// is not, can go: the provider's processes inherit neither.
	return Take(os.NewFile(uintptr(fd), "amelia-data"))
}

// Take serves the plugin's end of a data channel on f, one end of a
// socket pair a host made with Offer and passed to a shared plugin over
// its socket (SCM_RIGHTS) rather than at its start. It says hello, as
// Accept does, and owns f from then on.
func Take(f *os.File) (*Plugin, error) {
	conn, err := unixConn(f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	return serve(conn)
}

// serve says hello on conn and serves the plugin's end of the channel.
func serve(conn *net.UnixConn) (*Plugin, error) {
	if _, err := conn.Write([]byte(hello)); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("data channel hello: %w", err)
	}
	return newPlugin(conn), nil
}

// Pair is a data channel whose two ends are in this process, made as
// Offer, Accept and Connect make it: for tests of what uses it.
func Pair() (*Host, *Plugin, error) {
	host, child, err := Offer()
	if err != nil {
		return nil, nil, err
	}
	p, err := Take(child)
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

// send writes one record with files as its descriptors.
func send(conn *net.UnixConn, rec []byte, files []*os.File) error {
	fds := make([]int, 0, len(files))
	for _, f := range files {
		// Not f.Fd(), which would make the pipe blocking.
		rc, err := f.SyscallConn()
		if err != nil {
			return err
		}
		if err := rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) }); err != nil {
			return err
		}
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := conn.WriteMsgUnix(rec, oob, nil)
	if err == nil && n < len(rec) {
		_, err = conn.Write(rec[n:]) // the descriptors went with the first byte
	}
	return err
}

// recvOOB is room for the control message of one record: its descriptors,
// three at most.
var recvOOB = unix.CmsgSpace(3 * 4)

// recv reads one record and the pipes that came with it. A read never
// takes more than the rest of a record, and the kernel does not join data
// sent with descriptors to what came before, so the descriptors that
// arrive belong to the record being read.
func recv(conn *net.UnixConn) (uint64, Files, error) {
	var rec [recordSize]byte
	oob := make([]byte, recvOOB)
	var fds []int
	for n := 0; n < recordSize; {
		k, oobn, flags, _, err := conn.ReadMsgUnix(rec[n:], oob)
		if oobn > 0 {
			if msgs, perr := unix.ParseSocketControlMessage(oob[:oobn]); perr == nil {
				for _, m := range msgs {
					if got, perr := unix.ParseUnixRights(&m); perr == nil {
						fds = append(fds, got...)
					}
				}
			}
		}
		if err == nil && k == 0 {
			err = io.EOF
		}
		if err == nil && flags&unix.MSG_CTRUNC != 0 {
			err = errors.New("a record came with more descriptors than it can have")
		}
		if err != nil {
			closeFDs(fds)
			return 0, nil, err
		}
		n += k
	}
	id := binary.BigEndian.Uint64(rec[:8])
	fs := Files{}
	for _, k := range kinds {
		if rec[8]&k.bit() == 0 {
			continue
		}
		if len(fds) == 0 {
			fs.close()
			return 0, nil, fmt.Errorf("exec %d: the record names more pipes than came with it", id)
		}
		var st unix.Stat_t
		err := unix.Fstat(fds[0], &st)
		if err == nil && (k == Stdin || k == Stdout) && st.Mode&unix.S_IFMT == unix.S_IFREG {
			// A file of the host's as it is (Host.OpenFile,
			// OpenOutFile): never waited on.
			fs[k] = os.NewFile(uintptr(fds[0]), fmt.Sprintf("amelia-exec-%d-%s", id, k))
			fds = fds[1:]
			continue
		}
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
			fs.close()
			closeFDs(fds)
			return 0, nil, fmt.Errorf("exec %d: its %s is not a pipe", id, k)
		}
		// Non-blocking, so that Go's poller waits on it: closing it ends
		// a read or write blocked on it.
		if err := unix.SetNonblock(fds[0], true); err != nil {
			fs.close()
			closeFDs(fds)
			return 0, nil, fmt.Errorf("exec %d: its %s pipe: %w", id, k, err)
		}
		fs[k] = os.NewFile(uintptr(fds[0]), fmt.Sprintf("amelia-exec-%d-%s", id, k))
		fds = fds[1:]
	}
	if len(fds) > 0 || rec[8]&^0b111 != 0 {
		fs.close()
		closeFDs(fds)
		return 0, nil, fmt.Errorf("exec %d: a record the plugin cannot read", id)
	}
	return id, fs, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// dupFile is a new descriptor of f's open file.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := rc.Control(func(u uintptr) { fd, derr = unix.FcntlInt(u, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
