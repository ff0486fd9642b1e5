package main_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// Side-by-side harnesses for amelia run on a warm local sandbox, with the
// real binaries and a scripted model that answers at once (so model time
// is nil and what is measured is amelia's own).
//
//	go test -run='^$' -bench=Run -benchtime=20x ./cmd/amelia/

// arrivals records when each chat request arrived; every run makes one.
type arrivals struct {
	mu    sync.Mutex
	times []time.Time
}

func (a *arrivals) script(int, *llmtest.Request) llmtest.Turn {
	a.mu.Lock()
	a.times = append(a.times, time.Now())
	a.mu.Unlock()
	return llmtest.Turn{Text: "done"}
}

func (a *arrivals) last() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.times[len(a.times)-1]
}

func p50(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkRunToFirstRequest: from starting amelia run to the worker's first
// LLM request reaching the model (through proxy and tunnel), p50; the
// baseline is `amelia sandbox exec -- true` on the same warm sandbox, start
// to exit. Target: under 300 ms.
func BenchmarkRunToFirstRequest(b *testing.B) {
	var a arrivals
	h := newHost(b, llmtest.Options{Script: a.script, Forget: true, Light: true})
	h.env = append(h.env, "AMELIA_PROFILES__E2E__SANDBOX__CONCURRENT_RUNS=true")
	runToFirstRequest(b, h, &a)
}

// runToFirstRequest measures BenchmarkRunToFirstRequest on h, whose model
// answers with a.script. With raw, each round also times raw (an exec of
// `true` by the sandbox's own means) as a second baseline.
func runToFirstRequest(b *testing.B, h *host, a *arrivals, raw ...func() time.Duration) {
	if r := h.amelia(b, "run", "--json", "--workflow", "warm-up", "warm up"); r.code != 0 {
		b.Fatalf("warm-up run: exit %d: %s", r.code, r.stderr)
	}
	var first, whole, exec, rawExec []time.Duration
	i := 0
	for b.Loop() {
		start := time.Now()
		if r := h.amelia(b, "run", "--json", "--workflow", fmt.Sprintf("bench-%d", i), "answer"); r.code != 0 {
			b.Fatalf("run: exit %d: %s", r.code, r.stderr)
		}
		first, whole = append(first, a.last().Sub(start)), append(whole, time.Since(start))
		start = time.Now()
		if r := h.amelia(b, "sandbox", "exec", "--", "true"); r.code != 0 {
			b.Fatalf("sandbox exec: exit %d: %s", r.code, r.stderr)
		}
		exec = append(exec, time.Since(start))
		for _, f := range raw {
			rawExec = append(rawExec, f())
		}
		i++
	}
	f, e := p50(first), p50(exec)
	b.ReportMetric(ms(f), "first-request-p50-ms")
	b.ReportMetric(ms(p50(whole)), "whole-run-p50-ms")
	b.ReportMetric(ms(e), "exec-true-p50-ms")
	b.ReportMetric(float64(f)/float64(e), "x-exec-true")
	if len(rawExec) > 0 {
		r := p50(rawExec)
		b.ReportMetric(ms(r), "raw-exec-true-p50-ms")
		b.ReportMetric(float64(f)/float64(r), "x-raw-exec-true")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkTenConcurrentRuns: ten runs on one warm sandbox at once; all must
// succeed. Reports the total wall time, the per-run p50 and max, and the
// same ten runs one after the other as the baseline.
func BenchmarkTenConcurrentRuns(b *testing.B) {
	const n = 10
	var a arrivals
	h := newHost(b, llmtest.Options{Script: a.script, Forget: true, Light: true})
	h.env = append(h.env, "AMELIA_PROFILES__E2E__SANDBOX__CONCURRENT_RUNS=true")
	if r := h.amelia(b, "run", "--json", "--workflow", "warm-up", "warm up"); r.code != 0 {
		b.Fatalf("warm-up run: exit %d: %s", r.code, r.stderr)
	}
	var total, serial time.Duration
	var each []time.Duration
	round := 0
	for b.Loop() {
		start := time.Now()
		times := make([]time.Duration, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				s := time.Now()
				if r := h.amelia(b, "run", "--json", "--workflow", fmt.Sprintf("c%d-%d", round, i), "answer"); r.code != 0 {
					b.Errorf("concurrent run %d: exit %d: %s", i, r.code, r.stderr)
				}
				times[i] = time.Since(s)
			})
		}
		wg.Wait()
		total += time.Since(start)
		each = append(each, times...)
		start = time.Now()
		for i := range n {
			if r := h.amelia(b, "run", "--json", "--workflow", fmt.Sprintf("s%d-%d", round, i), "answer"); r.code != 0 {
				b.Fatalf("serial run %d: exit %d: %s", i, r.code, r.stderr)
			}
		}
		serial += time.Since(start)
		round++
	}
	rounds := float64(round)
	b.ReportMetric(ms(total)/rounds, "concurrent-total-ms")
	b.ReportMetric(ms(p50(each)), "per-run-p50-ms")
	b.ReportMetric(ms(slices.Max(each)), "per-run-max-ms")
	b.ReportMetric(ms(serial)/rounds, "serial-total-ms")
	b.ReportMetric(float64(serial)/float64(total), "x-serial")
	b.ReportMetric(0, "ns/op")
}
