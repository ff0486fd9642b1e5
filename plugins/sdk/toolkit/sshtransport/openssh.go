package sshtransport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// Bulk execs through OpenSSH. x/crypto/ssh moves a stream at about two
// thirds of OpenSSH's speed (the cost is on both ends: sshd spends more
// per byte talking to it), so an exec that moves much data (ExecBulk)
// goes through a connection of OpenSSH's own client, multiplexed by a
// master (ControlMaster) the Conn starts and owns, when Options.OpenSSH
// names the client. The master trusts exactly the host key the Conn's own
// login verified, logs in with the same agent and key files, reads no
// ssh_config, and never asks for anything. Its sessions write the
// caller's output file themselves.

// bulkSessions is how many bulk execs share the master at once, within
// OpenSSH's default MaxSessions (10); more go through x/crypto/ssh.
const bulkSessions = 8

// hostKeyAlias is the name the master's known_hosts gives the target.
const hostKeyAlias = "amelia-target"

// bulk is the OpenSSH side of a Conn.
type bulk struct {
	mu     sync.Mutex
	dir    string  // the master's socket, known_hosts and logs; "" until made
	master *master // the current master, nil when none runs
	n      int     // masters started
	// off says why bulk execs no longer use OpenSSH (a master that could
	// not log in): they go through x/crypto/ssh.
	off error
}

// master is an OpenSSH ControlMaster process of the Conn's.
type master struct {
	sock  string
	cmd   *exec.Cmd
	up    chan struct{} // closed once the master listens, or ended
	ended chan struct{} // closed once the process ended
	ok    bool          // it listened; read after up is closed
	err   error         // why it ended; read after ended is closed
	slots chan struct{}
	key   ssh.PublicKey // the host key it trusts
}

// ExecBulk is Exec for a command that moves much data: through OpenSSH
// when Options.OpenSSH is set, the Conn logs in directly with keys
// (no Jump, no Login), and eio.Stdout is a file the caller owns
// (sdk.OutputFile, or a sdk.PipeWriter whose File is the host's own).
// Otherwise, and when OpenSSH cannot log in (the reason is logged once),
// it is Exec.
//
// The command line is an argument of a local ssh process, as with `ssh
// host command`: any local user may read it (ps). Keep secrets out of a
// bulk exec's environment and arguments.
func (c *Conn) ExecBulk(ctx context.Context, cmd shexec.Command, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	if c.opts.OpenSSH == "" || c.target.Jump != nil || c.target.Login != nil {
		return c.Exec(ctx, cmd, eio, grace)
	}
	out, ok := ownFile(eio.Stdout)
	if !ok {
		return c.Exec(ctx, cmd, eio, grace)
	}
	m, err := c.bulkMaster(ctx)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	if m == nil {
		return c.Exec(ctx, cmd, eio, grace)
	}
	select {
	case m.slots <- struct{}{}:
		defer func() { <-m.slots }()
	default:
		return c.Exec(ctx, cmd, eio, grace)
	}
	st, err := c.execOpenSSH(ctx, m, cmd, out, eio, grace)
	if errors.Is(err, errNotStarted) {
		// Nothing ran, nothing was read (a command line too long for
		// an argument, say).
		c.opts.Logger.Debug("a bulk exec goes through x/crypto/ssh", "target", c.target.String(), "reason", err)
		return c.Exec(ctx, cmd, eio, grace)
	}
	return st, err
}

// errNotStarted: OpenSSH's ssh did not start.
var errNotStarted = errors.New("OpenSSH's ssh did not start")

// ownFile is w as a file a process may be given as its output.
func ownFile(w io.Writer) (*os.File, bool) {
	switch w := w.(type) {
	case sdk.OutputFile:
		return w.File, w.File != nil
	case *sdk.PipeWriter:
		return w.File()
	}
	return nil, false
}

// bulkMaster returns the running master, starting one (and waiting for it
// to listen) when there is none; nil when bulk execs do not use OpenSSH.
func (c *Conn) bulkMaster(ctx context.Context) (*master, error) {
	// The Conn's own login verifies the host key the master will trust.
	if _, err := c.liveClient(ctx); err != nil {
		return nil, err
	}
	c.bulk.mu.Lock()
	m := c.bulk.master
	if m != nil {
		select {
		case <-m.ended:
			m = nil
		default:
		}
	}
	if m == nil && c.bulk.off == nil {
		var err error
		if m, err = c.startMaster(); err != nil {
			c.bulkOff(err)
		}
		c.bulk.master = m
	}
	c.bulk.mu.Unlock()
	if m == nil {
		return nil, nil
	}
	select {
	case <-m.up:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if m.ok {
		return m, nil
	}
	<-m.ended
	c.bulk.mu.Lock()
	if c.bulk.master == m {
		c.bulkOff(m.err)
	}
	c.bulk.mu.Unlock()
	return nil, nil
}

// bulkOff turns OpenSSH off for the Conn's bulk execs, saying why once;
// c.bulk.mu is held.
func (c *Conn) bulkOff(why error) {
	if c.bulk.off != nil {
		return
	}
	c.bulk.off = why
	c.opts.Logger.Info("bulk execs go through x/crypto/ssh: OpenSSH's ssh cannot log in", "target", c.target.String(), "reason", why)
}

// startMaster starts a master; c.bulk.mu is held.
func (c *Conn) startMaster() (*master, error) {
	key := c.verifiedKey()
	if key == nil {
		return nil, errors.New("no verified host key")
	}
	if c.bulk.dir == "" {
		dir, err := os.MkdirTemp("", "amelia-ssh-")
		if err != nil {
			return nil, fmt.Errorf("make a directory for OpenSSH: %w", err)
		}
		c.bulk.dir = dir
	}
	if err := os.WriteFile(filepath.Join(c.bulk.dir, "known_hosts"), []byte(knownhosts.Line([]string{hostKeyAlias}, key)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write the known host for OpenSSH: %w", err)
	}
	c.bulk.n++
	sock := filepath.Join(c.bulk.dir, "cm"+strconv.Itoa(c.bulk.n))
	logFile := filepath.Join(c.bulk.dir, "master"+strconv.Itoa(c.bulk.n)+".log")
	args, err := c.opensshArgs(logFile, key)
	if err != nil {
		return nil, err
	}
	// LocalCommand runs once the master listens; then ssh points its
	// stdout at /dev/null, so the pipe ends either way.
	args = append(args, "-M", "-N", "-S", sock, "-o", "ControlPersist=no",
		"-o", "PermitLocalCommand=yes", "-o", "LocalCommand=echo listening")
	args = append(args, c.hostArgs()...)
	cmd := exec.Command(c.opts.OpenSSH, args...)
	cmd.Env = opensshEnv()
	cmd.SysProcAttr = childAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("start OpenSSH's ssh: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start OpenSSH's ssh: %w", err)
	}
	m := &master{sock: sock, cmd: cmd, key: key, up: make(chan struct{}), ended: make(chan struct{}), slots: make(chan struct{}, bulkSessions)}
	go func() {
		b, _ := io.ReadAll(out)
		m.ok = bytes.Contains(b, []byte("listening"))
		close(m.up)
		err := cmd.Wait()
		m.err = failure(logFile, err)
		_ = os.Remove(logFile)
		_ = os.Remove(sock)
		close(m.ended)
		c.opts.Logger.Debug("OpenSSH master ended", "target", c.target.String(), "reason", m.err)
	}()
	return m, nil
}

// verifiedKey is the host key the Conn's last login verified.
func (c *Conn) verifiedKey() ssh.PublicKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hostKey
}

// failure explains an OpenSSH process that ended with err, from its log.
func failure(logFile string, err error) error {
	b, _ := os.ReadFile(logFile)
	msg := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	switch {
	case msg != "":
		return errors.New(strings.TrimSpace(msg))
	case err != nil:
		return err
	}
	return errors.New("it ended")
}

// closeBulk stops the master and removes its directory.
func (c *Conn) closeBulk() {
	c.bulk.mu.Lock()
	m, dir := c.bulk.master, c.bulk.dir
	c.bulk.master, c.bulk.dir = nil, ""
	c.bulk.off = errors.New("ssh connection closed")
	c.bulk.mu.Unlock()
	if m != nil {
		_ = m.cmd.Process.Kill()
		<-m.ended
	}
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// execOpenSSH runs cmd as a session of m, its stdout going to out as it
// is. The wrapper reports the exit code: the client's own is 255 both
// for its failures and for a command a signal killed.
func (c *Conn) execOpenSSH(ctx context.Context, m *master, cmd shexec.Command, out *os.File, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	cmd.ReportExit = true
	logFile := filepath.Join(filepath.Dir(m.sock), "exec-"+cmd.Tag+".log")
	defer os.Remove(logFile)
	args, err := c.opensshArgs(logFile, m.key)
	if err != nil {
		return sdk.ExitStatus{}, err
	}
	args = append(args, "-S", m.sock, "-o", "ControlMaster=no")
	args = append(append(args, c.hostArgs()...), cmd.Line())
	p := exec.Command(c.opts.OpenSSH, args...)
	p.Env = opensshEnv()
	p.SysProcAttr = childAttr()
	p.Stdout = out
	// stderr is a pipe of its own, not exec's: the master holds the
	// client's copy of it too, so only closing the read end (Cut) ends
	// the copy while the remote command runs on.
	errR, errW, err := os.Pipe()
	if err != nil {
		return sdk.ExitStatus{}, fmt.Errorf("make the stderr pipe of an exec: %w", err)
	}
	defer errR.Close()
	p.Stderr = errW
	var stdinW *os.File
	switch in := eio.Stdin.(type) {
	case nil:
	case *sdk.PipeReader:
		p.Stdin = in.File()
	default:
		// A pipe of its own: exec's copy would make Wait wait for a
		// stdin the command may never read to its end.
		r, w, err := os.Pipe()
		if err != nil {
			errW.Close()
			return sdk.ExitStatus{}, fmt.Errorf("make the stdin pipe of an exec: %w", err)
		}
		defer r.Close()
		p.Stdin, stdinW = r, w
	}
	err = p.Start()
	errW.Close()
	if err != nil {
		if stdinW != nil {
			stdinW.Close()
		}
		return sdk.ExitStatus{}, fmt.Errorf("%w: %v", errNotStarted, err)
	}
	if stdinW != nil {
		go func() {
			_, _ = io.CopyBuffer(stdinW, eio.Stdin, make([]byte, 256<<10))
			stdinW.Close()
		}()
	}
	ctl := shexec.NewExitControl(eio.Stderr, cmd.Tag)
	ended := make(chan error, 1)
	go func() {
		if _, err := io.Copy(ctl, errR); err != nil {
			// A failed write to the caller's stderr: the rest is
			// dropped, not left to block the command.
			_, _ = io.Copy(io.Discard, errR)
		}
		err := p.Wait()
		ctl.Finish()
		ended <- err
	}()
	cut := false
	st, delivered, waitErr := c.await(ctx, ctl, ended, cmd.Tag, grace, func() {
		cut = true
		_ = p.Process.Kill()
		errR.Close()
	})
	if err := notRun(ctl); err != nil {
		return st, err
	}
	if code, ok := ctl.Exit(); ok {
		st.Code, st.Signal = code, shexec.Signal(delivered, code)
		return st, nil
	}
	if cut {
		return st, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: the cancelled command's output did not end; it may still run", c.target)
	}
	code := -1
	if exit, ok := errors.AsType[*exec.ExitError](waitErr); ok {
		code = exit.ExitCode()
	}
	if code >= 0 && code != 255 {
		// The command did not run: the wrapper's own exit (127: no
		// such command).
		st.Code = code
		return st, nil
	}
	if n, ok := rfc4254Signals[delivered]; ok {
		// Killed, the wrapper with it, by the signal sent.
		st.Code, st.Signal = 128+n, delivered
		return st, nil
	}
	why := failure(logFile, waitErr)
	if strings.Contains(why.Error(), "IDENTIFICATION HAS CHANGED") || strings.Contains(why.Error(), "Host key verification failed") {
		return st, sdk.Errorf(sdk.ErrPermission, "ssh %s: OpenSSH refused the host key: it is not the one verified at login (%v)", c.target, why)
	}
	return st, sdk.Errorf(sdk.ErrUnavailable, "ssh %s: the command ended without an exit status (the connection failed, or the command was killed): %v", c.target, why)
}

// opensshArgs are the options of every OpenSSH process of the Conn: no
// ssh_config, the one host key to trust (the master's known_hosts, which
// holds the key the Conn's login verified), the Conn's keys, nothing
// asked, nothing forwarded, its log in logFile.
func (c *Conn) opensshArgs(logFile string, key ssh.PublicKey) ([]string, error) {
	dir := filepath.Dir(logFile)
	agent := "none"
	if c.target.Auth.AgentSocket != "" {
		agent = c.target.Auth.AgentSocket
	}
	for _, p := range []string{dir, agent} {
		if !plainPath(p) {
			return nil, fmt.Errorf("path %q has characters OpenSSH would expand", p)
		}
	}
	secs := func(d time.Duration) string { return strconv.Itoa(max(1, int(math.Ceil(d.Seconds())))) }
	args := []string{"-F", "none", "-T", "-E", logFile,
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
		"-o", "HostKeyAlias=" + hostKeyAlias,
		"-o", "UserKnownHostsFile=" + filepath.Join(dir, "known_hosts"), "-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "HostKeyAlgorithms=" + hostKeyAlgorithms(key.Type()),
		"-o", "StrictHostKeyChecking=yes", "-o", "CheckHostIP=no", "-o", "UpdateHostKeys=no",
		"-o", "IdentityAgent=" + agent,
		"-o", "PreferredAuthentications=publickey", "-o", "PasswordAuthentication=no", "-o", "KbdInteractiveAuthentication=no",
		"-o", "ForwardAgent=no", "-o", "ForwardX11=no", "-o", "ClearAllForwardings=yes",
		"-o", "ConnectTimeout=" + secs(c.opts.DialTimeout),
		"-o", "ServerAliveInterval=" + secs(c.opts.KeepAlive), "-o", "ServerAliveCountMax=2",
		// AES-GCM first: with AES instructions, much cheaper than
		// OpenSSH's default ChaCha20 at both ends.
		"-o", "Ciphers=aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr",
	}
	for _, f := range c.target.Auth.IdentityFiles {
		if _, err := os.Stat(f); err != nil && c.target.Auth.Optional {
			continue
		}
		if !plainPath(f) {
			return nil, fmt.Errorf("identity file %q has characters OpenSSH would expand", f)
		}
		args = append(args, "-i", f)
	}
	return args, nil
}

// hostArgs name the target: its port, the login, the host.
func (c *Conn) hostArgs() []string {
	host, port, err := net.SplitHostPort(c.target.Addr)
	if err != nil {
		host, port = c.target.Addr, "22"
	}
	return []string{"-p", port, "-l", c.target.User, "--", host}
}

// hostKeyAlgorithms are the algorithms that verify a key of type t.
func hostKeyAlgorithms(t string) string {
	if t == ssh.KeyAlgoRSA {
		return ssh.KeyAlgoRSASHA512 + "," + ssh.KeyAlgoRSASHA256
	}
	return t
}

// plainPath reports whether OpenSSH takes p as it is: no tokens (%),
// variables ($), home (~) or characters its option parsing splits on.
func plainPath(p string) bool {
	return p != "" && !strings.ContainsAny(p, "%$~\"' \t\n\\#=")
}

// opensshEnv is the environment of an OpenSSH process: nothing that
// points it at an agent, a password prompt or a display of the user's.
func opensshEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		k, _, _ := strings.Cut(e, "=")
		switch {
		case k == "SSH_AUTH_SOCK", k == "DISPLAY", k == "SHELL", strings.HasPrefix(k, "SSH_ASKPASS"):
			continue
		}
		env = append(env, e)
	}
	return append(env, "SSH_ASKPASS_REQUIRE=never", "SHELL=/bin/sh")
}
