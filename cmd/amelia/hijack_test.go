package main_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
)

// loopbackListeners lists the ports listening on the sandbox's 127.0.0.1,
// as every uid there can read them in /proc/net/tcp.
func loopbackListeners(t *testing.T, h *host) []int {
	t.Helper()
	r := h.amelia(t, "sandbox", "exec", "--", "cat", "/proc/net/tcp")
	if r.code != 0 {
		t.Fatalf("read /proc/net/tcp in the sandbox: exit %d: %s", r.code, r.stderr)
	}
	var ports []int
	for line := range strings.Lines(r.stdout) {
		f := strings.Fields(line)
		// sl local_address rem_address st ...: 0100007F is 127.0.0.1,
		// state 0A is LISTEN.
		if len(f) < 4 || f[3] != "0A" {
			continue
		}
		ip, port, ok := strings.Cut(f[1], ":")
		if !ok || ip != "0100007F" {
			continue
		}
		if n, err := strconv.ParseUint(port, 16, 16); err == nil {
			ports = append(ports, int(n))
		}
	}
	return ports
}

// The attack of issue 25 on a run's tunnel: the host of run "victim"
// dies (kill -9) while its agent waits at the gate. An attacker — a
// process of another run's uid, with no capability — noted every port
// listening on the container's loopback while the victim ran (any uid
// may read /proc/net/tcp), waits until nothing of the dead host is left
// in the sandbox (its tunnel exec has ended), then tries to listen on
// each, to receive the victim agent's token and answer its calls with
// tool calls of its own. Every port is still taken — the victim's
// supervisor holds the one its agent was given — and attach then takes
// the run over and delivers the victim's own work, nothing else.
func TestDockerTunnelCannotBeHijacked(t *testing.T) {
	cli := dockertest.Engine(t)
	g := newGate(t)
	h := newDockerHost(t, cli, dockerSandbox("open"), gatedTurns(g)...)
	r := h.startUntil(t, g.path, "run", "--json", "--workflow", "victim", "outlive the host")
	ports := loopbackListeners(t, h)
	if len(ports) == 0 {
		t.Fatal("nothing listens on the sandbox's loopback while the victim runs: where does its agent reach the proxy?")
	}

	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	r.cmd.Wait()
	tunnels := `for p in /proc/[0-9]*; do tr '\0' ' ' <$p/cmdline 2>/dev/null; echo; done | grep -c '[a]melia-worker[^ ]* tunnel '`
	for {
		left := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", tunnels)
		if strings.TrimSpace(left.stdout) == "0" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	const attacker = "64999" // a uid of the runs' range that no run holds
	for _, port := range ports {
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		// The worker's tunnel listens where it is told, then (its stdin
		// empty) ends; only a refused listen says "address already in use".
		try := h.amelia(t, "sandbox", "exec", "-u", attacker, "--", image.WorkerPath, "tunnel", "--listen", addr)
		if !strings.Contains(try.stderr, "bind: address already in use") {
			t.Errorf("uid %s could listen at %s, where the victim's agent reaches the proxy, once the victim's host died (exit %d: %s)", attacker, addr, try.code, try.stderr)
		}
	}
	h.takeOver(t, g, "victim")
}
