package daytonatest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// hostBackend keeps sandboxes as directories on the host: a sandbox's
// directory is its user's home, and its commands run on the host, as the
// test's own user, each in a new session. Stopping or removing a sandbox
// kills the process groups of every command it ran.
type hostBackend struct {
	root   string // under the test's temporary directory
	logger *slog.Logger

	mu     sync.Mutex
	up     map[string]bool             // by sandbox id: started
	groups map[string]map[int]struct{} // by sandbox id: process groups started
}

func (h *hostBackend) imageExists(context.Context, string) (bool, error) { return true, nil }

func (h *hostBackend) prepare(s *sandbox) error {
	dir, err := os.MkdirTemp(h.root, "sandbox-")
	if err != nil {
		return fmt.Errorf("make the directory of sandbox %s: %w", s.id, err)
	}
	s.home = dir
	return nil
}

func (h *hostBackend) create(context.Context, *sandbox) error { return nil }

func (h *hostBackend) start(_ context.Context, s *sandbox) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.up == nil {
		h.up = map[string]bool{}
	}
	h.up[s.id] = true
	return nil
}

func (h *hostBackend) stop(_ context.Context, s *sandbox) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.up, s.id)
	h.killLocked(s.id)
	return nil
}

func (h *hostBackend) remove(ctx context.Context, s *sandbox) error {
	_ = h.stop(ctx, s)
	// The directory goes with the test's temporary directory: a command
	// killed just now may still hold files in it.
	return nil
}

// killLocked kills every process group a sandbox's commands started.
func (h *hostBackend) killLocked(id string) {
	for pgid := range h.groups[id] {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			h.logger.Warn("daytonatest: kill a sandbox's process group", "sandbox", id, "pgid", pgid, "error", err)
		}
	}
	delete(h.groups, id)
}

func (h *hostBackend) close(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.groups {
		h.killLocked(id)
	}
	h.up = nil
	return nil
}

func (h *hostBackend) run(ctx context.Context, s *sandbox, req execRequest) (exitStatus, error) {
	dir := req.dir
	if dir == "" {
		dir = s.home
	}
	env := baseEnv(s.user, s.home)
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	env = append(env, req.env...)
	cmd := exec.Command("/bin/sh", "-c", req.cmd)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}

	// Our own pipes rather than exec.Cmd's copying: a failed write must
	// close our end (so the command gets EPIPE), and stdin must close when
	// req.stdin ends, not when the command does.
	var parentEnds, childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("run a command in sandbox %s: %w", s.id, err)
		}
		return r, w, nil
	}
	outR, outW, err := pipe()
	if err != nil {
		return exitStatus{}, err
	}
	parentEnds = append(parentEnds, outR)
	childEnds = append(childEnds, outW)
	cmd.Stdout, cmd.Stderr = outW, outW
	// One pipe for both when they go to the same writer (the toolbox's
	// combined output), so that the order written is kept.
	var errR *os.File
	if req.stderr == nil || req.stderr != req.stdout {
		r, w, err := pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			return exitStatus{}, err
		}
		errR = r
		parentEnds = append(parentEnds, r)
		childEnds = append(childEnds, w)
		cmd.Stderr = w
	}
	var inW *os.File
	if req.stdin != nil {
		inR, w, err := pipe()
		if err != nil {
			for _, f := range append(parentEnds, childEnds...) {
				f.Close()
			}
			return exitStatus{}, err
		}
		inW = w
		childEnds = append(childEnds, inR)
		cmd.Stdin = inR
	}

	h.mu.Lock()
	if !h.up[s.id] {
		h.mu.Unlock()
		for _, f := range parentEnds {
			f.Close()
		}
		if inW != nil {
			inW.Close()
		}
		return exitStatus{}, fmt.Errorf("sandbox %s is not started", s.id)
	}
	err = cmd.Start()
	if err == nil {
		if h.groups[s.id] == nil {
			h.groups[s.id] = map[int]struct{}{}
		}
		h.groups[s.id][cmd.Process.Pid] = struct{}{}
	}
	h.mu.Unlock()
	if err != nil {
		for _, f := range parentEnds {
			f.Close()
		}
		if inW != nil {
			inW.Close()
		}
		return exitStatus{}, fmt.Errorf("run a command in sandbox %s: %w", s.id, err)
	}
	pgid := cmd.Process.Pid
	for _, f := range childEnds {
		f.Close()
	}
	childEnds = nil
	if req.started != nil {
		req.started()
	}

	if inW != nil {
		go func() {
			// Ends when req.stdin does (the channel's EOF, or its close).
			_, _ = io.Copy(inW, req.stdin)
			inW.Close()
		}()
	}
	var wg sync.WaitGroup
	drain := func(w io.Writer, r *os.File) {
		defer wg.Done()
		defer r.Close()
		if w == nil {
			w = io.Discard
		}
		_, _ = io.Copy(w, r)
	}
	wg.Add(1)
	go drain(req.stdout, outR)
	if errR != nil {
		wg.Add(1)
		go drain(req.stderr, errR)
	}
	output := make(chan struct{})
	go func() {
		wg.Wait()
		close(output)
	}()
	select {
	case <-output:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-output
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return exitStatus{}, fmt.Errorf("wait for a command in sandbox %s: %w", s.id, err)
	}
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return exitStatus{code: 128 + int(ws.Signal()), signal: strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")}, nil
	}
	return exitStatus{code: cmd.ProcessState.ExitCode()}, nil
}
