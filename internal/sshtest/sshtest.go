// Package sshtest starts real OpenSSH servers for tests: `sshd -D -e` on a
// free loopback port with a fresh host key and an authorized client key,
// run as the current user, stopped when the test ends; and a real
// ssh-agent.
//
// Tests that need sshd skip with a loud message when it is not installed,
// unless AMELIA_REQUIRE_SSHD is set (CI sets it), which makes that a
// failure.
package sshtest

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"golang.org/x/crypto/ssh"

	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/hostproc"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
)

// RequireEnv makes a missing sshd a test failure when set.
const RequireEnv = "AMELIA_REQUIRE_SSHD"

// Options change the server's configuration.
type Options struct {
	// MaxSessions per connection (sshd's default is 10).
	MaxSessions int
	// NoForwarding sets AllowTcpForwarding no.
	NoForwarding bool
}

// Server is a running sshd.
type Server struct {
	Host string // 127.0.0.1
	Port int
	User string // the current user
	// ClientKey is an unencrypted private key the server accepts.
	ClientKey string
	// KnownHosts holds the server's host key line.
	KnownHosts string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey

	t      testing.TB
	dir    string
	config string
	tag    string // NAME=value in the environment of every session's command
	mu     sync.Mutex
	cmd    *exec.Cmd
	log    *sdktest.Buffer
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// sshd finds the sshd binary, or skips or fails the test.
func sshd(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/sshd", "/usr/local/sbin/sshd"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("sshd"); err == nil {
		return p
	}
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("no sshd, and %s is set: install openssh-server", RequireEnv)
	}
	t.Skipf("SKIPPING: this test needs OpenSSH's sshd, which is not installed (Debian: openssh-server); set %s=1 to make that a failure", RequireEnv)
	return ""
}

// Keygen makes an ed25519 key pair at path (and path.pub), with passphrase
// when it is not empty, and returns the public key.
func Keygen(t testing.TB, path, passphrase string) ssh.PublicKey {
	t.Helper()
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-C", "amelia-test", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	b, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// Start starts sshd for the test.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin := sshd(t)
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if u.Uid == "0" {
		// As root, sshd separates privileges and needs this directory.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			t.Fatalf("sshd as root needs /run/sshd: %v", err)
		}
	}
	dir := t.TempDir()
	s := &Server{Host: "127.0.0.1", User: u.Username, t: t, dir: dir, log: &sdktest.Buffer{},
		tag: "AMELIA_SSHTEST_SERVER=" + rand.Text()}
	s.HostKey = Keygen(t, filepath.Join(dir, "host_key"), "")
	s.ClientKey = filepath.Join(dir, "client_key")
	client := Keygen(t, s.ClientKey, "")
	s.Authorize(client)

	lines := []string{
		"ListenAddress 127.0.0.1",
		"HostKey " + filepath.Join(dir, "host_key"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"PermitRootLogin prohibit-password",
		"UsePAM no",
		"StrictModes no",
		"PidFile none",
		"LogLevel VERBOSE",
		// bash, as the login shell of a command sshd runs, reads ~/.bashrc
		// unless SHLVL says it is nested: the tests' logins must not
		// depend on (or print what is printed by) the rc files of the
		// user running them. Noise from rc files is shexec's own test.
		// The tag finds what the sessions leave running when the server
		// stops.
		"SetEnv SHLVL=1 " + s.tag,
	}
	if opts.MaxSessions > 0 {
		lines = append(lines, fmt.Sprintf("MaxSessions %d", opts.MaxSessions))
	}
	if opts.NoForwarding {
		lines = append(lines, "AllowTcpForwarding no")
	}
	s.config = filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(s.config, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start(bin, 0)
	s.KnownHosts = filepath.Join(dir, "known_hosts")
	s.WriteKnownHosts(s.KnownHosts)
	t.Cleanup(s.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.log.String())
		}
	})
	return s
}

// start runs sshd on port (a free one when 0) and returns once it
// listens.
func (s *Server) start(bin string, port int) {
	t := s.t
	t.Helper()
	fixed := port != 0
	for attempt := 0; ; attempt++ {
		if !fixed {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port = lis.Addr().(*net.TCPAddr).Port
			lis.Close()
		}
		cmd := exec.Command(bin, "-D", "-e", "-f", s.config, "-p", strconv.Itoa(port))
		cmd.SysProcAttr = procAttr()
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start sshd: %v", err)
		}
		listening := make(chan bool, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			said := false
			for sc.Scan() {
				s.log.Write([]byte(sc.Text() + "\n"))
				if !said && strings.HasPrefix(sc.Text(), "Server listening on 127.0.0.1 port") {
					said = true
					listening <- true
				}
			}
			if !said {
				listening <- false
			}
		}()
		if <-listening {
			s.mu.Lock()
			s.cmd, s.Port = cmd, port
			s.mu.Unlock()
			return
		}
		cmd.Wait()
		if fixed || attempt == 3 || !strings.Contains(s.log.String(), "Address already in use") {
			t.Fatalf("sshd did not start:\n%s", s.log.String())
		}
	}
}

// Authorize lets key log in.
func (s *Server) Authorize(key ssh.PublicKey) {
	f, err := os.OpenFile(filepath.Join(s.dir, "authorized_keys"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	f.Write(ssh.MarshalAuthorizedKey(key))
}

// WriteKnownHosts writes a known_hosts file trusting the server's key.
func (s *Server) WriteKnownHosts(path string) {
	line := fmt.Sprintf("[%s]:%d %s", s.Host, s.Port, ssh.MarshalAuthorizedKey(s.HostKey))
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		s.t.Fatal(err)
	}
}

// ChangeHostKey restarts the server on its port with a new host key.
func (s *Server) ChangeHostKey() {
	s.t.Helper()
	os.Remove(filepath.Join(s.dir, "host_key"))
	os.Remove(filepath.Join(s.dir, "host_key.pub"))
	s.HostKey = Keygen(s.t, filepath.Join(s.dir, "host_key"), "")
	s.Stop()
	s.start(sshd(s.t), s.Port)
}

// KillSessions kills sshd's per-connection processes: every client's
// connection drops, and sshd goes on listening.
func (s *Server) KillSessions() {
	s.mu.Lock()
	pid := s.cmd.Process.Pid
	s.mu.Unlock()
	for _, child := range children(pid) {
		syscall.Kill(child, syscall.SIGKILL)
	}
}

// children are the pids whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after
		// its closing parenthesis.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// Stop stops sshd, every session it runs and every process its sessions
// left running, in the background or after a connection dropped.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	for _, c := range children(cmd.Process.Pid) {
		syscall.Kill(c, syscall.SIGKILL)
	}
	cmd.Wait()
	hostproc.KillTagged(s.tag)
}

// Agent is a running ssh-agent.
type Agent struct {
	// Socket is SSH_AUTH_SOCK.
	Socket string
}

// StartAgent starts ssh-agent for the test and adds the private key at
// keyPath, unlocking it with passphrase.
func StartAgent(t testing.TB, keyPath, passphrase string) *Agent {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command("ssh-agent", "-D", "-a", sock)
	cmd.SysProcAttr = procAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start ssh-agent: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// ssh-agent -D prints the environment it sets once it listens.
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, "SSH_AUTH_SOCK") {
		t.Fatalf("ssh-agent said %q: %v", line, err)
	}
	askpass := filepath.Join(t.TempDir(), "askpass")
	if err := os.WriteFile(askpass, []byte("#!/bin/sh\necho "+shexec.Quote(passphrase)+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	add := exec.CommandContext(ctx, "ssh-add", keyPath)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock, "SSH_ASKPASS="+askpass, "SSH_ASKPASS_REQUIRE=force", "DISPLAY=none")
	add.Stdin = nil
	if b, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v\n%s", err, b)
	}
	return &Agent{Socket: sock}
}

// ContainerImage is the image of a remote machine in a container, made by
// image/bootstrap-base.sh sshd: Debian with OpenSSH's server, iptables and
// sudo.
const ContainerImage = "amelia-sshd:bookworm"

// Remote is sshd in a Docker container on its own network: another
// machine, with its own address, where the login user "amelia" is not root
// and may run iptables through sudo without a password.
type Remote struct {
	Host       string // the container's address
	Gateway    string // the host's address on the container's network
	Port       int
	User       string
	ClientKey  string
	KnownHosts string
	Container  string // its id
}

// remoteScript sets the container up as a machine to log in to, prints its
// host key, and runs sshd.
const remoteScript = `set -e
ssh-keygen -q -A
mkdir -p /run/sshd
useradd -m -s /bin/bash -p '*' amelia
mkdir -p /home/amelia/.ssh
printf '%s\n' "$CLIENT_KEY" > /home/amelia/.ssh/authorized_keys
chown -R amelia: /home/amelia/.ssh
echo 'amelia ALL=(root) NOPASSWD: /usr/sbin/iptables, /usr/sbin/ip6tables' > /etc/sudoers.d/amelia
echo "hostkey: $(cat /etc/ssh/ssh_host_ed25519_key.pub)"
exec /usr/sbin/sshd -D -e`

// StartContainer starts a Remote on a fresh network; the container and the
// network are removed when the test ends. The test fails when the engine
// lacks ContainerImage.
func StartContainer(t testing.TB, cli *client.Client) *Remote {
	t.Helper()
	ctx := t.Context()
	if _, err := cli.ImageInspect(ctx, ContainerImage); err != nil {
		t.Fatalf("the engine has no %s, the SSH tests' remote machine: run image/bootstrap-base.sh sshd (make base-image): %v", ContainerImage, err)
	}
	dir := t.TempDir()
	r := &Remote{Port: 22, User: "amelia", ClientKey: filepath.Join(dir, "client_key"), KnownHosts: filepath.Join(dir, "known_hosts")}
	pub := Keygen(t, r.ClientKey, "")
	name := fmt.Sprintf("amelia-sshtest-%d", time.Now().UnixNano())
	netRes, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Labels: map[string]string{"amelia.sshtest": "true"}})
	if err != nil {
		t.Fatalf("create network: %v", err)
	}
	t.Cleanup(func() { cli.NetworkRemove(context.Background(), netRes.ID, client.NetworkRemoveOptions{}) })
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:  ContainerImage,
			Cmd:    []string{"sh", "-c", remoteScript},
			Env:    []string{"CLIENT_KEY=" + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))},
			Labels: map[string]string{"amelia.sshtest": "true"},
		},
		HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(name), CapAdd: []string{"NET_ADMIN"}},
	})
	if err != nil {
		t.Fatalf("create the sshd container: %v", err)
	}
	r.Container = res.ID
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), res.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	})
	if _, err := cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatalf("start the sshd container: %v", err)
	}
	logs, err := cli.ContainerLogs(ctx, res.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	pr, pw := io.Pipe()
	go func() { _, err := stdcopy.StdCopy(pw, pw, logs); pw.CloseWithError(err) }()
	var hostKey, seen string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		seen += sc.Text() + "\n"
		if k, ok := strings.CutPrefix(sc.Text(), "hostkey: "); ok {
			hostKey = k
		}
		if strings.HasPrefix(sc.Text(), "Server listening on 0.0.0.0 port 22") {
			break
		}
	}
	if hostKey == "" {
		t.Fatalf("the sshd container did not start:\n%s", seen)
	}
	c, err := cli.ContainerInspect(ctx, res.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Container.NetworkSettings.Networks[name]; n != nil {
		r.Host, r.Gateway = n.IPAddress.String(), n.Gateway.String()
	}
	if r.Host == "" {
		t.Fatalf("the sshd container has no address on %s", name)
	}
	if err := os.WriteFile(r.KnownHosts, []byte(r.Host+" "+hostKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}
