package worker_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/tunnel/sandboxend"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/netpipe"
)

// attachCarrier is a host end of a detached run's tunnel: `amelia-worker
// tunnel --run DIR`, its yamux peer piping every stream to target, as the
// host's tunnel pipes them to the proxy.
func attachCarrier(t *testing.T, dir, target string) *tunnelPeer {
	t.Helper()
	p := startTunnelPeer(t, "tunnel", "--run", dir)
	go func() {
		for {
			s, err := p.session.AcceptStream()
			if err != nil {
				return
			}
			go netpipe.Forward(context.Background(), s, target)
		}
	}()
	return p
}

// The sandbox end of a detached run's tunnel is its supervisor's: when
// the carrier dies (its host died, its connection dropped), the address
// the agent was given stays taken — no other process can listen there
// and receive the agent's token — and the next carrier carries the
// agent's calls on from the same address. Once the run has ended, the
// address is free and tunnel --run says the run has ended.
func TestRunTunnelOutlivesItsCarrier(t *testing.T) {
	cwd := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(cwd, "go-on"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("execute", `{"command": "cat go-on"}`)}},
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("write_file", `{"file_path": "after.txt", "content": "carried on\n"}`)}},
		llmtest.Turn{Text: "done"},
	)
	target := strings.TrimPrefix(srv.URL(), "http://")
	dir := filepath.Join(t.TempDir(), "run")
	prompt := writeFile(t, t.TempDir(), "p.txt", "work")
	lock := filepath.Join(t.TempDir(), "lock")
	d := runWorker(t, []string{"AMELIA_PROXY_TOKEN=" + runToken}, nil,
		"detach", "--dir", dir, "--grace", "2s", "--tunnel", "--lock", lock, "--",
		workerBin, "agentic", "--prompt-file", prompt, "--cwd", cwd, "--model", "m")
	if d.code != 0 {
		t.Fatalf("detach --tunnel: exit %d: %s", d.code, d.stderr)
	}
	t.Cleanup(func() { exec.Command(workerBin, "stop", "--dir", dir).Run() })

	first := attachCarrier(t, dir, target)
	addr := first.hello.Listen
	// The agent's first call went through the first carrier, answered:
	// it runs its tool, which waits at the FIFO, its next call to come.
	waitFor(t, "the agent's tool call", func() bool {
		lines, _ := follow(t, dir, "--no-wait")
		return len(lines) > 0 && strings.Contains(lines[0], `"type":"tool_call"`)
	})
	if got := srv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+runToken {
		t.Errorf("the model got Authorization %q, want the run's token", got)
	}

	// The carrier dies as it would with its host: kill -9.
	first.cmd.Process.Kill()
	first.cmd.Wait()
	<-first.session.CloseChan()
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("another process could listen at %s, the agent's tunnel, once its carrier died", addr)
	} else if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("listen at the agent's address: %v, want EADDRINUSE", err)
	}

	second := attachCarrier(t, dir, target)
	if second.hello.Listen != addr {
		t.Errorf("the second carrier carries %s, want the agent's %s", second.hello.Listen, addr)
	}
	if err := os.WriteFile(filepath.Join(cwd, "go-on"), []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	lines, r := follow(t, dir)
	if r.code != 0 {
		t.Fatalf("follow: exit %d: %s\n%s", r.code, r.stderr, strings.Join(lines, ""))
	}
	// Once its end is on record, the run holds the sandbox no more: the
	// next run's host, which saw that end, finds the lock free.
	if f, err := os.OpenFile(lock, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Errorf("the run's lock once its end is on record: %v, want it free", err)
		}
		f.Close()
	}
	if got := readFile(t, filepath.Join(cwd, "after.txt")); got != "carried on\n" {
		t.Errorf("after.txt = %q: the agent's calls did not go on through the second carrier", got)
	}
	if n := len(srv.Requests()); n != 3 {
		t.Errorf("the model got %d calls, want 3", n)
	}

	// The run is over: its carrier says so, its address is free, and its
	// tunnel is gone.
	<-second.session.CloseChan()
	if err := second.cmd.Wait(); second.cmd.ProcessState.ExitCode() != sandboxend.ExitRunEnded {
		t.Errorf("the carrier of a run that ended: %v, stderr %q; want exit %d, the run ended", err, second.stderr, sandboxend.ExitRunEnded)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("something still listens at %s after the run ended", addr)
	}
	again := runWorker(t, nil, nil, "tunnel", "--run", dir)
	if again.code != sandboxend.ExitRunEnded || !strings.Contains(string(again.stderr), "has ended") {
		t.Errorf("tunnel --run after the run ended: exit %d, stderr %q; want %d, saying it ended", again.code, again.stderr, sandboxend.ExitRunEnded)
	}
}

// An agent's connection made while no carrier is attached waits for one,
// and goes through it once it comes; the agent's URL names the address
// the supervisor holds.
func TestRunTunnelWaitsForItsCarrier(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Text: "done"})
	target := strings.TrimPrefix(srv.URL(), "http://")
	dir := filepath.Join(t.TempDir(), "run")
	prompt := writeFile(t, t.TempDir(), "p.txt", "work")
	d := runWorker(t, []string{"AMELIA_PROXY_TOKEN=" + runToken}, nil,
		"detach", "--dir", dir, "--grace", "2s", "--tunnel", "--egress-proxy", "--",
		"sh", "-c", `printf '%s\n%s\n' "$AMELIA_PROXY_URL" "$HTTPS_PROXY" >env.txt; exec "$0" "$@"`,
		workerBin, "agentic", "--prompt-file", prompt, "--cwd", t.TempDir(), "--model", "m")
	if d.code != 0 {
		t.Fatalf("detach --tunnel: exit %d: %s", d.code, d.stderr)
	}
	t.Cleanup(func() { exec.Command(workerBin, "stop", "--dir", dir).Run() })
	c := attachCarrier(t, dir, target)
	lines, r := follow(t, dir)
	if r.code != 0 {
		t.Fatalf("follow: exit %d: %s\n%s", r.code, r.stderr, strings.Join(lines, ""))
	}
	env := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "env.txt"))), "\n")
	if len(env) != 2 || env[0] != "http://"+c.hello.Listen {
		t.Fatalf("the agent's AMELIA_PROXY_URL and HTTPS_PROXY: %q; want the tunnel at %s first", env, c.hello.Listen)
	}
	if u, err := url.Parse(env[1]); err != nil || u.Host != c.hello.Listen || u.User.String() != "amelia:"+runToken {
		t.Errorf("HTTPS_PROXY %q: want the tunnel, with the run token as the password", env[1])
	}
}

// waitFor polls cond until it holds; the test's deadline bounds it.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-t.Context().Done():
			t.Fatalf("gave up waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
