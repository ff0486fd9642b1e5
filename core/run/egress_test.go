package run

import (
	"net"
	"os"
	"slices"
	"testing"
	"time"

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

// With a settle time, the canary is repeated while the sandbox still
// reaches out: a target that stops answering after the first check (as a
// policy takes effect) ends it with nothing reached; one that keeps
// answering is reported once the settle time has passed; without one, a
// single check decides.
func TestReachedAfterSettling(t *testing.T) {
	sb := sandboxtest.New(t, "settle")
	listen := func() (net.Listener, <-chan struct{}) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
		first := make(chan struct{})
		go func() {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
			close(first)
		}()
		return lis, first
	}

	fencing, first := listen()
	go func() {
		<-first
		fencing.Close() // the policy takes effect
	}()
	reached, err := reachedAfterSettling(t.Context(), sb, workerBin, time.Hour, fencing.Addr().String())
	if err != nil || len(reached) != 0 {
		t.Errorf("a target that stops answering: reached %v, %v; want nothing", reached, err)
	}
	select {
	case <-first:
	default:
		t.Error("the first check did not reach the target, so nothing was settled")
	}

	open, _ := listen()
	reached, err = reachedAfterSettling(t.Context(), sb, workerBin, 300*time.Millisecond, open.Addr().String())
	if err != nil || !slices.Equal(reached, []string{open.Addr().String()}) {
		t.Errorf("a target that keeps answering: reached %v, %v; want %s", reached, err, open.Addr())
	}
	reached, err = reachedAfterSettling(t.Context(), sb, workerBin, 0, open.Addr().String())
	if err != nil || !slices.Equal(reached, []string{open.Addr().String()}) {
		t.Errorf("without a settle time: reached %v, %v; want %s", reached, err, open.Addr())
	}
}

func TestEgressPolicyOf(t *testing.T) {
	for _, tc := range []struct {
		details map[string]string
		want    egressPolicy
	}{
		{nil, egressPolicy{}},
		{map[string]string{"egress": "a plugin", "egress-settle": "30s"}, egressPolicy{needs: "a plugin", settle: 30 * time.Second}},
		{map[string]string{"egress-settle": "soon"}, egressPolicy{}},
		{map[string]string{"egress-settle": "-1s"}, egressPolicy{}},
	} {
		if got := egressPolicyOf(tc.details); got != tc.want {
			t.Errorf("egressPolicyOf(%v) = %+v, want %+v", tc.details, got, tc.want)
		}
	}
}
