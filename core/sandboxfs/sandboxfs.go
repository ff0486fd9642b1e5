// Package sandboxfs moves files in and out of a sandbox, on every
// provider, over `amelia-worker files` in it (see fswire): read and
// write with streaming, list, stat, remove, and CopyIn/CopyOut between a
// host path and a sandbox path, files and directory trees, as docker cp
// does. No path or byte goes through a command line, so nothing is
// bounded by ARG_MAX, and every sandbox path is jailed in a root (the
// sandbox's workdir, or a workflow's checkout): a path that leaves it, by
// name or through a symbolic link, is refused.
//
// Files are written as the uid the exec runs as: ForStack with a
// workflow runs as the workflow's uid where the provider separates runs
// (workspace.RunAs), so what it writes is that run's, as if its agent had
// written it. Permission bits and modification times are kept; symbolic
// links are copied as links, never followed.
//
// Each call is one exec of the worker, with sdk.TrafficBulk for the ones
// that stream, so that the provider runs them where throughput beats the
// time to start.
package sandboxfs

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Entry is a file, directory or symbolic link in the sandbox.
type Entry = fswire.Entry

// Error is a request the worker refused: its message is one line saying
// what was wrong and what to do; errors.Is matches fs.ErrNotExist,
// fs.ErrPermission and fs.ErrExist by its Kind.
type Error = fswire.Error

// FS is the files of one sandbox under one root.
type FS struct {
	// Exec runs the worker in the sandbox, as the uid files are
	// written as.
	Exec sandboxexec.Execer
	// Worker is the amelia-worker's path in the sandbox.
	Worker string
	// Root is the absolute sandbox directory every path is inside;
	// relative paths are relative to it.
	Root string
	// Archive, if set, is the provider's own archive copy, through which
	// files of ArchiveMin bytes or more (0: DefaultArchiveMin) move, by
	// way of staging directories in Stage, the workspace's
	// .amelia/stage (absolute, on the file system of Root); without both,
	// every byte streams over the worker. See archive.go.
	Archive    sdk.Archiver
	Stage      string
	ArchiveMin int64
}

// New is the files under root in the sandbox ex runs in, through the
// worker at worker.
func New(ex sandboxexec.Execer, worker, root string) *FS {
	return &FS{Exec: ex, Worker: worker, Root: root}
}

// session is one request's exec of the worker, its answer read.
type session struct {
	req    fswire.Request
	resp   fswire.Response
	br     *bufio.Reader // what follows the answer
	pr     *os.File      // the worker's stdout, a pipe
	cancel context.CancelFunc
	done   chan execResult
	stderr *tail
	// For a request that Holds: hold is the rest of the worker's stdin
	// (closed, it ends), holding says the worker holds a staging
	// directory until then, and unfollow stops ending the exec with the
	// caller's ctx.
	hold     *io.PipeWriter
	holding  bool
	unfollow func() bool
	ended    bool
	err      error
}

type execResult struct {
	st  sdk.ExitStatus
	err error
}

// start runs the worker for req, with body, if any, after it on its
// stdin, and reads its answer. An answer with an error ends the session
// with it.
func (f *FS) start(ctx context.Context, req fswire.Request, body io.Reader, bulk bool) (*session, error) {
	// The worker's output comes through a pipe of this process's, which
	// a provider in a plugin writes to itself (sdk.OutputFile): a file's
	// bytes then go from it into the host file in the kernel.
	pr, pw, err := fswire.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%s %s in the sandbox: %w", req.Op, req.Path, err)
	}
	execCtx := ctx
	var hold *io.PipeWriter
	if req.Holds() {
		// What the worker stages it keeps until its stdin ends, so
		// stdin stays open; and the exec does not end with ctx, which
		// would leave the staging directory, but is let go (finish).
		var hr *io.PipeReader
		hr, hold = io.Pipe()
		body = hr
		execCtx = context.WithoutCancel(ctx)
	}
	execCtx, cancel := context.WithCancel(execCtx)
	s := &session{req: req, pr: pr, cancel: cancel, done: make(chan execResult, 1), stderr: &tail{}}
	if hold != nil {
		s.hold = hold
		// Unless the worker says it staged, it streams, and stops with
		// ctx.
		s.unfollow = context.AfterFunc(ctx, cancel)
	}
	in := io.Reader(bytes.NewReader(fswire.Line(req)))
	if body != nil {
		// Without its WriterTo, the exec's copy reads it in its own big
		// steps, not io.MultiReader's 32 KiB.
		in = struct{ io.Reader }{io.MultiReader(in, body)}
	}
	ereq := sdk.ExecRequest{Argv: []string{f.Worker, "files", "--root", f.Root}}
	if bulk {
		ereq.Traffic = sdk.TrafficBulk
	}
	go func() {
		st, err := f.Exec.Exec(execCtx, ereq, sdk.ExecIO{Stdin: in, Stdout: sdk.OutputFile{File: pw}, Stderr: s.stderr})
		pw.Close() // the pipe ends once the provider's copy of it is closed too
		s.done <- execResult{st, err}
	}()
	s.br = bufio.NewReaderSize(pr, 256<<10)
	if s.resp, err = s.answer(); err != nil {
		return nil, s.finish(fmt.Errorf("the worker gave no answer (%v); check that the amelia-worker in the sandbox is this version", err))
	}
	if err := refused(s.resp); err != nil {
		return nil, s.finish(err)
	}
	switch {
	case hold == nil:
	case s.resp.Staged != nil:
		s.holding = true
		s.unfollow()
	default:
		s.hold.Close() // nothing staged: its stdin may end
	}
	return s, nil
}

// then sends the worker, holding a staging directory, its next request,
// reads its answer and ends the session.
func (s *session) then(req fswire.Request) (fswire.Response, error) {
	var resp fswire.Response
	_, err := s.hold.Write(fswire.Line(req))
	s.hold.Close()
	if err == nil {
		resp, err = s.answer()
	}
	if err != nil {
		return resp, s.finish(fmt.Errorf("the worker gave no answer to %s (%v)", req.Op, err))
	}
	return resp, s.finish(refused(resp))
}

// answer reads the worker's next answer line.
func (s *session) answer() (fswire.Response, error) {
	var resp fswire.Response
	line, err := s.br.ReadSlice('\n')
	if err == nil {
		err = json.Unmarshal(line, &resp)
	}
	return resp, err
}

// refused is the error an answer says, if any.
func refused(resp fswire.Response) error {
	if resp.Error == "" {
		return nil
	}
	return &fswire.Error{Kind: resp.Kind, Msg: resp.Error}
}

// copyFile copies the next n bytes the worker streams (a file's) into
// out: those read with the answer, then the rest from the pipe into out
// in the kernel where it can, else through this process. It stops early
// at the stream's end.
func (s *session) copyFile(out *os.File, n int64) (int64, error) {
	head, _ := s.br.Peek(int(min(int64(s.br.Buffered()), n)))
	if _, err := out.Write(head); err != nil {
		return 0, err
	}
	done, _ := s.br.Discard(len(head))
	m, spliced, err := fswire.FromPipe(out, s.pr, n-int64(done))
	if !spliced {
		m, err = fswire.Copy(out, io.LimitReader(s.br, n-int64(done)))
	}
	return int64(done) + m, err
}

// finish ends the session: what the worker still writes is dropped, and
// its exit awaited. It returns the first of failed (the caller's own
// error), an answer's error, the worker's error line or the exec's
// failure.
func (s *session) finish(failed error) error {
	if s.ended {
		if s.err == nil {
			return failed // the caller's, met after the worker's end
		}
		return s.err
	}
	s.ended = true
	var answer *fswire.Error
	errors.As(failed, &answer)
	if s.hold != nil {
		s.unfollow()
		s.hold.Close()
	}
	switch {
	case s.holding:
		// The worker removes its staging directory and ends by itself;
		// one that does not is stopped in the end.
		t := time.AfterFunc(archiveCleanup, s.cancel)
		defer t.Stop()
	case failed != nil:
		s.cancel() // the worker answered no, or the caller gave up: it need not go on
	}
	// All that was asked for is read, and an honest worker has no more
	// to say: what it writes even so is drained, and ends the exec.
	extra := make(chan int64, 1)
	go func() {
		n, _ := io.Copy(io.Discard, s.pr)
		if n > 0 {
			s.cancel()
		}
		extra <- n
	}()
	res := <-s.done
	s.cancel()
	// Every end the provider wrote to is closed once it has returned.
	more := <-extra + int64(s.br.Buffered())
	s.pr.Close()
	var err error
	switch {
	case answer != nil:
		err = answer
	case failed == nil && more > 0:
		err = fmt.Errorf("%s %s in the sandbox: the worker wrote %d bytes more than it announced", s.req.Op, s.req.Path, more)
	case res.err != nil && failed == nil:
		err = fmt.Errorf("%s %s in the sandbox: %w", s.req.Op, s.req.Path, res.err)
	case res.st.Code != 0 && s.stderr.line() != "":
		err = errors.New(s.stderr.line())
	case failed != nil:
		err = fmt.Errorf("%s %s in the sandbox: %w", s.req.Op, s.req.Path, failed)
	case res.st.Code != 0:
		err = fmt.Errorf("%s %s in the sandbox: the worker exited %d", s.req.Op, s.req.Path, res.st.Code)
	}
	s.err = err
	return err
}

// call runs one request and ends it: body, if any, is its input; out,
// if any, reads what follows the answer.
func (f *FS) call(ctx context.Context, req fswire.Request, body io.Reader, bulk bool, out func(io.Reader) error) (fswire.Response, error) {
	s, err := f.start(ctx, req, body, bulk)
	if err != nil {
		return fswire.Response{}, err
	}
	if out != nil {
		err = out(s.br)
	}
	return s.resp, s.finish(err)
}

// tail keeps the last line written to it (a worker's stderr).
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 8<<10 {
		t.buf = t.buf[len(t.buf)-4<<10:]
	}
	return len(p), nil
}

func (t *tail) line() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Stat describes path; a symbolic link is described, not followed.
func (f *FS) Stat(ctx context.Context, path string) (Entry, error) {
	resp, err := f.call(ctx, fswire.Request{Op: fswire.OpStat, Path: path}, nil, false, nil)
	if err != nil {
		return Entry{}, err
	}
	if resp.Entry == nil {
		return Entry{}, fmt.Errorf("stat %s: the worker's answer has no entry", path)
	}
	return *resp.Entry, nil
}

// List is the directory path's entries in name order (a file's own when
// path is a file).
func (f *FS) List(ctx context.Context, path string) ([]Entry, error) {
	resp, err := f.call(ctx, fswire.Request{Op: fswire.OpList, Path: path}, nil, false, nil)
	return resp.Entries, err
}

// Remove removes the file, link or empty directory path; with
// recursive, a directory and all in it.
func (f *FS) Remove(ctx context.Context, path string, recursive bool) error {
	_, err := f.call(ctx, fswire.Request{Op: fswire.OpRemove, Path: path, Recursive: recursive}, nil, false, nil)
	return err
}

// WriteFile streams r into the file path, made or replaced whole (a new
// file renamed into place: readers never see half of it), with the
// permission bits of mode (0: those of the file it replaces, else 0644).
// path's directory must exist; a directory at path is refused. It
// returns where the file went, relative to the root.
func (f *FS) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) (string, error) {
	resp, err := f.call(ctx, fswire.Request{Op: fswire.OpWrite, Path: path, Mode: uint32(mode.Perm())}, r, true, nil)
	return resp.Path, err
}

// ReadFile streams the file path: its entry, and a reader of its bytes
// that the caller closes (closing early stops the worker). An error met
// in the sandbox while streaming comes from Read.
func (f *FS) ReadFile(ctx context.Context, path string) (io.ReadCloser, Entry, error) {
	s, err := f.start(ctx, fswire.Request{Op: fswire.OpRead, Path: path}, nil, true)
	if err != nil {
		return nil, Entry{}, err
	}
	if s.resp.Entry == nil {
		return nil, Entry{}, s.finish(errors.New("the worker's answer has no entry"))
	}
	return &fileReader{s: s, r: io.LimitReader(s.br, s.resp.Entry.Size)}, *s.resp.Entry, nil
}

// fileReader reads a file a session streams; its end is the session's.
type fileReader struct {
	s *session
	r io.Reader
}

func (fr *fileReader) Read(p []byte) (int, error) {
	n, err := fr.r.Read(p)
	if err == io.EOF {
		if ferr := fr.s.finish(nil); ferr != nil {
			return n, ferr
		}
	} else if err != nil {
		err = fr.s.finish(err)
	}
	return n, err
}

// WriteTo lets io.Copy skip a buffer of its own.
func (fr *fileReader) WriteTo(w io.Writer) (int64, error) {
	n, err := fswire.Copy(w, fr.r)
	if err != nil {
		return n, fr.s.finish(err)
	}
	return n, fr.s.finish(nil)
}

// Close ends the read, stopping the worker if it is not done.
func (fr *fileReader) Close() error {
	if !fr.s.ended {
		_ = fr.s.finish(errors.New("closed before its end"))
	}
	return nil
}
