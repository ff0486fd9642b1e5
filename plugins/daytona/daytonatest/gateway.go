package daytonatest

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/daytona/api"
)

// startGateway starts the SSH gateway on a loopback port. Like Daytona's,
// it lets every client through the SSH handshake (no client
// authentication), then takes the user name as an SSH access token and
// closes the connection unless the token is valid and its sandbox
// started. It answers every global request false (so refuses reverse port
// forwarding, and answers keepalives), and serves channels as the package
// comment says (or as an ideal server, with Options.IdealGateway).
func (f *Fake) startGateway() error {
	signer, err := newHostKey()
	if err != nil {
		return err
	}
	f.hostKey = signer.PublicKey()
	f.sshCfg = &ssh.ServerConfig{NoClientAuth: true, ServerVersion: "SSH-2.0-daytonatest"}
	f.sshCfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the SSH gateway: %w", err)
	}
	f.sshLn = ln
	f.gateway = ln.Addr().String()
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					f.logger.Error("daytonatest: gateway accept", "error", err)
				}
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.serveConn(c)
			}()
		}
	}()
	return nil
}

// serveConn serves one gateway connection.
func (f *Fake) serveConn(c net.Conn) {
	sc, chans, reqs, err := ssh.NewServerConn(c, f.sshCfg)
	if err != nil {
		c.Close()
		f.logger.Debug("daytonatest: gateway handshake", "error", err)
		return
	}
	defer sc.Close()
	f.mu.Lock()
	s, why := f.checkTokenLocked(sc.User(), true)
	if why != "" || f.closed {
		f.stats.RefusedLogins++
		f.mu.Unlock()
		f.logger.Debug("daytonatest: gateway refused a login", "reason", why)
		return
	}
	f.stats.Logins++
	f.conns[sc] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.conns, sc)
		f.mu.Unlock()
	}()

	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for r := range reqs {
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
		}
	}()
	for nc := range chans {
		typ := nc.ChannelType()
		if f.opts.IdealGateway && typ != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels are served")
			continue
		}
		// Daytona's gateway accepts every channel before it connects to
		// the runner, and closes it when the sandbox cannot serve it.
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		f.mu.Lock()
		f.stats.Channels++
		switch typ {
		case "session":
			f.stats.Sessions++
		case "direct-tcpip":
			f.stats.Forwards++
		}
		f.mu.Unlock()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.keepAlive(s)() // the gateway's, while the channel is open
			if f.opts.IdealGateway {
				f.serveIdealSession(s, ch, creqs)
				return
			}
			f.serveChannel(s, typ, nc.ExtraData(), ch, creqs)
		}()
	}
}

// serveChannel serves a channel as Daytona's chain does: session and
// direct-tcpip channels reach the sandbox while it is started; anything
// else is closed, as the daemon refuses it.
func (f *Fake) serveChannel(s *sandbox, typ string, extra []byte, ch ssh.Channel, reqs <-chan *ssh.Request) {
	f.mu.Lock()
	up := s.state == api.StateStarted
	f.mu.Unlock()
	switch {
	case up && typ == "session":
		f.serveSession(s, ch, reqs)
	case up && typ == "direct-tcpip":
		go ssh.DiscardRequests(reqs)
		f.forward(s, ch, extra)
	default:
		go ssh.DiscardRequests(reqs)
		ch.Close()
	}
}

// serveSession serves a session channel as Daytona's daemon (gliderlabs/ssh)
// does behind the two hops: "env" is accepted and ignored; "pty-req" and
// "window-change" are accepted; one "exec" or "shell" runs, with a pty
// only when it has no command; "signal" goes to the command's shell;
// anything else is refused.
func (f *Fake) serveSession(s *sandbox, ch ssh.Channel, reqs <-chan *ssh.Request) {
	ended := make(chan struct{}) // the client closed the channel, or went away
	signals := make(chan string, 16)
	ran := make(chan struct{})
	var (
		pty     *ptyRequest
		resize  chan windowSize
		running bool
	)
	for r := range reqs {
		switch r.Type {
		case "env":
			reply(r, !running)
		case "pty-req":
			var p struct {
				Term                      string
				Cols, Rows, Width, Height uint32
				Modes                     string
			}
			if running || pty != nil || ssh.Unmarshal(r.Payload, &p) != nil {
				reply(r, false)
				continue
			}
			resize = make(chan windowSize, 1)
			pty = &ptyRequest{term: p.Term, cols: p.Cols, rows: p.Rows, resize: resize}
			reply(r, true)
		case "window-change":
			var p struct{ Cols, Rows, Width, Height uint32 }
			if pty == nil || ssh.Unmarshal(r.Payload, &p) != nil {
				reply(r, false)
				continue
			}
			// Only the latest size matters.
			select {
			case <-resize:
			default:
			}
			resize <- windowSize{cols: p.Cols, rows: p.Rows}
			reply(r, true)
		case "signal":
			// Never answered, as gliderlabs/ssh does not; kept until the
			// command runs.
			var p struct{ Signal string }
			if ssh.Unmarshal(r.Payload, &p) == nil {
				select {
				case signals <- p.Signal:
				default:
				}
			}
		case "exec", "shell":
			var p struct{ Command string }
			if running || r.Type == "exec" && ssh.Unmarshal(r.Payload, &p) != nil {
				reply(r, false)
				continue
			}
			running = true
			reply(r, true)
			f.mu.Lock()
			f.stats.Execs++
			f.mu.Unlock()
			req := execRequest{cmd: p.Command, noCommand: p.Command == "", daemonChild: true, signals: signals}
			if p.Command == "" {
				req.pty = pty
			}
			go func() {
				defer close(ran)
				f.runSession(s, ch, req, ended)
			}()
		default:
			reply(r, false)
		}
	}
	close(ended)
	if running {
		<-ran
	}
	ch.Close()
}

func reply(r *ssh.Request, ok bool) {
	if r.WantReply {
		_ = r.Reply(ok, nil)
	}
}

// runSession runs a session's command as the daemon does, and ends the
// channel as the chain does: stdout is delivered, stderr dropped against
// the window; a signal's death becomes exit-status 1, a pty shell's end
// exit-status 0; and the exit-status is sometimes lost.
func (f *Fake) runSession(s *sandbox, ch ssh.Channel, req execRequest, ended <-chan struct{}) {
	w := &window{free: f.opts.Window, ended: ended, stall: func() {
		f.mu.Lock()
		f.stats.Stalls++
		f.mu.Unlock()
	}}
	req.stdin = ch
	req.stdout = &windowWriter{w: w, dst: ch}
	req.stderr = &windowWriter{w: w}
	st, err := f.backend.run(f.ctx, s, req)
	lost := f.opts.ExitStatusLoss > 0 && mrand.Float64() < f.opts.ExitStatusLoss
	f.mu.Lock()
	f.stats.StderrDropped += w.droppedBytes()
	if err == nil && lost {
		f.stats.ExitStatusesLost++
	}
	f.mu.Unlock()
	if err != nil {
		f.logger.Debug("daytonatest: gateway command", "sandbox", s.id, "error", err)
		ch.Close()
		return
	}
	code := st.code
	switch {
	case req.pty != nil:
		code = 0
	case st.signal != "":
		code = 1
	}
	if !lost {
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
	}
	ch.Close()
}

// forward serves a direct-tcpip channel: a connection to the host and port
// it names, dialled from the sandbox. As on the daemon, when either side
// ends, both close.
func (f *Fake) forward(s *sandbox, ch ssh.Channel, extra []byte) {
	defer ch.Close()
	var p struct {
		Host       string
		Port       uint32
		OriginHost string
		OriginPort uint32
	}
	if err := ssh.Unmarshal(extra, &p); err != nil {
		f.logger.Debug("daytonatest: gateway forward", "sandbox", s.id, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	conn, err := f.backend.dial(ctx, s, p.Host, p.Port)
	cancel()
	if err != nil {
		f.logger.Debug("daytonatest: gateway forward", "sandbox", s.id, "error", err)
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(ch, conn)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(conn, ch)
		done <- struct{}{}
	}()
	left := 2
	select {
	case <-done:
		left--
	case <-f.ctx.Done():
	}
	conn.Close()
	ch.Close()
	for ; left > 0; left-- {
		<-done
	}
}

// serveIdealSession serves a session channel as a clean SSH server would
// (Options.IdealGateway): one "exec"; "env", "pty-req", "shell" and
// "subsystem" are refused and "signal" ignored.
func (f *Fake) serveIdealSession(s *sandbox, ch ssh.Channel, reqs <-chan *ssh.Request) {
	done := make(chan struct{})
	execing := false
	for r := range reqs {
		if r.Type != "exec" || execing {
			reply(r, false)
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(r.Payload, &payload); err != nil {
			reply(r, false)
			continue
		}
		execing = true
		f.mu.Lock()
		f.stats.Execs++
		f.mu.Unlock()
		go func(r *ssh.Request) {
			defer close(done)
			f.idealExec(s, ch, r, payload.Command)
		}(r)
	}
	if execing {
		<-done
	}
	ch.Close()
}

// idealExec runs one exec request's command as the leader of its own
// session and process group and sends its exit status (or signal) once
// its output has all been written, then closes the channel.
func (f *Fake) idealExec(s *sandbox, ch ssh.Channel, r *ssh.Request, cmd string) {
	replied := false
	st, err := f.backend.run(f.ctx, s, execRequest{
		cmd:    cmd,
		stdin:  ch,
		stdout: ch,
		stderr: ch.Stderr(),
		started: func() {
			replied = true
			reply(r, true)
		},
	})
	if !replied {
		f.logger.Debug("daytonatest: gateway exec", "sandbox", s.id, "error", err)
		reply(r, false)
		ch.Close()
		return
	}
	if err != nil {
		f.logger.Debug("daytonatest: gateway exec", "sandbox", s.id, "error", err)
		ch.Close()
		return
	}
	if st.signal != "" {
		_, _ = ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
			Signal     string
			CoreDumped bool
			Error      string
			Lang       string
		}{Signal: st.signal}))
	} else {
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(st.code)}))
	}
	ch.Close()
}
