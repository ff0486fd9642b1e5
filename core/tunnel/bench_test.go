package tunnel_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/tunnel"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/proxy"
)

// Side-by-side harnesses for what the proxy and the tunnel add to an LLM
// request. One local upstream (llmtest, keeping nothing) is reached three
// ways in the same run:
//
//   - direct: the benchmark's client to the upstream;
//   - proxy: through the proxy on host loopback (token check, key swap,
//     usage sniffing, audit line);
//   - tunnel: through the tunnel of a local sandbox behind the real plugin,
//     then the proxy. The local provider shares host loopback, so the
//     benchmark's client dials the tunnel's address inside the sandbox, as
//     the worker does.
//
// Each client keeps its connections alive, as the worker's go-openai client
// does. Every figure is reported with the direct one and what the proxy and
// proxy+tunnel add to it.
//
//	go test -run='^$' -bench='Proxy|SSE' -benchtime=2000x ./core/tunnel/

// route is one way to the upstream.
type route struct {
	url, token string
	client     *http.Client
}

// benchRoutes sets up the upstream, the proxy and the tunnel, and returns the
// direct, proxy and proxy+tunnel routes.
func benchRoutes(b *testing.B) [3]route {
	b.Helper()
	up := llmtest.NewWithOptions(b, llmtest.Options{
		Forget: true, Light: true,
		Script: func(int, *llmtest.Request) llmtest.Turn {
			return llmtest.Turn{Text: "a short answer of a few tokens", Usage: &llmtest.Usage{PromptTokens: 12, CompletionTokens: 7}}
		},
	})
	const key = "sk-bench-upstream-key"
	srv, addr := serveProxy(b, proxy.Options{})
	run, err := srv.Start(proxy.RunConfig{
		ID: "bench", Profile: "bench", Network: sdk.NetworkOpen,
		OpenAI:   proxy.Upstream{BaseURL: up.URL() + "/v1", Key: key},
		AuditDir: b.TempDir(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { run.Close() })
	h := open(b, newSandbox(b), tunnel.HostOptions{Target: addr, Logger: slog.New(slog.DiscardHandler)})

	newClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	}
	routes := [3]route{
		{up.URL(), key, newClient()},
		{"http://" + addr, run.Token(), newClient()},
		{"http://" + h.Addr(), run.Token(), newClient()},
	}
	for _, r := range routes {
		b.Cleanup(r.client.CloseIdleConnections)
	}
	return routes
}

const (
	benchChat   = `{"model":"bench-model","messages":[{"role":"user","content":"Say something short."}]}`
	benchStream = `{"model":"bench-model","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Say something short."}]}`
)

// call posts body to the route's chat completions and returns the time to
// the first byte of the response body and to its end.
func (r route) call(ctx context.Context, body string) (firstByte, total time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/chat/completions", bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var one [1]byte
	if _, err := io.ReadFull(resp.Body, one[:]); err != nil {
		return 0, 0, fmt.Errorf("read the first byte: %w", err)
	}
	firstByte = time.Since(start)
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s: %s", r.url, resp.Status)
	}
	return firstByte, time.Since(start), nil
}

// percentile of ds (sorted in place), q in [0, 1].
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	return ds[int(q*float64(len(ds)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sequential times one request per route per iteration, in turn (the first
// route rotating), and returns each route's times as picked by pick.
func sequential(b *testing.B, routes [3]route, body string, pick func(firstByte, total time.Duration) time.Duration) [3][]time.Duration {
	for _, r := range routes { // warm up: connections open, code paths hot
		for range 20 {
			if _, _, err := r.call(b.Context(), body); err != nil {
				b.Fatal(err)
			}
		}
	}
	var times [3][]time.Duration
	i := 0
	for b.Loop() {
		for k := range 3 {
			j := (i + k) % 3
			fb, total, err := routes[j].call(b.Context(), body)
			if err != nil {
				b.Fatal(err)
			}
			times[j] = append(times[j], pick(fb, total))
		}
		i++
	}
	return times
}

// reportAdded reports the direct route's p50 and what the proxy and
// proxy+tunnel add to it at p50 and p99, named after what.
func reportAdded(b *testing.B, what string, times [3][]time.Duration) {
	direct50, direct99 := percentile(times[0], 0.5), percentile(times[0], 0.99)
	b.ReportMetric(ms(direct50), "direct-"+what+"-p50-ms")
	for i, name := range []string{"proxy", "tunnel"} {
		p50, p99 := percentile(times[i+1], 0.5), percentile(times[i+1], 0.99)
		b.ReportMetric(ms(p50-direct50), name+"-added-p50-ms")
		b.ReportMetric(ms(p99-direct99), name+"-added-p99-ms")
		b.ReportMetric(float64(p50)/float64(direct50), name+"-x-direct")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkProxyLatency: a non-streaming chat completion, one at a time.
// Targets: the proxy adds < 0.5 ms at p50, proxy + tunnel < 2 ms.
func BenchmarkProxyLatency(b *testing.B) {
	routes := benchRoutes(b)
	reportAdded(b, "request", sequential(b, routes, benchChat, func(_, total time.Duration) time.Duration { return total }))
}

// BenchmarkSSEFirstByte: a streamed chat completion's time to its first
// byte. Target: the proxy and tunnel add < 1 ms.
func BenchmarkSSEFirstByte(b *testing.B) {
	routes := benchRoutes(b)
	reportAdded(b, "ttfb", sequential(b, routes, benchStream, func(fb, _ time.Duration) time.Duration { return fb }))
}

// BenchmarkProxyThroughput: requests/s with 8 clients at once, b.N requests
// per route, the routes one after the other.
func BenchmarkProxyThroughput(b *testing.B) {
	const clients = 8
	routes := benchRoutes(b)
	n := b.N
	b.StopTimer() // b.N is a request count per route, timed per route below
	var rate [3]float64
	for i, r := range routes {
		next := make(chan struct{}, n)
		for range n {
			next <- struct{}{}
		}
		close(next)
		start := time.Now()
		var wg sync.WaitGroup
		var failed error
		var once sync.Once
		for range clients {
			wg.Go(func() {
				for range next {
					if _, _, err := r.call(context.Background(), benchChat); err != nil {
						once.Do(func() { failed = err })
						return
					}
				}
			})
		}
		wg.Wait()
		if failed != nil {
			b.Fatal(failed)
		}
		rate[i] = float64(n) / time.Since(start).Seconds()
	}
	b.ReportMetric(rate[0], "direct-req/s")
	b.ReportMetric(rate[1], "proxy-req/s")
	b.ReportMetric(rate[2], "tunnel-req/s")
	b.ReportMetric(rate[1]/rate[0], "proxy-x-direct")
	b.ReportMetric(rate[2]/rate[0], "tunnel-x-direct")
	b.ReportMetric(0, "ns/op")
}
