// Package netpipe joins two byte streams in both directions, the way every
// tunnel and port forward of Amelia's needs: the host end of the exec
// tunnel, the worker's sandbox end, and a provider's own forwarder (SSH's
// remote port forwarding). It imports only the standard library, so the
// worker that goes into sandboxes can link it.
//
// It is part of the SDK's optional toolkit (see package toolkit), not of
// the provider contract.
package netpipe

import (
	"context"
	"io"
	"net"
	"time"
)

// Pipe copies bytes between a and b in both directions until both
// directions are done. When one side stops sending, the other side's write
// half is closed (a yamux stream's Close is such a half-close), so
// request/response exchanges that rely on EOF work through the pipe. An
// error in either direction closes both sides, which ends the other.
func Pipe(a, b io.ReadWriteCloser) {
	done := make(chan struct{}, 2)
	copyHalf := func(dst, src io.ReadWriteCloser) {
		if _, err := io.Copy(dst, src); err != nil {
			a.Close()
			b.Close()
		} else {
			closeWrite(dst)
		}
		done <- struct{}{}
	}
	go copyHalf(a, b)
	go copyHalf(b, a)
	<-done
	<-done
}

func closeWrite(c io.Closer) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// DialTimeout bounds Forward's dial of its target.
const DialTimeout = 5 * time.Second

// Forward dials target over TCP and pipes c to it until either side is
// done or ctx ends; c is closed on return. It returns the dial's error,
// when the target cannot be reached, after closing c: the peer sees its
// connection end, as it would if the target had refused it.
func Forward(ctx context.Context, c io.ReadWriteCloser, target string) error {
	defer c.Close()
	d, err := (&net.Dialer{Timeout: DialTimeout}).DialContext(ctx, "tcp", target)
	if err != nil {
		return err
	}
	defer d.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); d.Close() })
	defer stop()
	Pipe(c, d)
	return nil
}
