package sshtransport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

// conn is a Conn to srv with its client key and known_hosts.
func conn(t *testing.T, srv *sshtest.Server, auth sshtransport.Auth, knownHosts string, policy sshtransport.HostKeyPolicy) *sshtransport.Conn {
	t.Helper()
	hk, err := sshtransport.KnownHosts(knownHosts, policy)
	if err != nil {
		t.Fatal(err)
	}
	c := sshtransport.New(sshtransport.Target{Addr: srv.Addr(), User: srv.User, Auth: auth, HostKeys: hk}, sshtransport.Options{})
	t.Cleanup(func() { c.Close() })
	return c
}

func keyAuth(srv *sshtest.Server) sshtransport.Auth {
	return sshtransport.Auth{IdentityFiles: []string{srv.ClientKey}}
}

func TestKeyFileLogin(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c := conn(t, srv, keyAuth(srv), srv.KnownHosts, sshtransport.Strict)
	out, err := c.Output(t.Context(), "echo hello; id -un", nil)
	if err != nil || out != "hello\n"+srv.User+"\n" {
		t.Fatalf("Output: %q, %v", out, err)
	}
	if _, err := c.Output(t.Context(), "echo oops >&2; exit 3", nil); err == nil || err.Error() != "exit status 3: oops" {
		t.Errorf("a failing command: %v", err)
	}
}

// A key with a passphrase logs in through the agent that holds it; without
// an agent, the error says what to do.
func TestAgentLoginAndEncryptedKey(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	key := filepath.Join(t.TempDir(), "id_locked")
	srv.Authorize(sshtest.Keygen(t, key, "correct horse"))

	_, err := conn(t, srv, sshtransport.Auth{IdentityFiles: []string{key}}, srv.KnownHosts, sshtransport.Strict).Output(t.Context(), "true", nil)
	if !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "has a passphrase and no ssh-agent holds the key: add it with `ssh-add "+key+"`") {
		t.Errorf("an encrypted key without an agent: %v", err)
	}

	agent := sshtest.StartAgent(t, key, "correct horse")
	for _, auth := range []sshtransport.Auth{
		{AgentSocket: agent.Socket},
		{AgentSocket: agent.Socket, IdentityFiles: []string{key}}, // the file is the agent's key: skipped
	} {
		if out, err := conn(t, srv, auth, srv.KnownHosts, sshtransport.Strict).Output(t.Context(), "echo via-agent", nil); err != nil || out != "via-agent\n" {
			t.Errorf("login with %+v: %q, %v", auth, out, err)
		}
	}

	// A key the server does not accept: the error names what was tried.
	other := filepath.Join(t.TempDir(), "id_other")
	sshtest.Keygen(t, other, "")
	_, err = conn(t, srv, sshtransport.Auth{IdentityFiles: []string{other}}, srv.KnownHosts, sshtransport.Strict).Output(t.Context(), "true", nil)
	if !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "refused the login (tried "+other+")") {
		t.Errorf("a key the server does not know: %v", err)
	}
}

// Unknown hosts are refused under strict with the line to add, and
// recorded under accept-new; a changed key is always refused.
func TestHostKeys(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	empty := filepath.Join(t.TempDir(), "known_hosts")
	_, err := conn(t, srv, keyAuth(srv), empty, sshtransport.Strict).Output(t.Context(), "true", nil)
	line := fmt.Sprintf("[127.0.0.1]:%d %s", srv.Port, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(srv.HostKey))))
	if !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "is not known (ssh-ed25519 "+ssh.FingerprintSHA256(srv.HostKey)+")") || !strings.Contains(err.Error(), line) {
		t.Errorf("unknown host under strict:\n%v\nwant the fingerprint and the line %s", err, line)
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("strict wrote the known_hosts file: %v", err)
	}

	if _, err := conn(t, srv, keyAuth(srv), empty, sshtransport.AcceptNew).Output(t.Context(), "true", nil); err != nil {
		t.Fatalf("unknown host under accept-new: %v", err)
	}
	b, _ := os.ReadFile(empty)
	if strings.TrimSpace(string(b)) != line {
		t.Errorf("accept-new recorded %q, want %q", b, line)
	}
	if _, err := conn(t, srv, keyAuth(srv), empty, sshtransport.Strict).Output(t.Context(), "true", nil); err != nil {
		t.Errorf("the recorded host under strict: %v", err)
	}

	srv.ChangeHostKey()
	for _, policy := range []sshtransport.HostKeyPolicy{sshtransport.Strict, sshtransport.AcceptNew} {
		_, err := conn(t, srv, keyAuth(srv), empty, policy).Output(t.Context(), "true", nil)
		if !errors.Is(err, sdk.ErrPermission) || !strings.Contains(err.Error(), "REMOTE HOST IDENTIFICATION HAS CHANGED") || !strings.Contains(err.Error(), ssh.FingerprintSHA256(srv.HostKey)) {
			t.Errorf("changed host key under %s: %v", policy, err)
		}
	}
}

// With MaxSessions 2, eight sessions at once all run: the Conn opens more
// connections rather than failing.
func TestMaxSessions(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{MaxSessions: 2})
	c := conn(t, srv, keyAuth(srv), srv.KnownHosts, sshtransport.Strict)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			out, err := c.Output(t.Context(), fmt.Sprintf("sleep 0.3; echo %d", i), nil)
			if err == nil && out != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("output %q", out)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("session %d: %v", i, err)
		}
	}
}

// A connection that drops fails what runs on it; the next command
// connects again.
func TestReconnect(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c := conn(t, srv, keyAuth(srv), srv.KnownHosts, sshtransport.Strict)
	s, release, err := c.Session(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	out, _ := s.StdoutPipe()
	if err := s.Start("echo started; sleep 600"); err != nil {
		t.Fatal(err)
	}
	line := make([]byte, 8)
	if _, err := io.ReadFull(out, line); err != nil {
		t.Fatal(err)
	}
	srv.KillSessions()
	if err := s.Wait(); err == nil {
		t.Error("a session whose connection dropped ended without an error")
	}
	if got, err := c.Output(t.Context(), "echo again", nil); err != nil || got != "again\n" {
		t.Errorf("after the drop: %q, %v", got, err)
	}
}

// Listen forwards connections made on the server back to the client; a
// server that refuses forwarding says so.
func TestListen(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c := conn(t, srv, keyAuth(srv), srv.KnownHosts, sshtransport.Strict)
	lis, err := c.Listen(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		conn, err := lis.Accept()
		if err != nil {
			return
		}
		conn.Write([]byte("from the host\n"))
		conn.Close()
	}()
	port := lis.Addr().(*net.TCPAddr).Port
	out, err := c.Output(t.Context(), fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d; cat <&3", port), nil)
	if err != nil || out != "from the host\n" {
		t.Errorf("through the forward: %q, %v", out, err)
	}

	closed := sshtest.Start(t, sshtest.Options{NoForwarding: true})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := conn(t, closed, keyAuth(closed), closed.KnownHosts, sshtransport.Strict).Listen(ctx, "127.0.0.1:0"); !errors.Is(err, sdk.ErrUnsupported) {
		t.Errorf("Listen on a server without forwarding: %v, want ErrUnsupported", err)
	}
}
