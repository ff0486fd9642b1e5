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
	"strings"
	"sync"

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
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan execResult
	stderr *tail
	ended  bool
	err    error
}

type execResult struct {
	st  sdk.ExitStatus
	err error
}

// start runs the worker for req, with body, if any, after it on its
// stdin, and reads its answer. An answer with an error ends the session
// with it.
func (f *FS) start(ctx context.Context, req fswire.Request, body io.Reader, bulk bool) (*session, error) {
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	s := &session{req: req, pr: pr, cancel: cancel, done: make(chan execResult, 1), stderr: &tail{}}
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
		st, err := f.Exec.Exec(ctx, ereq, sdk.ExecIO{Stdin: in, Stdout: pw, Stderr: s.stderr})
		pw.Close()
		s.done <- execResult{st, err}
	}()
	s.br = bufio.NewReaderSize(pr, 256<<10)
	line, err := s.br.ReadSlice('\n')
	if err == nil {
		err = json.Unmarshal(line, &s.resp)
	}
	if err != nil {
		return nil, s.finish(fmt.Errorf("the worker gave no answer (%v); check that the amelia-worker in the sandbox is this version", err))
	}
	if s.resp.Error != "" {
		return nil, s.finish(&fswire.Error{Kind: s.resp.Kind, Msg: s.resp.Error})
	}
	return s, nil
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
	s.pr.CloseWithError(errAbandoned)
	var answer *fswire.Error
	errors.As(failed, &answer)
	if failed != nil {
		s.cancel() // the worker answered no, or the caller gave up: it need not go on
	}
	res := <-s.done
	s.cancel()
	var err error
	switch {
	case answer != nil:
		err = answer
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

var errAbandoned = errors.New("the host stopped reading")

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
