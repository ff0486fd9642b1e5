package daytona

import (
	"strconv"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/ptyframe"
)

// onWorkerTTY runs req on a terminal that worker (amelia-worker in the
// sandbox) opens: the argv that does so, the streams it takes (the input
// and the sizes as frames on stdin; the terminal's output, stderr
// included, on stdout), and the function that ends the frames once the
// exec is over.
func onWorkerTTY(worker string, req sdk.ExecRequest, eio sdk.ExecIO) ([]string, sdk.ExecIO, func()) {
	argv := []string{worker, "pty"}
	if req.Size.Rows > 0 && req.Size.Cols > 0 {
		argv = append(argv, "--rows", strconv.FormatUint(uint64(clamp16(req.Size.Rows)), 10), "--cols", strconv.FormatUint(uint64(clamp16(req.Size.Cols)), 10))
	}
	argv = append(append(argv, "--"), req.Argv...)
	var sizes chan ptyframe.Size
	done := make(chan struct{})
	if eio.Resize != nil {
		sizes = make(chan ptyframe.Size, 1)
		go func() {
			for {
				select {
				case sz := <-eio.Resize:
					select {
					case sizes <- ptyframe.Size{Rows: clamp16(sz.Rows), Cols: clamp16(sz.Cols)}:
					case <-done:
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	in := ptyframe.NewInput(eio.Stdin, sizes)
	stop := func() {
		close(done)
		in.Close()
	}
	return argv, sdk.ExecIO{Stdin: in, Stdout: eio.Stdout, Stderr: eio.Stdout}, stop
}

func clamp16(n uint32) uint16 { return uint16(min(n, 1<<16-1)) }
