//go:build unix

// Package hostproc runs an exec as a process on the machine the provider runs
// on, keeping the Exec contract: the process leads its own process group;
// stdin, stdout and stderr stream through sdk.ExecIO; when the context ends
// the whole group gets SIGTERM, then SIGKILL after the grace period; the exit
// status carries the killing signal's name.
//
// Providers whose exec is a local command build on it: Amelia's local
// provider, or a third-party one wrapping lxc-attach or kubectl exec.
//
// # Wrappers
//
// What hostproc waits for is the process it started. When that is a
// wrapper which stays between it and the command (nsenter into a pid
// namespace, bwrap, lxc-attach, kubectl exec: each forks the command and
// waits for it), the exit status is the wrapper's. Such wrappers pass the
// command's exit code on, and report a command killed by signal N as an
// exit with code 128+N, so Wait's status has the code but not the
// signal's name. RunWrapped, or WrappedStatus on Wait's status, names it.
// On cancel the group's SIGTERM reaches the wrapper too: one that dies of
// it before its command has ended (kubectl exec does) is reported killed
// by TERM, whatever the command did, and may leave the command running
// where the group's signals do not reach (another machine); stop such a
// command where it runs (sdk/toolkit/shexec), not through the wrapper.
//
// It is part of the SDK's optional toolkit (see package toolkit), not of
// the provider contract.
package hostproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// orphanDrain is how long output may stay open after the process group was
// killed; past it, descendants that escaped the group (setsid) and still hold
// the pipes are cut off so Wait can return.
const orphanDrain = time.Second

// copyBuffer is the most one read of an exec's output, or one write of its
// input, takes; see growPipe.
const copyBuffer = 256 << 10

// Process is a started exec.
type Process struct {
	cmd     *exec.Cmd
	readers []*os.File
	copies  sync.WaitGroup
	copyErr error
	errOnce sync.Once
}

// Start starts cmd as the leader of a new process group with eio's streams.
// cmd's Stdin, Stdout and Stderr must be unset. Streams that are the host's
// own pipes (sdk.PipeReader, sdk.PipeWriter: a plugin's exec whose bytes
// go over the data channel) move no byte through this process: the
// process reads the host's stdin pipe itself, and its output is spliced
// from its pipe into the host's.
func Start(cmd *exec.Cmd, eio sdk.ExecIO) (*Process, error) {
	if cmd.Stdin != nil || cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, errors.New("hostproc: cmd must not have its own stdin, stdout or stderr")
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if cmd.Dir != "" {
		if fi, err := os.Stat(cmd.Dir); err != nil || !fi.IsDir() {
			return nil, sdk.Errorf(sdk.ErrInvalid, "working directory %q does not exist in the sandbox", cmd.Dir)
		}
	}
	p := &Process{cmd: cmd}

	// The child's ends go to the child; ours are closed once it has them.
	var childEnds []*os.File
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			_ = f.Close()
		}
	}
	var stdinW *os.File
	if pr, ok := eio.Stdin.(*sdk.PipeReader); ok {
		// The host's own pipe (the data channel's): the process reads
		// what the host writes with nothing in between. The SDK closes
		// it once the exec is over.
		cmd.Stdin = pr.File()
	} else if eio.Stdin != nil {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("stdin pipe: %w", err)
		}
		growPipe(w)
		cmd.Stdin, stdinW = r, w
		childEnds = append(childEnds, r)
	}
	outputs := []struct {
		dst  io.Writer
		slot *io.Writer
	}{{eio.Stdout, &cmd.Stdout}, {eio.Stderr, &cmd.Stderr}}
	for _, o := range outputs {
		if o.dst == nil {
			continue // os/exec connects /dev/null
		}
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(childEnds)
			closeAll(p.readers)
			return nil, fmt.Errorf("output pipe: %w", err)
		}
		growPipe(w)
		*o.slot = w
		childEnds = append(childEnds, w)
		p.readers = append(p.readers, r)
	}
	if err := cmd.Start(); err != nil {
		closeAll(childEnds)
		closeAll(p.readers)
		if stdinW != nil {
			_ = stdinW.Close()
		}
		return nil, err
	}
	closeAll(childEnds)

	if stdinW != nil {
		go func() {
			// writerOnly hides (*os.File).ReadFrom, which would copy in
			// 32 KiB steps: as many writes, and wakeups of the process,
			// as a buffer of copyBuffer makes in eight.
			_, _ = io.CopyBuffer(writerOnly{stdinW}, eio.Stdin, make([]byte, copyBuffer))
			_ = stdinW.Close()
		}()
	}
	i := 0
	for _, o := range outputs {
		if o.dst == nil {
			continue
		}
		r := p.readers[i]
		i++
		p.copies.Add(1)
		go func(dst io.Writer) {
			defer p.copies.Done()
			var err error
			if pw, ok := dst.(*sdk.PipeWriter); ok {
				// The host's own pipe (the data channel's): the kernel
				// moves the bytes from ours into it.
				_, err = pw.ReadFrom(r)
			} else {
				// readerOnly hides (*os.File).WriteTo, which would copy
				// in 32 KiB steps and ignore the buffer.
				_, err = io.CopyBuffer(dst, readerOnly{r}, make([]byte, copyBuffer))
			}
			if err != nil && !errors.Is(err, os.ErrClosed) {
				p.errOnce.Do(func() { p.copyErr = err })
				_ = r.Close() // the process gets EPIPE rather than blocking
			}
		}(o.dst)
	}
	return p, nil
}

type readerOnly struct{ io.Reader }

type writerOnly struct{ io.Writer }

// Pgid is the process group of the exec.
func (p *Process) Pgid() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL to the whole process group.
func (p *Process) Kill() { _ = unix.Kill(-p.Pgid(), unix.SIGKILL) }

// Wait waits for the process to exit and for its output to be drained. When
// ctx ends first, the process group gets SIGTERM and, after grace, SIGKILL.
func (p *Process) Wait(ctx context.Context, grace time.Duration) (sdk.ExitStatus, error) {
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	drained := make(chan struct{})
	go func() { p.copies.Wait(); close(drained) }()
	defer func() {
		for _, r := range p.readers {
			_ = r.Close()
		}
	}()

	var (
		waitErr   error
		isExited  bool
		isDrained bool
		killTimer <-chan time.Time // SIGKILL due
		cutTimer  <-chan time.Time // stop waiting for escaped descendants
		done      = ctx.Done()
	)
	for !isExited || !isDrained {
		select {
		case waitErr = <-exited:
			isExited = true
		case <-drained:
			isDrained = true
			drained = nil
		case <-done:
			done = nil
			_ = unix.Kill(-p.Pgid(), unix.SIGTERM)
			killTimer = time.After(grace)
		case <-killTimer:
			killTimer = nil
			p.Kill()
			cutTimer = time.After(orphanDrain)
		case <-cutTimer:
			cutTimer = nil
			for _, r := range p.readers {
				_ = r.Close()
			}
		}
	}
	if waitErr != nil {
		var ee *exec.ExitError
		if !errors.As(waitErr, &ee) {
			return sdk.ExitStatus{}, fmt.Errorf("wait for %s: %w", p.cmd.Path, waitErr)
		}
	}
	if p.copyErr != nil {
		return sdk.ExitStatus{}, fmt.Errorf("stream output of %s: %w", p.cmd.Path, p.copyErr)
	}
	return exitStatus(p.cmd.ProcessState), nil
}

// Run starts cmd and waits for it: Start, StartFailed on error, then Wait.
func Run(ctx context.Context, cmd *exec.Cmd, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	p, err := Start(cmd, eio)
	if err != nil {
		return StartFailed(cmd, err, eio.Stderr)
	}
	return p.Wait(ctx, grace)
}

// RunWrapped is Run for a cmd that is a wrapper staying between this
// process and the command (see Wrappers): the status is WrappedStatus's.
func RunWrapped(ctx context.Context, cmd *exec.Cmd, eio sdk.ExecIO, grace time.Duration) (sdk.ExitStatus, error) {
	st, err := Run(ctx, cmd, eio, grace)
	return WrappedStatus(st), err
}

// WrappedStatus is the command's exit status from its wrapper's (see
// Wrappers): a wrapper that exited with code 128+N, N a signal, reports
// its command killed by N, and the status gets N's name. A status with a
// Signal already (the wrapper itself was killed) is returned as it is.
// A command that exited with code 128+N of its own is taken for killed by
// N: through a wrapper the two look the same.
func WrappedStatus(st sdk.ExitStatus) sdk.ExitStatus {
	if st.Signal != "" || st.Code <= 128 || st.Code >= 128+65 {
		return st
	}
	if name := unix.SignalName(syscall.Signal(st.Code - 128)); name != "" {
		st.Signal = strings.TrimPrefix(name, "SIG")
	}
	return st
}

// StartFailed turns an error from Start into the result of the exec: a
// command that cannot be found or run ends as it would in a shell, with exit
// code 127 or 126 and a message on stderr, so every transport reports it the
// same way. Other errors are returned as they are.
func StartFailed(cmd *exec.Cmd, err error, stderr io.Writer) (sdk.ExitStatus, error) {
	code := 0
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		code = 127
	case errors.Is(err, os.ErrPermission), errors.Is(err, unix.ENOEXEC):
		code = 126
	default:
		return sdk.ExitStatus{}, err
	}
	if stderr != nil {
		name := cmd.Path
		if len(cmd.Args) > 0 {
			name = cmd.Args[0]
		}
		reason := "command not found"
		if code == 126 {
			reason = "permission denied"
		}
		fmt.Fprintf(stderr, "%s: %s\n", name, reason)
	}
	return sdk.ExitStatus{Code: code}, nil
}

func exitStatus(ps *os.ProcessState) sdk.ExitStatus {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return sdk.ExitStatus{Code: ps.ExitCode()}
	}
	if ws.Signaled() {
		sig := ws.Signal()
		return sdk.ExitStatus{Code: 128 + int(sig), Signal: strings.TrimPrefix(unix.SignalName(sig), "SIG")}
	}
	return sdk.ExitStatus{Code: ws.ExitStatus()}
}
