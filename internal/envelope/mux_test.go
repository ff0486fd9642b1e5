package envelope_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// startMux starts a worker serving mux and the client end over it.
func startMux(t testing.TB, banner string) (*worker, *envelope.Mux) {
	t.Helper()
	w := startServing(t, banner, "mux")
	m, err := envelope.NewMux(w.in, w.out)
	if err != nil {
		t.Fatalf("NewMux: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return w, m
}

// Many commands, at once, over one session: each gets its own streams and
// exit.
func TestMuxConcurrent(t *testing.T) {
	_, m := startMux(t, "banner of a login shell\n")
	const n = 16
	var wg sync.WaitGroup
	errs := make([]string, n)
	for i := range n {
		wg.Go(func() {
			var out, errb bytes.Buffer
			script := fmt.Sprintf(`i=0; while [ $i -lt 300 ]; do echo "exec-%d line-$i"; i=$((i+1)); done; echo "err-%d" >&2; exit %d`, i, i, i)
			res, err := m.Run(t.Context(), sh(script), envelope.IO{Stdout: &out, Stderr: &errb}, time.Second)
			var want bytes.Buffer
			for j := range 300 {
				fmt.Fprintf(&want, "exec-%d line-%d\n", i, j)
			}
			if err != nil || res.Code != i || out.String() != want.String() || errb.String() != fmt.Sprintf("err-%d\n", i) {
				errs[i] = fmt.Sprintf("exec %d: %+v %v, %d bytes out, stderr %q", i, res, err, out.Len(), errb.String())
			}
		})
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
}

// A cancel on one stream stops that command only; input and its end work
// per stream.
func TestMuxCancelAndStdin(t *testing.T) {
	_, m := startMux(t, "")
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan envelope.Result, 1)
	go func() {
		res, _ := m.Run(ctx, sh(`echo $$; exec sleep 600`), envelope.IO{Stdout: pw}, time.Second)
		pw.Close()
		done <- res
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(line[:len(line)-1])
	pids := watch(t, []int{pid})
	var out bytes.Buffer
	res, err := m.Run(t.Context(), sh("tr a-z A-Z"), envelope.IO{Stdin: bytes.NewReader([]byte("beside a sleeper\n")), Stdout: &out}, time.Second)
	if err != nil || res.Code != 0 || out.String() != "BESIDE A SLEEPER\n" {
		t.Errorf("a command beside a running one: %+v %v %q", res, err, out.String())
	}
	cancel()
	if r := <-done; !r.Canceled || r.Signal != "TERM" || len(pids.alive()) != 0 {
		t.Errorf("after cancel: %+v, alive %v", r, pids.alive())
	}
}

// The session ending kills every command still running, and the worker
// exits once they are gone; the client's commands see a broken stream,
// and new ones ErrClosed.
func TestMuxClientGone(t *testing.T) {
	w, m := startMux(t, "")
	started := make(chan int, 2)
	results := make(chan error, 2)
	for range 2 {
		go func() {
			pr, pw := io.Pipe()
			go func() {
				line, _ := bufio.NewReader(pr).ReadString('\n')
				pid, _ := strconv.Atoi(string(bytes.TrimSpace([]byte(line))))
				started <- pid
				io.Copy(io.Discard, pr)
			}()
			_, err := m.Run(t.Context(), sh(`echo $$; exec sleep 600`), envelope.IO{Stdout: pw}, time.Second)
			pw.Close()
			results <- err
		}()
	}
	pids := watch(t, []int{<-started, <-started})
	w.in.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("the worker after its client left: %v", err)
	}
	if left := pids.alive(); len(left) != 0 {
		t.Errorf("still running after the session ended: %v", left)
	}
	for range 2 {
		if err := <-results; !errors.Is(err, envelope.ErrBroken) {
			t.Errorf("a command whose session ended: %v, want ErrBroken", err)
		}
	}
	<-m.Done()
	if _, err := m.Run(t.Context(), sh("true"), envelope.IO{}, time.Second); !errors.Is(err, envelope.ErrClosed) {
		t.Errorf("Run on a closed session: %v, want ErrClosed", err)
	}
}
