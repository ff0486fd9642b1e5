// Package benchtest reports side-by-side benchmarks: our figure, the
// baseline's, and their ratio, as metrics of one line of `go test -bench`.
package benchtest

import (
	"io"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// Median is the middle of ds (which it sorts).
func Median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// Latencies reports the medians of ours and base as <ours>-p50-ms and
// <base>-p50-ms, and ours/base as x-<base>.
func Latencies(b *testing.B, ours, base []time.Duration, oursName, baseName string) {
	o, c := Median(ours), Median(base)
	b.ReportMetric(float64(o.Microseconds())/1000, oursName+"-p50-ms")
	b.ReportMetric(float64(c.Microseconds())/1000, baseName+"-p50-ms")
	b.ReportMetric(float64(o)/float64(c), "x-"+baseName)
	b.ReportMetric(0, "ns/op")
}

// Compare runs ours and base one after the other on each round of
// b.Loop, reports their latencies as Latencies does, and returns their
// medians.
func Compare(b *testing.B, oursName, baseName string, ours, base func()) (oursP50, baseP50 time.Duration) {
	var o, c []time.Duration
	for b.Loop() {
		start := time.Now()
		ours()
		o = append(o, time.Since(start))
		start = time.Now()
		base()
		c = append(c, time.Since(start))
	}
	Latencies(b, o, c, oursName, baseName)
	return Median(o), Median(c)
}

// Throughput reports n bytes per run moved b.N times in ours and base (the
// total times) as <ours>-MB/s and <base>-MB/s, and ours' rate over base's
// as x-<base>.
func Throughput(b *testing.B, n int64, ours, base time.Duration, oursName, baseName string) {
	mb := float64(b.N) * float64(n) / 1e6
	b.ReportMetric(mb/ours.Seconds(), oursName+"-MB/s")
	b.ReportMetric(mb/base.Seconds(), baseName+"-MB/s")
	b.ReportMetric(base.Seconds()/ours.Seconds(), "x-"+baseName)
	b.ReportMetric(0, "ns/op")
}

// Counter discards what it is given and counts it.
type Counter struct{ N int64 }

func (c *Counter) Write(p []byte) (int, error) { c.N += int64(len(p)); return len(p), nil }

// Drain runs cmd, reads all its stdout as a pipe would be read, and fails
// the benchmark unless it ends well having written exactly want bytes.
func Drain(b *testing.B, cmd *exec.Cmd, want int64) {
	b.Helper()
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	n, err := io.CopyBuffer(io.Discard, pipe, make([]byte, 128<<10))
	if err != nil || n != want {
		b.Fatalf("%s: %d bytes, %v; want %d", cmd, n, err, want)
	}
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%s: %v", cmd, err)
	}
}
