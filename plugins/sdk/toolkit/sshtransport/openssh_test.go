package sshtransport_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skeema/knownhosts"

	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/sdktest"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/shexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

// bulkConn is a Conn to srv (dialled at addr, srv's when "") whose bulk
// execs use OpenSSH's ssh, and its log.
func bulkConn(t *testing.T, srv *sshtest.Server, addr string) (*sshtransport.Conn, *sdktest.Buffer) {
	t.Helper()
	bin, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatalf("OpenSSH's ssh client: %v (apt install openssh-client)", err)
	}
	known := srv.KnownHosts
	if addr == "" {
		addr = srv.Addr()
	} else {
		// srv's key, for the address it is reached at.
		known = filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(known, []byte(knownhosts.Line([]string{addr}, srv.HostKey)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hk, err := sshtransport.KnownHosts(known, sshtransport.Strict)
	if err != nil {
		t.Fatal(err)
	}
	var log sdktest.Buffer
	c := sshtransport.New(sshtransport.Target{Addr: addr, User: srv.User, Auth: keyAuth(srv), HostKeys: hk},
		sshtransport.Options{OpenSSH: bin, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	t.Cleanup(func() { c.Close() })
	return c, &log
}

// clientPort is the port the server saw a command's connection come
// from, in its SSH_CLIENT ("addr port serverport").
func clientPort(t *testing.T, sshClient string) string {
	t.Helper()
	f := strings.Fields(sshClient)
	if len(f) != 3 {
		t.Fatalf("SSH_CLIENT %q", sshClient)
	}
	return f[1]
}

// bulk runs argv as a bulk exec with stdin, its output into a file;
// it returns the output, stderr and the status.
func bulk(ctx context.Context, t *testing.T, c *sshtransport.Conn, cmd shexec.Command, stdin io.Reader) (string, string, sdk.ExitStatus, error) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if cmd.Tag == "" {
		cmd.Tag = shexec.NewTag()
	}
	var errb bytes.Buffer
	st, err := c.ExecBulk(ctx, cmd, sdk.ExecIO{Stdin: stdin, Stdout: sdk.OutputFile{File: out}, Stderr: &errb}, time.Second)
	b, rerr := os.ReadFile(out.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	return string(b), errb.String(), st, err
}

// A bulk exec goes through a connection of OpenSSH's own, one master's
// for every bulk exec, and gives the same account as Exec: output,
// stdin, stderr, exit codes, a missing command, directory or sandbox.
func TestExecBulk(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c, _ := bulkConn(t, srv, "")
	own, err := c.Output(t.Context(), `printf %s "$SSH_CLIENT"`, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	report := `printf '%s' "$SSH_CLIENT" >&2`
	var ports []string
	for _, tc := range []struct {
		name  string
		cmd   shexec.Command
		stdin string
		out   string
		code  int
	}{
		{"stdin to stdout", shexec.Command{Argv: []string{"sh", "-c", "cat; " + report}}, "some bytes\x00\xff", "some bytes\x00\xff", 0},
		{"an exit code", shexec.Command{Dir: dir, Argv: []string{"sh", "-c", "pwd; " + report + "; exit 3"}}, "", dir + "\n", 3},
		{"exit 255 is the command's", shexec.Command{Argv: []string{"sh", "-c", report + "; exit 255"}}, "", "", 255},
	} {
		var in io.Reader
		if tc.stdin != "" {
			in = strings.NewReader(tc.stdin)
		}
		out, errs, st, err := bulk(t.Context(), t, c, tc.cmd, in)
		if err != nil || out != tc.out || st.Code != tc.code || st.Signal != "" || st.Canceled {
			t.Errorf("%s: output %q, status %+v, %v; want %q, exit %d", tc.name, out, st, err, tc.out, tc.code)
			continue
		}
		ports = append(ports, clientPort(t, errs))
	}
	if len(ports) == 3 && (ports[0] == clientPort(t, own) || ports[1] != ports[0] || ports[2] != ports[0]) {
		t.Errorf("bulk execs came from ports %v, the Conn's own from %s: want one other connection (the master's) for all", ports, clientPort(t, own))
	}

	out, errs, st, err := bulk(t.Context(), t, c, shexec.Command{Argv: []string{"no-such-command-here"}}, nil)
	if err != nil || st.Code != 127 || out != "" || !strings.Contains(errs, "no-such-command-here: command not found") {
		t.Errorf("a missing command: %q %q %+v %v", out, errs, st, err)
	}
	if _, _, _, err := bulk(t.Context(), t, c, shexec.Command{Dir: filepath.Join(dir, "none"), Argv: []string{"true"}}, nil); !errors.Is(err, sshtransport.ErrNoDir) {
		t.Errorf("a missing directory: %v, want ErrNoDir", err)
	}
	marker := filepath.Join(dir, "gone")
	if _, _, _, err := bulk(t.Context(), t, c, shexec.Command{Require: marker, Argv: []string{"touch", marker}}, nil); !errors.Is(err, sshtransport.ErrNoSandbox) {
		t.Errorf("a missing required file: %v, want ErrNoSandbox", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran without its required file")
	}

	// Output that is not a file of the caller's goes through x/crypto/ssh.
	var w bytes.Buffer
	st, err = c.ExecBulk(t.Context(), shexec.Command{Tag: shexec.NewTag(), Argv: []string{"sh", "-c", `printf %s "$SSH_CLIENT"`}}, sdk.ExecIO{Stdout: &w}, time.Second)
	if err != nil || st.Code != 0 || clientPort(t, w.String()) != clientPort(t, own) {
		t.Errorf("a bulk exec into a writer: %q %+v %v; want it on the Conn's own connection (%s)", w.String(), st, err, own)
	}
}

// Cancelling a bulk exec stops the command as Exec does: TERM, then KILL
// after the grace period, each reported as the signal that ended it. A
// line of stderr reaches the caller while the command runs.
func TestExecBulkCancel(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c, _ := bulkConn(t, srv, "")
	sleep := "sleep 614." + strconv.Itoa(os.Getpid()) // this test's own
	for _, tc := range []struct {
		name, script, signal string
		code                 int
	}{
		{"TERM", "exec " + sleep, "TERM", 143},
		{"KILL once TERM is ignored", "trap '' TERM; while :; do " + sleep + "; done", "KILL", 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			type result struct {
				st  sdk.ExitStatus
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := os.CreateTemp(t.TempDir(), "out")
				if err != nil {
					done <- result{err: err}
					w.Close()
					return
				}
				defer out.Close()
				st, err := c.ExecBulk(ctx, shexec.Command{Tag: shexec.NewTag(), Argv: []string{"sh", "-c", "echo ready >&2; " + tc.script}},
					sdk.ExecIO{Stdout: sdk.OutputFile{File: out}, Stderr: w}, 300*time.Millisecond)
				w.Close()
				done <- result{st, err}
			}()
			if _, err := io.ReadFull(r, make([]byte, 6)); err != nil {
				t.Fatalf("the command did not start: %v (%v)", err, <-done)
			}
			cancel()
			res := <-done
			if res.err != nil || !res.st.Canceled || res.st.Code != tc.code || res.st.Signal != tc.signal {
				t.Errorf("cancelled: %+v %v; want code %d, signal %s", res.st, res.err, tc.code, tc.signal)
			}
		})
	}
	if out, _ := exec.Command("pgrep", "-f", sleep).Output(); len(out) > 0 {
		t.Errorf("the cancelled command still runs: %s", out)
	}
}

// OpenSSH trusts only the host key the Conn's own login verified: a
// server that answers OpenSSH's login with another key is refused, and
// bulk execs go on through x/crypto/ssh. Close ends the master.
func TestExecBulkTrustsTheVerifiedKeyOnly(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	other := sshtest.Start(t, sshtest.Options{})
	// The first connection reaches srv, the rest other.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { lis.Close() })
	wg.Go(func() {
		for n := 0; ; n++ {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			to := other.Addr()
			if n == 0 {
				to = srv.Addr()
			}
			wg.Go(func() { relay(conn, to) })
		}
	})
	c, log := bulkConn(t, srv, lis.Addr().String())
	own, err := c.Output(t.Context(), `printf %s "$SSH_CLIENT"`, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _, st, err := bulk(t.Context(), t, c, shexec.Command{Argv: []string{"sh", "-c", `printf %s "$SSH_CLIENT"`}}, nil)
	if err != nil || st.Code != 0 || clientPort(t, out) != clientPort(t, own) {
		t.Errorf("a bulk exec when OpenSSH meets another host key: %q %+v %v; want it through the Conn's own connection (%s)", out, st, err, own)
	}
	if !strings.Contains(log.String(), "Host key verification failed") {
		t.Errorf("the log does not say why OpenSSH is not used:\n%s", log)
	}
	c.Close()
	if n := sshChildren(t); n != 0 {
		t.Errorf("%d OpenSSH processes outlive the Conn", n)
	}
}

// The master lives with its Conn: Close ends it.
func TestExecBulkMasterEndsWithConn(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c, _ := bulkConn(t, srv, "")
	if _, _, st, err := bulk(t.Context(), t, c, shexec.Command{Argv: []string{"true"}}, nil); err != nil || st.Code != 0 {
		t.Fatalf("bulk exec: %+v %v", st, err)
	}
	if n := sshChildren(t); n != 1 {
		t.Errorf("%d OpenSSH processes of this test's, want the master", n)
	}
	c.Close()
	if n := sshChildren(t); n != 0 {
		t.Errorf("%d OpenSSH processes outlive the Conn", n)
	}
}

// sshChildren counts this process's children that are OpenSSH clients.
func sshChildren(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	me, n := strconv.Itoa(os.Getpid()), 0
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if strings.Contains(s, "(ssh)") && len(f) > 1 && f[1] == me && f[0] != "Z" {
			n++
		}
	}
	return n
}

// relay joins conn to a new connection to addr.
func relay(conn net.Conn, addr string) {
	defer conn.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { io.Copy(up, conn); up.(*net.TCPConn).CloseWrite() }()
	io.Copy(conn, up)
}

// Beyond the server's MaxSessions on the master's connection, OpenSSH
// connects anew: all run.
func TestExecBulkMaxSessions(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{MaxSessions: 2})
	c, _ := bulkConn(t, srv, "")
	// Each waits until all have started: six sessions at once.
	started := t.TempDir()
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			script := fmt.Sprintf(`touch %s/%d; until [ "$(ls %[1]s | wc -l)" -eq 6 ]; do sleep 0.05; done; echo %[2]d`, started, i)
			out, errs2, st, err := bulk(t.Context(), t, c, shexec.Command{Argv: []string{"sh", "-c", script}}, nil)
			if err == nil && (st.Code != 0 || out != strconv.Itoa(i)+"\n") {
				err = fmt.Errorf("exit %+v, output %q, stderr %q", st, out, errs2)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("bulk exec %d: %v", i, err)
		}
	}
}
