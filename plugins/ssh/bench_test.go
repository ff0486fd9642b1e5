package ssh_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/pluginclient"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Side-by-side harnesses against a real sshd on loopback: our figure
// through the full plugin path (host → gRPC → the SSH provider in its own
// process → x/crypto/ssh → sshd), OpenSSH's ssh client's for the same
// work, and the ratio, in one line.
//
//	go test -run='^$' -bench=. -benchtime=50x ./plugins/ssh/

// sshCLI runs OpenSSH's client against srv with args.
func sshCLI(b *testing.B, srv *sshtest.Server, extra ...string) *exec.Cmd {
	b.Helper()
	args := append([]string{
		"-i", srv.ClientKey, "-p", strconv.Itoa(srv.Port),
		"-o", "UserKnownHostsFile=" + srv.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
	}, extra...)
	return exec.Command("ssh", args...)
}

func benchSandbox(b *testing.B, srv *sshtest.Server) (*pluginclient.Plugin, sdk.Sandbox) {
	b.Helper()
	p, err := pluginclient.Launch(pluginCommand(), pluginclient.LaunchOptions{Name: "ssh"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	cfg := settingsFor(srv, b.TempDir(), filepath.Join(b.TempDir(), "no-config"), nil)
	sb, err := p.EnsureRunning(b.Context(), sdk.Spec{SandboxRef: sdk.SandboxRef{Name: "bench", Config: cfg}, Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Teardown(context.Background(), sb.Ref) })
	return p, sb
}

// BenchmarkWarmExecTrue: `true` on a warm connection through the plugin
// beside `ssh ... true` through a warm ControlMaster (target ratio ≤ 1.0).
func BenchmarkWarmExecTrue(b *testing.B) {
	srv := sshtest.Start(b, sshtest.Options{})
	p, sb := benchSandbox(b, srv)
	control := filepath.Join(b.TempDir(), "cm")
	master := []string{"-o", "ControlMaster=auto", "-o", "ControlPath=" + control, "-o", "ControlPersist=60", srv.User + "@" + srv.Host}
	if out, err := sshCLI(b, srv, append(master, "true")...).CombinedOutput(); err != nil {
		b.Fatalf("ssh: %v\n%s", err, out)
	}
	b.Cleanup(func() { sshCLI(b, srv, "-O", "exit", "-o", "ControlPath="+control, srv.User+"@"+srv.Host).Run() })
	benchtest.Compare(b, "plugin", "ssh-mux", func() {
		st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"true"}}, sdk.ExecIO{})
		if err != nil || st.Code != 0 {
			b.Fatalf("exec true: %+v %v", st, err)
		}
	}, func() {
		if out, err := sshCLI(b, srv, append(master, "true")...).CombinedOutput(); err != nil {
			b.Fatalf("ssh true: %v\n%s", err, out)
		}
	})
}

const streamBytes = 1 << 30

// BenchmarkStream: 1 GiB through the plugin beside the same through
// OpenSSH's ssh client with the cipher x/crypto/ssh chooses (aes128-gcm),
// in MB/s, and the CPU time this process, the plugin and ssh took per GiB
// (sshd's is in neither). stdout: `cat /dev/zero | head -c 1G` read by the
// host (target: the plugin at least 0.9× ssh); stdin: zeros written by the
// host to `cat` (target: at least 0.8×). extra-cpu-s/GiB is what the
// plugin path costs beyond ssh.
func BenchmarkStream(b *testing.B) {
	srv := sshtest.Start(b, sshtest.Options{})
	p, sb := benchSandbox(b, srv)
	for _, dir := range []struct {
		name, script string
		run          func(*testing.B, string) (sdk.ExitStatus, error)
		base         func(*testing.B, *exec.Cmd)
	}{
		{"stdout", "cat /dev/zero | head -c 1073741824", func(b *testing.B, script string) (sdk.ExitStatus, error) {
			var out benchtest.Counter
			st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", script}}, sdk.ExecIO{Stdout: &out})
			if err == nil && out.N != streamBytes {
				b.Fatalf("exec: %d bytes, want %d", out.N, streamBytes)
			}
			return st, err
		}, func(b *testing.B, cmd *exec.Cmd) { benchtest.Drain(b, cmd, streamBytes) }},
		{"stdin", "cat >/dev/null", func(b *testing.B, script string) (sdk.ExitStatus, error) {
			in := benchtest.Zeros{N: streamBytes}
			st, err := p.Exec(b.Context(), sdk.ExecRequest{Sandbox: sb.Ref, Argv: []string{"sh", "-c", script}}, sdk.ExecIO{Stdin: &in})
			if err == nil && in.N != 0 {
				b.Fatalf("exec: %d bytes of stdin not read", in.N)
			}
			return st, err
		}, func(b *testing.B, cmd *exec.Cmd) { benchtest.Feed(b, cmd, streamBytes) }},
	} {
		b.Run(dir.name, func(b *testing.B) {
			t := benchtest.Transfer{N: streamBytes, Meter: benchtest.NewCPUMeter(p.Pid())}
			for b.Loop() {
				t.Ours(b, func() {
					if st, err := dir.run(b, dir.script); err != nil || st.Code != 0 {
						b.Fatalf("exec: %+v %v", st, err)
					}
				})
				t.Base(b, func() {
					dir.base(b, sshCLI(b, srv, "-c", "aes128-gcm@openssh.com", srv.User+"@"+srv.Host, dir.script))
				})
			}
			t.Report(b, "plugin", "ssh")
		})
	}
}

// BenchmarkConnect: the first EnsureRunning of a plugin, whose connection
// is fresh (dial, key exchange, login, the sandbox's directories), beside
// `ssh host true` without a master.
func BenchmarkConnect(b *testing.B) {
	srv := sshtest.Start(b, sshtest.Options{})
	cfg := settingsFor(srv, b.TempDir(), filepath.Join(b.TempDir(), "no-config"), nil)
	var ours, cli []time.Duration
	for b.Loop() {
		p, err := pluginclient.Launch(pluginCommand(), pluginclient.LaunchOptions{Name: "ssh"})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		sb, err := p.EnsureRunning(b.Context(), sdk.Spec{SandboxRef: sdk.SandboxRef{Name: "bench-connect", Config: cfg}, Network: sdk.NetworkPolicy{Mode: sdk.NetworkOpen}})
		if err != nil {
			b.Fatal(err)
		}
		ours = append(ours, time.Since(start))
		p.Teardown(b.Context(), sb.Ref)
		p.Close()
		start = time.Now()
		if out, err := sshCLI(b, srv, srv.User+"@"+srv.Host, "true").CombinedOutput(); err != nil {
			b.Fatalf("ssh: %v\n%s", err, out)
		}
		cli = append(cli, time.Since(start))
	}
	benchtest.Latencies(b, ours, cli, "first-ensure", "ssh-true")
}
