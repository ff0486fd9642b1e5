package worker

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
)

// Staging, for a provider that copies archives itself (sdk.Archiver,
// docker's archive endpoints): the provider writes into, or reads from,
// a private directory the worker made, never a path a run chose, and the
// worker moves the file between it and the jail.
//
//	STAGE/           mode 1733 (as .amelia/parked): anyone may make an
//	                 entry, none may list or touch another's
//	STAGE/<hex>/     0700, of the uid the worker runs as; 128 random bits
//	                 nobody else can learn (STAGE cannot be listed)
//	STAGE/<hex>/file what the provider put, or a hard link to the file
//	                 the worker opened through the jail

// stagedName is a staging directory's name.
var stagedName = regexp.MustCompile(`^[0-9a-f]{32}$`)

// openStage opens the staging directory req.Stage, making it (1733) when
// it is absent and create is set. It must be a real directory, sticky.
func openStage(stage string, create bool) (*os.File, error) {
	if !filepath.IsAbs(stage) || filepath.Clean(stage) != stage || filepath.Base(stage) != "stage" || filepath.Base(filepath.Dir(stage)) != ".amelia" {
		return nil, &fswire.Error{Kind: fswire.KindBadInput, Msg: fmt.Sprintf("staging directory %q is not a workspace's .amelia/stage", stage)}
	}
	fi, err := os.Lstat(stage)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := shared(filepath.Dir(stage), "stage"); err != nil {
			return nil, fmt.Errorf("cannot make the staging directory %s: %v", stage, errors.Unwrap(err))
		}
		fi, err = os.Lstat(stage)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot use the staging directory %s: %v", stage, err)
	}
	if !fi.IsDir() || fi.Mode()&os.ModeSticky == 0 {
		return nil, fmt.Errorf("cannot use the staging directory %s: it is not a sticky directory", stage)
	}
	fd, err := unix.Open(stage, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open the staging directory %s: %v", stage, err)
	}
	return os.NewFile(uintptr(fd), stage), nil
}

// makeStaged makes a new staging directory in stage and opens it. From
// then on, a stop of the worker removes it (see stopGuard).
func (s *fileServer) makeStaged(stage *os.File) (string, *os.File, error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	name := hex.EncodeToString(b[:])
	s.stops.onStop(func() { _ = dropStaged(stage.Name(), name) })
	if err := unix.Mkdirat(int(stage.Fd()), name, 0o700); err != nil {
		return "", nil, fmt.Errorf("cannot make a staging directory in %s: %v", stage.Name(), err)
	}
	d, err := openStaged(stage, name)
	if err != nil {
		_ = unix.Unlinkat(int(stage.Fd()), name, unix.AT_REMOVEDIR)
		return "", nil, err
	}
	return name, d, nil
}

// openStaged opens the staging directory name in stage: one of this
// uid's, not a link.
func openStaged(stage *os.File, name string) (*os.File, error) {
	if !stagedName.MatchString(name) {
		return nil, &fswire.Error{Kind: fswire.KindBadInput, Msg: fmt.Sprintf("staging directory name %q is not one the worker makes", name)}
	}
	fd, err := unix.Openat(int(stage.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cannot open the staging directory %s: %v", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("cannot use the staging directory %s: it is not this uid's alone", name)
	}
	return os.NewFile(uintptr(fd), filepath.Join(stage.Name(), name)), nil
}

// unstage removes the staging directory name of stage and what is in it,
// following no link.
func unstage(stage *os.File, name string) error {
	d, err := openStaged(stage, name)
	if err != nil {
		return err
	}
	names, _ := d.Readdirnames(-1)
	for _, n := range names {
		if err := unix.Unlinkat(int(d.Fd()), n, 0); err != nil {
			_ = unix.Unlinkat(int(d.Fd()), n, unix.AT_REMOVEDIR)
		}
	}
	d.Close()
	if err := unix.Unlinkat(int(stage.Fd()), name, unix.AT_REMOVEDIR); err != nil {
		return fmt.Errorf("cannot remove the staging directory %s: %v", name, err)
	}
	return nil
}

// checkWritable checks that a file can be written at rel as write would
// write it, and returns the permission bits it would get.
func (s *fileServer) checkWritable(rel string, reqMode uint32) (fs.FileMode, error) {
	if rel == "." {
		return 0, fswire.FileOntoDir(rel)
	}
	mode := fs.FileMode(reqMode).Perm()
	switch fi, err := s.root.Lstat(rel); {
	case err == nil && fi.IsDir():
		return 0, fswire.FileOntoDir(rel)
	case err == nil && reqMode == 0:
		mode = fi.Mode().Perm()
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return 0, s.jail.FSError("write", rel, err)
	case reqMode == 0:
		mode = 0o644
	}
	dir := filepath.Dir(rel)
	if fi, err := s.root.Stat(dir); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, &fswire.Error{Kind: fswire.KindNotFound, Msg: fmt.Sprintf("cannot write %s: its directory %s does not exist; make it first, or write into a directory that exists", fswire.Name(rel), fswire.Name(dir))}
		}
		return 0, s.jail.FSError("write", rel, err)
	} else if !fi.IsDir() {
		return 0, fswire.DirOntoFile(dir)
	}
	return mode, nil
}

// stageIn checks that the file can be written where req says, makes a
// staging directory for the provider to put it in, and returns its name
// and where the file is to go.
func (s *fileServer) stageIn(out io.Writer, rel string, req fswire.Request) (staged, dst string, err error) {
	rel = s.into(rel, req.Into)
	if _, err := s.checkWritable(rel, req.Mode); err != nil {
		return "", "", err
	}
	stage, err := openStage(req.Stage, true)
	if err != nil {
		return "", "", err
	}
	defer stage.Close()
	name, d, err := s.makeStaged(stage)
	if err != nil {
		return "", "", err
	}
	d.Close()
	if err := s.answer(out, fswire.Response{Path: filepath.ToSlash(rel), Staged: &fswire.Staged{Name: name, UID: os.Geteuid(), GID: os.Getegid()}}); err != nil {
		_ = unstage(stage, name)
		return "", "", err
	}
	return name, rel, nil
}

// placeWhenAsked waits, once stage-in has answered, for the
// host's next request on in: OpPlace places the staged file at rel as
// stage-in's req says (answering as OpPlace does); the end of in (the
// host failed, or is gone), or a stop (the host cancelled), removes the
// staging directory.
func (s *fileServer) placeWhenAsked(in *bufio.Reader, out io.Writer, rel string, req fswire.Request, staged string) error {
	line, err := in.ReadSlice('\n')
	if err != nil {
		return holdStaged(in, req.Stage, staged) // ended: nothing to answer
	}
	var next fswire.Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&next); err != nil || next.Op != fswire.OpPlace {
		_ = dropStaged(req.Stage, staged)
		return &fswire.Error{Kind: fswire.KindBadInput, Msg: fmt.Sprintf("after stage-in, the worker takes only a place request, not %q", bytes.TrimSpace(line))}
	}
	return s.place(out, rel, req.Mode, req.Stage, staged)
}

// place moves the file in the staging directory staged of stageDir to
// rel, whole (a rename: readers never see half of it), with the mode
// write would give it (reqMode as a write's), and removes the staging
// directory whatever happens.
func (s *fileServer) place(out io.Writer, rel string, reqMode uint32, stageDir, staged string) error {
	stage, err := openStage(stageDir, false)
	if err != nil {
		return err
	}
	defer stage.Close()
	defer func() { _ = unstage(stage, staged) }()
	mode, err := s.checkWritable(rel, reqMode)
	if err != nil {
		return err
	}
	d, err := openStaged(stage, staged)
	if err != nil {
		return err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), fswire.StagedFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("cannot place %s: the provider put no file to place (%v)", fswire.Name(rel), err)
	}
	f := os.NewFile(uintptr(fd), fswire.StagedFile)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() || st.Nlink != 1 {
		return fmt.Errorf("cannot place %s: what the provider put is not a regular file of this uid's alone", fswire.Name(rel))
	}
	if err := f.Chmod(mode); err != nil {
		return s.jail.FSError("write", rel, err)
	}
	dir, err := s.root.Open(filepath.Dir(rel))
	if err != nil {
		return s.jail.FSError("write", rel, err)
	}
	defer dir.Close()
	err = unix.Renameat(int(d.Fd()), fswire.StagedFile, int(dir.Fd()), filepath.Base(rel))
	if errors.Is(err, unix.EXDEV) {
		err = s.copyPlace(f, rel, mode)
	}
	if err != nil {
		return s.jail.FSError("write", rel, err)
	}
	return s.answer(out, fswire.Response{Path: filepath.ToSlash(rel)})
}

// copyPlace writes the staged file f to rel when it cannot be renamed
// there (another file system): into a new file beside it, renamed into
// place.
func (s *fileServer) copyPlace(f *os.File, rel string, mode fs.FileMode) error {
	var b [8]byte
	_, _ = rand.Read(b[:])
	tmp := filepath.Join(filepath.Dir(rel), ".amelia-place-"+strconv.FormatUint(uint64(b[0])|uint64(b[1])<<8|uint64(b[2])<<16|uint64(b[3])<<24, 16))
	w, err := s.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(w, f)
	if err == nil {
		err = w.Chmod(mode)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.root.Rename(tmp, rel)
	}
	if err != nil {
		_ = s.root.Remove(tmp)
	}
	return err
}

// stageOut stages the regular file rel, when it has req.StageMin bytes
// or more, for the provider to get: a hard link, in a new staging
// directory, to the very file opened through the jail (by its
// /proc/self/fd link, so no link swapped in meanwhile is followed). It
// answers with the file's entry and the staging directory, and returns
// its name; "", nothing answered, when the file is to be streamed
// instead (a directory, a small file, no staging possible here).
func (s *fileServer) stageOut(out io.Writer, rel string, req fswire.Request) (staged string, err error) {
	fi, err := s.root.Stat(rel)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() < req.StageMin {
		return "", nil
	}
	f, err := s.root.OpenFile(rel, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", nil
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return "", nil
	}
	stage, err := openStage(req.Stage, true)
	if err != nil {
		return "", nil
	}
	defer stage.Close()
	name, d, err := s.makeStaged(stage)
	if err != nil {
		return "", nil
	}
	defer d.Close()
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), int(d.Fd()), fswire.StagedFile, unix.AT_SYMLINK_FOLLOW); err != nil {
		_ = unstage(stage, name)
		return "", nil // another file system, no /proc: streamed
	}
	n := filepath.Base(rel)
	if rel == "." {
		n = filepath.Base(s.jail.Dir)
	}
	e := fswire.EntryOf(n, fi)
	if err := s.answer(out, fswire.Response{Entry: &e, Staged: &fswire.Staged{Name: name, UID: os.Geteuid(), GID: os.Getegid()}}); err != nil {
		_ = unstage(stage, name)
		return name, err
	}
	return name, nil
}

// holdStaged waits for the end of in, the host done with the staged file
// (or gone), or for the worker to be told to stop (the host cancelled),
// and removes the staging directory name of stage.
func holdStaged(in io.Reader, stage, name string) error {
	_, _ = io.Copy(io.Discard, in)
	return dropStaged(stage, name)
}

// dropStaged removes the staging directory name of stage.
func dropStaged(stage, name string) error {
	d, err := openStage(stage, false)
	if err != nil {
		return err
	}
	defer d.Close()
	return unstage(d, name)
}
