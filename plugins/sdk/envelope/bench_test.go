package envelope_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk/envelope"
)

// BenchmarkStream: 100 MiB of a command's stdout through the envelope, on
// a session of its own (exec) and on a stream of a mux, beside the same
// command's stdout read straight from its pipe: what the framing costs
// with no transport in the way.
//
//	go test -run='^$' -bench=Stream -benchtime=5x ./plugins/sdk/envelope/
func BenchmarkStream(b *testing.B) {
	const size = 100 << 20
	argv := []string{"head", "-c", "104857600", "/dev/zero"}
	b.Run("exec", func(b *testing.B) {
		var ours, base time.Duration
		for b.Loop() {
			w := startWorker(b, "")
			var c benchtest.Counter
			start := time.Now()
			res, err := envelope.Run(b.Context(), w.in, w.out, envelope.Command{Argv: argv}, envelope.IO{Stdout: &c}, time.Second)
			ours += time.Since(start)
			if err != nil || res.Code != 0 || c.N != size {
				b.Fatalf("%+v %v, %d bytes", res, err, c.N)
			}
			w.in.Close()
			start = time.Now()
			benchtest.Drain(b, exec.Command(argv[0], argv[1:]...), size)
			base += time.Since(start)
		}
		benchtest.Throughput(b, size, ours, base, "envelope", "pipe")
	})
	b.Run("mux", func(b *testing.B) {
		_, m := startMux(b, "")
		var ours, base time.Duration
		for b.Loop() {
			var c benchtest.Counter
			start := time.Now()
			res, err := m.Run(b.Context(), envelope.Command{Argv: argv}, envelope.IO{Stdout: &c}, time.Second)
			ours += time.Since(start)
			if err != nil || res.Code != 0 || c.N != size {
				b.Fatalf("%+v %v, %d bytes", res, err, c.N)
			}
			start = time.Now()
			benchtest.Drain(b, exec.Command(argv[0], argv[1:]...), size)
			base += time.Since(start)
		}
		benchtest.Throughput(b, size, ours, base, "mux", "pipe")
	})
}
