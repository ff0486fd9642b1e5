package pluginclient

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/amelia-sandbox/amelia/internal/providerwire/datachan"

	"github.com/amelia-sandbox/amelia/internal/providerwire"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// maxSocketPath bounds a socket's path: sun_path holds 108 bytes on
// Linux, 104 elsewhere, with the final NUL.
const maxSocketPath = 103

// Share connects to the shared plugin that cmd (not yet started) and
// opts.Scope name, starting it from cmd when none answers: see the notes
// at ShareOptions. The Plugin it returns is this host's connection; Close
// ends that, not the plugin.
//
// The plugin's environment is cmd's, as for Launch (nil: the host's),
// besides go-plugin's handshake cookie and the variables that tell it
// where to listen. It starts in / in a session of its own, its stdout and
// stderr going to its log.
//
// An error matching ErrNotShareable means the plugin cannot be shared:
// Launch it. Any other says what failed; Launch works then too.
func Share(cmd *exec.Cmd, opts ShareOptions) (*Plugin, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.Idle == 0 {
		opts.Idle = DefaultIdle
	}
	if err := privateDir(opts.Dir); err != nil {
		return nil, fmt.Errorf("share provider plugin %q: %w", opts.Name, err)
	}
	cmd.Env = pluginEnv(cmd.Env)
	key, err := shareKey(cmd, opts.Scope)
	if err != nil {
		return nil, fmt.Errorf("share provider plugin %q: %w", opts.Name, err)
	}
	files := providerwire.FilesOf(filepath.Join(opts.Dir, key+providerwire.SocketSuffix))
	if len(files.Sock) > maxSocketPath {
		return nil, fmt.Errorf("share provider plugin %q: %w: the socket's path %s is longer than a socket's may be (%d bytes); choose a shorter directory", opts.Name, ErrNotShareable, files.Sock, maxSocketPath)
	}
	if _, err := os.Stat(files.Unshared); err == nil {
		return nil, fmt.Errorf("share provider plugin %q: %w (it answered as a plugin of one host, as %s records)", opts.Name, ErrNotShareable, files.Unshared)
	}
	lock, err := os.OpenFile(files.Lock, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("share provider plugin %q: %w", opts.Name, err)
	}
	defer lock.Close() // and with it the lock
	// Looking for the plugin takes the lock shared: hosts connect side
	// by side, while a plugin that is stopping (it takes the lock
	// exclusively) or being started waits for them or makes them wait.
	if err := providerwire.Flock(lock, unix.LOCK_SH); err != nil {
		return nil, fmt.Errorf("share provider plugin %q: lock %s: %w", opts.Name, files.Lock, err)
	}
	p, err := dialShared(files, opts)
	if err == nil {
		return p, nil
	}
	// None answered: start one. (The lock is let go and taken again
	// exclusively, not converted.)
	if err := providerwire.Flock(lock, unix.LOCK_EX); err != nil {
		return nil, fmt.Errorf("share provider plugin %q: lock %s: %w", opts.Name, files.Lock, err)
	}
	if errors.Is(err, errNoServer) {
		// Unless another host did meanwhile.
		if p, err = dialShared(files, opts); err == nil {
			return p, nil
		}
	}
	if !errors.Is(err, errNoServer) {
		// Something listens and does not serve: leave it be (it exits
		// when idle) and put a new one in its place.
		opts.Logger.Warn("the shared provider plugin does not answer; starting another", "plugin", opts.Name, "socket", files.Sock, "error", err)
	}
	if err := os.Remove(files.Sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("share provider plugin %q: remove the stale socket: %w", opts.Name, err)
	}
	if err := startShared(cmd, files, opts); err != nil {
		if errors.Is(err, ErrNotShareable) {
			if f, ferr := os.OpenFile(files.Unshared, os.O_WRONLY|os.O_CREATE, 0o600); ferr == nil {
				f.Close()
			}
		}
		return nil, fmt.Errorf("share provider plugin %q: %w", opts.Name, err)
	}
	if p, err = dialShared(files, opts); err != nil {
		return nil, fmt.Errorf("share provider plugin %q: connect to the plugin it started: %w", opts.Name, err)
	}
	return p, nil
}

// privateDir makes dir (0700) if it is absent, and makes sure it is a
// directory of this user's alone: no one else may reach the sockets in it
// or plant one there.
func privateDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("the shared plugins' directory %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make the shared plugins' directory: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return fmt.Errorf("the shared plugins' directory: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o777 != 0o700 {
		return fmt.Errorf("the shared plugins' directory %s must be a directory of uid %d's alone (mode 0700); it has uid %d and mode %o", dir, os.Geteuid(), st.Uid, st.Mode&0o7777)
	}
	return nil
}

// shareKey names the shared plugin of cmd and scope: a digest of the
// executable file (its path, and its identity on disk, so that a rebuilt
// binary gets a plugin of its own), the arguments, the environment
// (sorted) and scope.
func shareKey(cmd *exec.Cmd, scope string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(cmd.Path, &st); err != nil {
		return "", fmt.Errorf("the plugin's executable: %w", err)
	}
	h := sha256.New()
	field := func(s string) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(s)))
		io.WriteString(h, s)
	}
	field(cmd.Path)
	_ = binary.Write(h, binary.BigEndian, []uint64{st.Dev, st.Ino, uint64(st.Size), uint64(st.Mtim.Nano()), uint64(st.Ctim.Nano())})
	field(fmt.Sprint(len(cmd.Args)))
	for _, a := range cmd.Args {
		field(a)
	}
	env := slices.Sorted(slices.Values(cmd.Env))
	field(fmt.Sprint(len(env)))
	for _, kv := range env {
		field(kv)
	}
	field(scope)
	return hex.EncodeToString(h.Sum(nil)[:16]), nil
}

// startShared starts cmd as the shared plugin of files and waits for it
// to listen. A plugin that answers as go-plugin's (an SDK before sharing)
// is stopped, and the error matches ErrNotShareable.
func startShared(cmd *exec.Cmd, files providerwire.SharedFiles, opts ShareOptions) error {
	// The log of the plugin before it (it crashed, say) is kept, once.
	_ = os.Rename(files.Log, files.Log+".old")
	logFile, err := os.OpenFile(files.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("open its log: %w", err)
	}
	defer logFile.Close()
	ready, readyW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer ready.Close()
	cmd.Env = append(cmd.Env,
		providerwire.Handshake.MagicCookieKey+"="+providerwire.Handshake.MagicCookieValue,
		providerwire.SharedEnv+"="+files.Sock,
		providerwire.SharedIdleEnv+"="+opts.Idle.String())
	cmd.Dir = "/"
	cmd.Stdin = nil
	cmd.Stdout = readyW
	cmd.Stderr = logFile
	// A session of its own: the terminal's signals (Ctrl-C to the host)
	// are not for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	opts.Logger.Debug("starting shared provider plugin", "plugin", opts.Name, "path", cmd.Path, "args", cmd.Args[1:], "socket", files.Sock, "log", files.Log)
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // reaps it, whenever it ends
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(ready).ReadString('\n')
		line <- l
	}()
	t := time.NewTimer(opts.StartTimeout)
	defer t.Stop()
	var got string
	select {
	case got = <-line:
	case <-t.C:
		stop()
		return fmt.Errorf("it did not listen within %s; its log: %s", opts.StartTimeout, files.Log)
	}
	switch {
	case got == providerwire.ReadyLine:
		opts.Logger.Debug("shared provider plugin started", "plugin", opts.Name, "pid", cmd.Process.Pid)
		return nil
	case strings.Count(got, "|") >= 3:
		// go-plugin's handshake line: CORE|APP|NETWORK|ADDRESS|PROTOCOL.
		stop()
		return fmt.Errorf("%w: it answered as a plugin of one host (its SDK predates sharing, or it refuses it)", ErrNotShareable)
	case got == "":
		stop() // it closed its stdout: it is ending
		msg := "it exited before it listened"
		if reason := logReason(files.Log); reason != "" {
			msg += ": " + reason
		}
		return fmt.Errorf("%s; its log: %s", msg, files.Log)
	default:
		stop()
		return fmt.Errorf("it began with %q, not %q; its log: %s", got, providerwire.ReadyLine, files.Log)
	}
}

// errNoServer: no shared plugin listens on the socket.
var errNoServer = errors.New("no shared plugin listens there")

// errRedial is what gRPC gets when it would connect again: a host's
// connection to a shared plugin is one, which it does not replace.
var errRedial = errors.New("the connection to the shared provider plugin is lost")

// dialShared connects to the shared plugin listening at files.Sock: it
// checks that the plugin runs as this user, hands it this host's data
// channel and waits for its answer. An error matching errNoServer means
// nothing listens there.
func dialShared(files providerwire.SharedFiles, opts ShareOptions) (*Plugin, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: files.Sock, Net: "unix"})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, fmt.Errorf("%w: %w", errNoServer, err)
		}
		return nil, err
	}
	p, err := handshakeShared(conn, files, opts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return p, nil
}

func handshakeShared(conn *net.UnixConn, files providerwire.SharedFiles, opts ShareOptions) (*Plugin, error) {
	cred, err := providerwire.PeerCred(conn)
	if err != nil {
		return nil, err
	}
	if int(cred.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("the shared plugin at %s runs as uid %d, not as this user (%d)", files.Sock, cred.Uid, os.Geteuid())
	}
	logger := newHostLogger(opts.Logger.With("plugin", opts.Name))
	var dataHost, dataPeer *os.File
	if !opts.NoDataChannel {
		if dataHost, dataPeer, err = datachan.Offer(); err != nil {
			logger.Warn("no data channel for the plugin; exec bytes go over gRPC", "error", err)
		}
	}
	var oob []byte
	if dataPeer != nil {
		oob = unix.UnixRights(int(dataPeer.Fd()))
	}
	_ = conn.SetDeadline(time.Now().Add(opts.StartTimeout))
	_, _, err = conn.WriteMsgUnix([]byte(providerwire.HelloLine), oob, nil)
	if dataPeer != nil {
		_ = dataPeer.Close() // the plugin has its own now
	}
	ack := make([]byte, len(providerwire.AckLine))
	if err == nil {
		_, err = io.ReadFull(conn, ack)
	}
	if err == nil && string(ack) != providerwire.AckLine {
		err = fmt.Errorf("it answered %q, not %q", ack, providerwire.AckLine)
	}
	if err != nil {
		if dataHost != nil {
			_ = dataHost.Close()
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("it closed the connection")
		}
		return nil, fmt.Errorf("the shared plugin at %s (pid %d): %w", files.Sock, cred.Pid, err)
	}
	_ = conn.SetDeadline(time.Time{})
	var data *datachan.Host
	if dataHost != nil {
		// The plugin said hello on it before it answered.
		if data, err = datachan.Connect(dataHost); err != nil {
			logger.Warn("the plugin's data channel cannot be used; exec bytes go over gRPC", "error", err)
		}
	}
	link := &sharedLink{pid: int(cred.Pid), log: files.Log, gone: make(chan struct{}), follow: followLog(files.Log, logger)}
	wc := &providerwire.WatchedConn{UnixConn: conn, Gone: link.gone, Once: &link.once}
	var dialed atomic.Bool
	cc, err := grpc.NewClient("passthrough:///shared-plugin", append(providerwire.DialOptions(),
		// A private socket whose peer the kernel named: see ShareOptions.
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) {
			if dialed.Swap(true) {
				return nil, errRedial
			}
			return wc, nil
		}),
		// The connection is the host's for as long as it uses the
		// plugin: gRPC must not close it when idle.
		grpc.WithIdleTimeout(0),
	)...)
	if err != nil {
		link.end()
		if data != nil {
			_ = data.Close()
		}
		return nil, fmt.Errorf("connect to the shared plugin at %s: %w", files.Sock, err)
	}
	cc.Connect()
	return &Plugin{name: opts.Name, conn: cc, rpc: newClient(cc, data), data: data, log: logger, shared: link}, nil
}

// sharedLink is a host's connection to a shared plugin.
type sharedLink struct {
	pid    int    // the plugin's process
	log    string // its log file
	once   sync.Once
	gone   chan struct{} // closed when the connection is lost
	follow *logFollower  // nil if its log cannot be read
}

// end stops following the plugin's log, once the host has closed its
// connection.
func (l *sharedLink) end() { l.follow.close() }

func (l *sharedLink) lost() bool {
	select {
	case <-l.gone:
		return true
	default:
		return false
	}
}

// explain is the error of a call that failed because the connection to
// the shared plugin was lost: its last error lines, from its log, say why.
func (l *sharedLink) explain(name string) error {
	msg := fmt.Sprintf("provider plugin %q stopped unexpectedly", name)
	if reason := logReason(l.log); reason != "" {
		msg += ": " + reason
	}
	msg += fmt.Sprintf(" (shared plugin, pid %d; its log: %s)", l.pid, l.log)
	return sdk.Errorf(sdk.ErrUnavailable, "%s", msg)
}

// logTailBytes is how much of the end of a shared plugin's log logReason
// reads.
const logTailBytes = 64 << 10

// logReason picks, from the end of a shared plugin's log, the line that
// best explains its end (see errorTail.reason): a panic, or the last
// record at error level.
func logReason(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > logTailBytes {
		_, _ = f.Seek(fi.Size()-logTailBytes, io.SeekStart)
	}
	tail := &errorTail{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, logTailBytes)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "):
			tail.add(line)
		case strings.Contains(line, `"@level":"error"`):
			if msg := recordMessage(line); msg != "" {
				tail.add(msg)
			}
		}
	}
	return tail.reason()
}

// recordMessage is the message of a log record (a JSON line of NewLogger),
// with its error attribute if it has one.
func recordMessage(line string) string {
	var r struct {
		Message string `json:"@message"`
		Error   string `json:"error"`
	}
	if json.Unmarshal([]byte(line), &r) != nil {
		return ""
	}
	if r.Error != "" {
		return r.Message + ": " + r.Error
	}
	return r.Message
}
