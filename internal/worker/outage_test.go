package worker_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// flakyProxy stands between the worker and the LLM as the tunnel does: up,
// it passes requests on; down, it closes every connection unanswered, as
// a tunnel whose host is reconnecting does, and says so on dropped.
type flakyProxy struct {
	*httptest.Server
	down    atomic.Bool
	dropped chan struct{}
}

func newFlakyProxy(t *testing.T, srv *llmtest.Server) *flakyProxy {
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{dropped: make(chan struct{}, 100)}
	pass := httputil.NewSingleHostReverseProxy(target)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.down.Load() {
			pass.ServeHTTP(w, r)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0) // a reset, not a clean close
			conn.Close()
		}
		p.dropped <- struct{}{}
	}))
	t.Cleanup(p.Close)
	return p
}

// The tunnel goes down between two LLM calls and comes back: the worker
// waits it out and the run succeeds, instead of failing the run.
func TestAgenticWaitsOutATunnelOutage(t *testing.T) {
	cwd := t.TempDir()
	fifo := cwd + "/go-on"
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := llmtest.New(t,
		llmtest.Turn{ToolCalls: []llmtest.ToolCall{call("execute", `{"command": "cat go-on"}`)}},
		llmtest.Turn{Text: "done after the outage"},
	)
	p := newFlakyProxy(t, srv)
	env := []string{"AMELIA_PROXY_URL=" + p.URL, "AMELIA_PROXY_TOKEN=" + runToken}
	done := make(chan result, 1)
	go func() {
		prompt := writeFile(t, t.TempDir(), "p.txt", "wait for it")
		done <- runWorker(t, env, nil, "agentic", "--prompt-file", prompt, "--cwd", cwd, "--model", "m")
	}()
	// Opening the FIFO waits for the tool's cat: the first call is over.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	p.down.Store(true)
	f.WriteString("now\n")
	f.Close()
	<-p.dropped // the next LLM call found no tunnel
	<-p.dropped // and tried again
	p.down.Store(false)
	r := <-done
	if r.code != 0 {
		t.Fatalf("exit %d after the outage; stderr:\n%s", r.code, r.stderr)
	}
	res, _ := r.ending(t, false)
	contains(t, "result", str(res.Content), "done after the outage")
}
