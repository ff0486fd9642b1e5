package daytonatest

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/crypto/ssh"
)

// startGateway starts the SSH gateway on a loopback port. Like Daytona's,
// it lets every client through the SSH handshake (no client
// authentication), then takes the user name as an SSH access token and
// closes the connection unless the token is valid and its sandbox
// started. It refuses every global request (so reverse port forwarding)
// and every channel but "session", and runs a session's "exec" in the
// sandbox.
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
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only session channels are served")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serveSession(s, ch, creqs)
		}()
	}
}

// serveSession serves a session channel: one "exec"; "env", "pty-req",
// "shell" and "subsystem" are refused and "signal" ignored.
func (f *Fake) serveSession(s *sandbox, ch ssh.Channel, reqs <-chan *ssh.Request) {
	done := make(chan struct{})
	execing := false
	for r := range reqs {
		if r.Type != "exec" || execing {
			if r.WantReply {
				_ = r.Reply(false, nil)
			}
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(r.Payload, &payload); err != nil {
			_ = r.Reply(false, nil)
			continue
		}
		execing = true
		f.mu.Lock()
		f.stats.Execs++
		f.mu.Unlock()
		go func(r *ssh.Request) {
			defer close(done)
			f.exec(s, ch, r, payload.Command)
		}(r)
	}
	if execing {
		<-done
	}
	ch.Close()
}

// exec runs one exec request's command and sends its exit status once
// its output has all been written, then closes the channel.
func (f *Fake) exec(s *sandbox, ch ssh.Channel, r *ssh.Request, cmd string) {
	replied := false
	st, err := f.backend.run(f.ctx, s, execRequest{
		cmd:    cmd,
		stdin:  ch,
		stdout: ch,
		stderr: ch.Stderr(),
		started: func() {
			replied = true
			if r.WantReply {
				_ = r.Reply(true, nil)
			}
		},
	})
	if !replied {
		f.logger.Debug("daytonatest: gateway exec", "sandbox", s.id, "error", err)
		if r.WantReply {
			_ = r.Reply(false, nil)
		}
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
