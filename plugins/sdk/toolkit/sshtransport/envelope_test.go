package sshtransport_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/internal/testbin"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/envelope"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/sshtransport"
)

var workerBin string

func TestMain(m *testing.M) {
	os.Exit(testbin.Main(m, func(dir string) (err error) {
		workerBin, err = testbin.BuildWorker(dir)
		return err
	}))
}

// A bootstrap script's output (stderr in it), exit code and input come
// through a real sshd without its exit status.
func TestBootstrap(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c := conn(t, srv, keyAuth(srv), srv.KnownHosts, sshtransport.Strict)
	out, code, err := c.Bootstrap(t.Context(), `echo "out $1"; echo "err $2" >&2; exit 4`, nil, "a b", "c'd")
	if err != nil || code != 4 || string(out) != "out a b\nerr c'd\n" {
		t.Errorf("Bootstrap: %q %d %v", out, code, err)
	}
	out, code, err = c.Bootstrap(t.Context(), `head -c 3`, strings.NewReader("abcdef"))
	if err != nil || code != 0 || string(out) != "abc" {
		t.Errorf("Bootstrap with input: %q %d %v", out, code, err)
	}
}

// Commands run on the worker's mux in one session of a real sshd: several
// at once, each with its own streams and exit; closing the mux ends the
// session. A missing worker is ErrNoWorker, saying what the shell said.
func TestMux(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	c := conn(t, srv, keyAuth(srv), srv.KnownHosts, sshtransport.Strict)
	m, err := c.Mux(t.Context(), workerBin)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 3)
	for i := range 3 {
		go func() {
			var out, errb bytes.Buffer
			res, err := m.Run(t.Context(), envelope.Command{Argv: []string{"sh", "-c", `echo "out $1"; echo "err $1" >&2; exit "$1"`, "sh", string(rune('1' + i))}},
				envelope.IO{Stdout: &out, Stderr: &errb}, time.Second)
			n := string(rune('1' + i))
			if err == nil && (res.Code != i+1 || out.String() != "out "+n+"\n" || errb.String() != "err "+n+"\n") {
				err = errors.New("got " + out.String() + errb.String())
			}
			done <- err
		}()
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("a command on the mux: %v", err)
		}
	}
	m.Close()
	<-m.Done()
	if _, err := m.Run(t.Context(), envelope.Command{Argv: []string{"true"}}, envelope.IO{}, time.Second); !errors.Is(err, envelope.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}

	if _, err := c.Mux(t.Context(), "/no/such/amelia-worker"); !errors.Is(err, envelope.ErrNoWorker) || !strings.Contains(err.Error(), "/no/such/amelia-worker") {
		t.Errorf("a mux without its worker: %v, want ErrNoWorker quoting the shell", err)
	}
}
