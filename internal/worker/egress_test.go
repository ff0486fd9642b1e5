package worker_test

import (
	"net"
	"strings"
	"testing"
)

// egress-check tells a listening address from one nothing answers, and
// says so in its exit code.
func TestEgressCheck(t *testing.T) {
	open, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open.Close() })
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	r := runWorker(t, nil, nil, "egress-check", open.Addr().String(), closedAddr)
	if r.code != 3 || !strings.Contains(string(r.stdout), "reachable "+open.Addr().String()+"\n") || !strings.Contains(string(r.stdout), "unreachable "+closedAddr+": ") {
		t.Errorf("with one address listening: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runWorker(t, nil, nil, "egress-check", closedAddr)
	if r.code != 0 || !strings.HasPrefix(string(r.stdout), "unreachable "+closedAddr+": ") {
		t.Errorf("with nothing listening: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runWorker(t, nil, nil, "egress-check", "no-port"); r.code != 2 || !strings.Contains(string(r.stderr), `"no-port" is not HOST:PORT`) {
		t.Errorf("a bad address: exit %d, stderr %s", r.code, r.stderr)
	}
}
