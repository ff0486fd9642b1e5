package run

import (
	"net"
	"os"
	"slices"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
)

var workerBin string

func TestMain(m *testing.M) {
	if sandboxtest.ServePlugin() {
		return
	}
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerBin, err = testbin.BuildWorker(dir)
		return err
	}))
}

// The canary reports what answered from inside the sandbox, and nothing
// when nothing does. (A local sandbox shares the host's network, so a
// listener on loopback stands for a sandbox that can reach the world.)
func TestReachedDirectly(t *testing.T) {
	sb := sandboxtest.New(t, "egress")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := gone.Addr().String()
	gone.Close()

	reached, err := reachedDirectly(t.Context(), sb, workerBin, lis.Addr().String(), closed)
	if err != nil || !slices.Equal(reached, []string{lis.Addr().String()}) {
		t.Errorf("with a listener: reached %v, %v; want only %s", reached, err, lis.Addr())
	}
	if reached, err := reachedDirectly(t.Context(), sb, workerBin, closed); err != nil || len(reached) != 0 {
		t.Errorf("with nothing listening: reached %v, %v; want nothing", reached, err)
	}
	if _, err := reachedDirectly(t.Context(), sb, workerBin, "not-an-address"); err == nil {
		t.Error("a failing check gave no error")
	}
}
