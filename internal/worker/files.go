package worker

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
)

// filesCmd serves one file request (core/sandboxfs/fswire) on stdin and
// stdout, every path jailed in --root.
func (w *worker) filesCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "files --root DIR",
		Short: "Serve one file request (read, write, list, stat, remove, pack, unpack) on stdin and stdout",
		Long: `Read one request line (JSON) on stdin and serve it, every path inside
--root: a path that leaves it, by name or through a symbolic link, is
refused. The answer is one JSON line on stdout, followed for read and pack
by the file's bytes or the tree's tar stream; write and unpack take theirs
on stdin after the request. Files are written as the uid the worker runs
as, into a new file renamed into place. See core/sandboxfs/fswire.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			// Write errors, not death by SIGPIPE, when the host goes away.
			pipe := make(chan os.Signal, 1)
			signal.Notify(pipe, syscall.SIGPIPE)
			defer signal.Stop(pipe)
			stops, end := guardStops()
			defer end()
			if code := serveFiles(root, w.p.Stdin, w.p.Stdout, w.p.Stderr, stops); code != exitOK {
				return exitCode(code)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", "", "the directory every path is inside (absolute)")
	_ = cmd.MarkFlagRequired("root")
	return cmd
}

// fileServer serves file requests inside one root.
type fileServer struct {
	root  *os.Root
	jail  fswire.Jail
	stops *stopGuard
}

// serveFiles serves the request on in, answering on out (errors met
// while streaming go to errOut), and returns the exit code. stops, if
// not nil, is told what to clean up should the worker be stopped.
func serveFiles(root string, in io.Reader, out, errOut io.Writer, stops *stopGuard) int {
	fail := func(err error) int {
		var e *fswire.Error
		if !errors.As(err, &e) {
			e = &fswire.Error{Msg: err.Error()}
		}
		if _, werr := out.Write(fswire.Line(fswire.Response{Error: e.Msg, Kind: e.Kind})); werr != nil {
			fmt.Fprintln(errOut, e.Msg)
		}
		return exitFailed
	}
	br := bufio.NewReaderSize(in, fswire.MaxRequest)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return fail(fmt.Errorf("no file request on stdin (%v); send one JSON line", err))
	}
	var req fswire.Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return fail(fmt.Errorf("the file request is not valid JSON: %v", err))
	}
	if !filepath.IsAbs(root) {
		return fail(fmt.Errorf("--root %q is not an absolute path", root))
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return fail(fmt.Errorf("cannot open the root %s: %v", root, errors.Unwrap(err)))
	}
	defer r.Close()
	s := &fileServer{root: r, jail: fswire.Jail{Dir: filepath.Clean(root), Where: "the allowed root " + root}, stops: stops}
	rel, err := s.jail.Resolve(req.Path)
	if err != nil {
		return fail(err)
	}
	if req.Into != "" && (strings.ContainsAny(req.Into, "/\x00") || req.Into == "." || req.Into == "..") {
		return fail(fmt.Errorf("into %q is not one path element; name a file or directory", req.Into))
	}
	var streamErr error
	switch req.Op {
	case fswire.OpStat:
		err = s.stat(out, rel)
	case fswire.OpList:
		err = s.list(out, rel)
	case fswire.OpRemove:
		err = s.remove(out, rel, req.Recursive)
	case fswire.OpWrite:
		err = s.write(out, bodyOf(br, in), rel, req)
	case fswire.OpUnpack:
		err = s.unpack(out, br, rel, req)
	case fswire.OpRead:
		err, streamErr = s.read(out, rel, false)
	case fswire.OpPack:
		staged := ""
		if req.Stage != "" {
			staged, err = s.stageOut(out, rel, req)
		}
		switch {
		case staged == "":
			err, streamErr = s.read(out, rel, true)
		case err == nil:
			streamErr = holdStaged(br, req.Stage, staged)
		}
	case fswire.OpStageIn:
		var staged string
		staged, rel, err = s.stageIn(out, rel, req)
		if err == nil {
			err = s.placeWhenAsked(br, out, rel, req, staged)
		}
	default:
		err = fmt.Errorf("unknown file operation %q; use one of stat, list, read, write, remove, pack, unpack, stage-in", req.Op)
	}
	if err != nil {
		return fail(err)
	}
	if streamErr != nil {
		fmt.Fprintln(errOut, oneLineMsg(streamErr))
		return exitFailed
	}
	return exitOK
}

// body is what follows the request line on stdin: what br read ahead,
// then the rest straight from stdin (which, a pipe, can be spliced).
type body struct {
	head  []byte
	stdin io.Reader
}

// bodyOf is the body after the request br read from stdin.
func bodyOf(br *bufio.Reader, stdin io.Reader) body {
	head, _ := br.Peek(br.Buffered())
	return body{head, stdin}
}

// copyIn copies b into the file f: what was read ahead, then stdin,
// spliced where it is a pipe.
func copyIn(f *os.File, b body) error {
	if len(b.head) > 0 {
		if _, err := f.Write(b.head); err != nil {
			return err
		}
	}
	if in, ok := b.stdin.(*os.File); ok {
		if _, spliced, err := copyFromPipe(f, in); spliced {
			return err
		}
	}
	_, err := fswire.Copy(f, b.stdin)
	return err
}

// stopGuard exits the worker when it is told to stop (SIGTERM, SIGINT or
// SIGHUP: the host cancelled), first running the cleanup set, if any:
// what a request made and would leave behind. It listens from the start
// of the request, so that no stop is missed while one is being set.
type stopGuard struct {
	mu      sync.Mutex
	cleanup func()
}

// guardStops starts a stopGuard; end stops it.
func guardStops() (g *stopGuard, end func()) {
	g = &stopGuard{}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	ended := make(chan struct{})
	go func() {
		select {
		case <-stop:
			g.mu.Lock() // kept: no cleanup is unset meanwhile
			if g.cleanup != nil {
				g.cleanup()
			}
			os.Exit(exitInterrupted)
		case <-ended:
		}
	}()
	return g, func() {
		signal.Stop(stop)
		close(ended)
	}
}

// onStop sets cleanup to run if the worker is told to stop before the
// returned func is called. A nil guard (no signals: in tests) runs none.
func (g *stopGuard) onStop(cleanup func()) (unset func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	g.cleanup = cleanup
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.cleanup = nil
		g.mu.Unlock()
	}
}

func oneLineMsg(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func (s *fileServer) answer(out io.Writer, resp fswire.Response) error {
	_, err := out.Write(fswire.Line(resp))
	return err
}

func (s *fileServer) stat(out io.Writer, rel string) error {
	fi, err := s.root.Lstat(rel)
	if err != nil {
		return s.jail.FSError("stat", rel, err)
	}
	e := s.entry(rel, filepath.Base(rel), fi)
	return s.answer(out, fswire.Response{Entry: &e})
}

// entry describes fi at rel, named name, with a link's target.
func (s *fileServer) entry(rel, name string, fi fs.FileInfo) fswire.Entry {
	e := fswire.EntryOf(name, fi)
	if e.Type == fswire.TypeSymlink {
		e.Target, _ = s.root.Readlink(rel)
	}
	return e
}

func (s *fileServer) list(out io.Writer, rel string) error {
	fi, err := s.root.Stat(rel)
	if err != nil {
		return s.jail.FSError("list", rel, err)
	}
	if !fi.IsDir() {
		e := s.entry(rel, filepath.Base(rel), fi)
		return s.answer(out, fswire.Response{Entries: []fswire.Entry{e}})
	}
	des, err := fs.ReadDir(s.root.FS(), filepath.ToSlash(rel))
	if err != nil {
		return s.jail.FSError("list", rel, err)
	}
	entries := make([]fswire.Entry, 0, len(des))
	for _, d := range des {
		fi, err := d.Info()
		if err != nil {
			continue // gone since
		}
		p := filepath.Join(rel, d.Name())
		entries = append(entries, s.entry(p, d.Name(), fi))
	}
	slices.SortFunc(entries, func(a, b fswire.Entry) int { return strings.Compare(a.Name, b.Name) })
	return s.answer(out, fswire.Response{Entries: entries})
}

func (s *fileServer) remove(out io.Writer, rel string, recursive bool) error {
	if rel == "." {
		return &fswire.Error{Kind: fswire.KindBadInput, Msg: "cannot remove the root itself; name a path inside it"}
	}
	if _, err := s.root.Lstat(rel); err != nil {
		return s.jail.FSError("remove", rel, err)
	}
	var err error
	if recursive {
		err = s.root.RemoveAll(rel)
	} else {
		err = s.root.Remove(rel)
	}
	if err != nil {
		return s.jail.FSError("remove", rel, err)
	}
	return s.answer(out, fswire.Response{Path: filepath.ToSlash(rel)})
}

// into is where a write or unpack to rel goes: rel/into when rel is a
// directory and into is set.
func (s *fileServer) into(rel, into string) string {
	if into == "" {
		return rel
	}
	if fi, err := s.root.Stat(rel); err == nil && fi.IsDir() {
		return filepath.Join(rel, into)
	}
	return rel
}

// write streams in into a new file beside rel, then renames it to rel.
func (s *fileServer) write(out io.Writer, in body, rel string, req fswire.Request) error {
	rel = s.into(rel, req.Into)
	if rel == "." {
		return fswire.FileOntoDir(rel)
	}
	mode := fs.FileMode(req.Mode).Perm()
	switch fi, err := s.root.Lstat(rel); {
	case err == nil && fi.IsDir():
		return fswire.FileOntoDir(rel)
	case err == nil && req.Mode == 0:
		mode = fi.Mode().Perm()
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return s.jail.FSError("write", rel, err)
	case req.Mode == 0:
		mode = 0o644
	}
	dir := filepath.Dir(rel)
	if fi, err := s.root.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return &fswire.Error{Kind: fswire.KindNotFound, Msg: fmt.Sprintf("cannot write %s: its directory %s does not exist; make it first, or write into a directory that exists", fswire.Name(rel), fswire.Name(dir))}
		}
		return s.jail.FSError("write", rel, err)
	} else if !fi.IsDir() {
		return fswire.DirOntoFile(dir)
	}
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	tmp := fswire.TempName(dir, filepath.Base(rel), binary.LittleEndian.Uint64(nb[:]))
	// Stopped half way (the host cancelled), the temporary file goes;
	// the file it would have replaced stays as it was.
	defer s.stops.onStop(func() { _ = s.root.Remove(tmp) })()
	f, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return s.jail.FSError("write", rel, err)
	}
	err = copyIn(f, in)
	if err == nil {
		err = f.Chmod(mode)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = s.root.Remove(tmp) // ours alone: the file it would have replaced is untouched
		return s.jail.FSError("write", rel, err)
	}
	return s.answer(out, fswire.Response{Path: filepath.ToSlash(rel)})
}

// unpack writes the tar stream on in into the directory rel, made if
// it does not exist.
func (s *fileServer) unpack(out io.Writer, in io.Reader, rel string, req fswire.Request) error {
	rel = s.into(rel, req.Into)
	fi, err := s.root.Stat(rel)
	switch {
	case err == nil && !fi.IsDir():
		return fswire.DirOntoFile(rel)
	case errors.Is(err, fs.ErrNotExist):
		if err := s.root.Mkdir(rel, 0o755); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return &fswire.Error{Kind: fswire.KindNotFound, Msg: fmt.Sprintf("cannot copy into %s: its directory %s does not exist; make it first, or copy into a directory that exists", fswire.Name(rel), fswire.Name(filepath.Dir(rel)))}
			}
			return s.jail.FSError("make the directory", rel, err)
		}
	case err != nil:
		return s.jail.FSError("copy into", rel, err)
	}
	sub, err := s.root.OpenRoot(rel)
	if err != nil {
		return s.jail.FSError("copy into", rel, err)
	}
	defer sub.Close()
	if err := fswire.Unpack(in, sub, s.jail, rel); err != nil {
		return err
	}
	return s.answer(out, fswire.Response{Path: filepath.ToSlash(rel)})
}

// read answers with rel's entry, then streams the file (or, for pack, a
// directory's tar stream). The first error is one to answer with; the
// second one met once bytes went out.
func (s *fileServer) read(out io.Writer, rel string, pack bool) (error, error) {
	fi, err := s.root.Stat(rel)
	if err != nil {
		return s.jail.FSError("read", rel, err), nil
	}
	name := filepath.Base(rel)
	if rel == "." {
		name = filepath.Base(s.jail.Dir)
	}
	if fi.IsDir() {
		if !pack {
			return &fswire.Error{Kind: fswire.KindIsDir, Msg: fmt.Sprintf("cannot read %s: it is a directory; list it, or copy it", fswire.Name(rel))}, nil
		}
		sub, err := s.root.OpenRoot(rel)
		if err != nil {
			return s.jail.FSError("read", rel, err), nil
		}
		defer sub.Close()
		e := fswire.EntryOf(name, fi)
		if err := s.answer(out, fswire.Response{Entry: &e}); err != nil {
			return nil, err
		}
		return nil, fswire.Pack(out, sub, s.jail, rel)
	}
	if !fi.Mode().IsRegular() {
		return &fswire.Error{Kind: fswire.KindBadInput, Msg: fmt.Sprintf("cannot read %s: it is not a regular file (%v)", fswire.Name(rel), fi.Mode().Type())}, nil
	}
	f, err := s.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return s.jail.FSError("read", rel, err), nil
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return s.jail.FSError("read", rel, err), nil
	}
	e := fswire.EntryOf(name, fi)
	if err := s.answer(out, fswire.Response{Entry: &e}); err != nil {
		return nil, err
	}
	n, sent, err := copyToOut(out, f, fi.Size())
	if !sent {
		n, err = fswire.Copy(out, io.LimitReader(f, fi.Size()))
	}
	if err == nil && n < fi.Size() {
		err = io.EOF
	}
	if err != nil && errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("cannot read %s: it shrank from %d to %d bytes while being read; read it again once nothing writes it", fswire.Name(rel), fi.Size(), n)
	}
	if err != nil {
		return nil, s.jail.FSError("read", rel, err)
	}
	return nil, nil
}
