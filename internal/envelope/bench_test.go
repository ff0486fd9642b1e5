package envelope_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/benchtest"
	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// BenchmarkStream: 100 MiB through the envelope, on a session of its own
// (exec) and on a stream of a mux, beside the same command's pipe read or
// written straight: what the framing costs with no transport in the way.
// stdout is a command's output read by this process, stdin zeros it
// writes to `cat`; each reports the CPU time this process, the worker and
// the command took per GiB, and what the envelope costs beyond the pipe.
//
//	go test -run='^$' -bench=Stream -benchtime=5x ./plugins/sdk/toolkit/envelope/
func BenchmarkStream(b *testing.B) {
	const size = 100 << 20
	out := []string{"head", "-c", "104857600", "/dev/zero"}
	in := []string{"sh", "-c", "cat >/dev/null"}
	// Each direction: the command, what it is given and what it gives,
	// checked, and the baseline through a pipe.
	dirs := []struct {
		name string
		argv []string
		io   func() (envelope.IO, func() bool)
		base func(*testing.B)
	}{
		{"stdout", out, func() (envelope.IO, func() bool) {
			var c benchtest.Counter
			return envelope.IO{Stdout: &c}, func() bool { return c.N == size }
		}, func(b *testing.B) { benchtest.Drain(b, exec.Command(out[0], out[1:]...), size) }},
		{"stdin", in, func() (envelope.IO, func() bool) {
			z := &benchtest.Zeros{N: size}
			return envelope.IO{Stdin: z}, func() bool { return z.N == 0 }
		}, func(b *testing.B) { benchtest.Feed(b, exec.Command(in[0], in[1:]...), size) }},
	}
	for _, d := range dirs {
		b.Run("exec/"+d.name, func(b *testing.B) {
			t := benchtest.Transfer{N: size}
			for b.Loop() {
				w := startWorker(b, "")
				t.Meter = benchtest.NewCPUMeter(w.cmd.Process.Pid)
				t.Ours(b, func() {
					eio, ok := d.io()
					res, err := envelope.Run(b.Context(), w.in, w.out, envelope.Command{Argv: d.argv}, eio, time.Second)
					if err != nil || res.Code != 0 || !ok() {
						b.Fatalf("%+v %v", res, err)
					}
				})
				w.in.Close()
				t.Base(b, func() { d.base(b) })
			}
			t.Report(b, "envelope", "pipe")
		})
		b.Run("mux/"+d.name, func(b *testing.B) {
			w, m := startMux(b, "")
			t := benchtest.Transfer{N: size, Meter: benchtest.NewCPUMeter(w.cmd.Process.Pid)}
			for b.Loop() {
				t.Ours(b, func() {
					eio, ok := d.io()
					res, err := m.Run(b.Context(), envelope.Command{Argv: d.argv}, eio, time.Second)
					if err != nil || res.Code != 0 || !ok() {
						b.Fatalf("%+v %v", res, err)
					}
				})
				t.Base(b, func() { d.base(b) })
			}
			t.Report(b, "mux", "pipe")
		})
	}
}
