package sandboxfs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/amelia-sandbox/amelia/core/sandboxfs/fswire"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// Big files through the provider's own archive copy (sdk.Archiver), where
// it has one: docker's archive endpoints move a file at docker cp's
// speed, with no exec stream and no shim pipe in the way. The worker
// still decides where the file goes and puts it there through its jail:
//
//   - In: the worker checks that the file can be written at the
//     destination and makes a private staging directory (OpStageIn); the
//     provider unpacks a one-file archive into it, owned by the uid the
//     worker runs as; the same worker, asked next, renames it into place
//     (OpPlace).
//   - Out: the worker opens the file through its jail and hard-links that
//     very file into a private staging directory (OpPack with Stage); the
//     provider archives the link.
//
// The worker holds the staging directory for one exec (Request.Holds) and
// removes it when its stdin ends: a copy that fails, is cancelled, or
// whose host dies leaves nothing behind.
//
// A provider without Archiver, or a sandbox where staging cannot be done
// (no staging directory, another file system), streams over the worker
// as before.

// DefaultArchiveMin is the smallest file moved through the provider's
// archive copy: below it, the two more execs staging takes cost more
// than the stream saves.
const DefaultArchiveMin = 32 << 20

// archiveCleanup bounds how long a worker holding a staging directory is
// waited for, once let go, to remove it and end.
const archiveCleanup = 30 * time.Second

// archiver is the provider's archive copy, when f uses one.
func (f *FS) archiver() sdk.Archiver {
	if f.Archive == nil || f.Stage == "" {
		return nil
	}
	return f.Archive
}

func (f *FS) archiveMin() int64 {
	if f.ArchiveMin > 0 {
		return f.ArchiveMin
	}
	return DefaultArchiveMin
}

// unsupported reports whether err says the provider has no archive copy.
func unsupported(err error) bool { return errors.Is(err, sdk.ErrUnsupported) }

// copyFileInByArchive writes the host file in (fi) to dst, through the
// provider's archive copy. ok is false, nothing written, when the
// provider or the sandbox cannot: the caller streams it then.
func (f *FS) copyFileInByArchive(ctx context.Context, ar sdk.Archiver, in *os.File, fi fs.FileInfo, dst, name string) (where string, ok bool, err error) {
	s, err := f.start(ctx, fswire.Request{Op: fswire.OpStageIn, Path: dst, Into: name, Mode: uint32(fi.Mode().Perm()), Stage: f.Stage}, nil, false)
	var answer *fswire.Error
	switch {
	case errors.As(err, &answer) && answer.Kind == "":
		return "", false, nil // no staging here (an older worker, no staging directory)
	case err != nil:
		return "", true, err
	case s.resp.Staged == nil:
		return "", false, s.finish(nil)
	}
	staged := s.resp.Staged
	// A one-file archive of the file as it is (no tar writer copies its
	// bytes); through a plugin, the plugin reads the file itself.
	archive := &sdk.FileArchive{
		Name: fswire.StagedFile, Mode: 0o600, UID: staged.UID, GID: staged.GID,
		ModTime: fi.ModTime(), Size: fi.Size(), Body: in,
	}
	if err := ar.PutArchive(ctx, f.Exec.SandboxRef(), path.Join(f.Stage, staged.Name), archive); err != nil {
		_ = s.finish(nil) // the staging directory goes
		if _, serr := in.Seek(0, io.SeekStart); unsupported(err) && serr == nil {
			return "", false, nil // streamed instead, from the start
		}
		if strings.Contains(err.Error(), "no space left on device") || strings.Contains(err.Error(), "disk quota exceeded") {
			// The engine's words: the staging directory's disk is full.
			return "", true, &fswire.Error{Kind: fswire.KindNoSpace, Msg: fmt.Sprintf("cannot write %s: the sandbox's disk is full; free space in the sandbox (or give it a bigger disk) and try again", fswire.Name(s.resp.Path))}
		}
		return "", true, fmt.Errorf("copy %s into the sandbox: %w", in.Name(), err)
	}
	resp, err := s.then(fswire.Request{Op: fswire.OpPlace})
	return resp.Path, true, err
}

// getStaged writes the file the worker staged (e, in staging directory
// staged) to the host path target, whole, through the provider's archive
// copy: the archive must be that one regular file. The worker holding
// the staging directory removes it once the caller ends its session.
func (f *FS) getStaged(ctx context.Context, ar sdk.Archiver, e Entry, staged, target string) error {
	return replaceOnHost(e, target, func(out *os.File) error {
		// Through a plugin, the plugin takes the file out of the archive
		// and writes it to out itself.
		x := &sdk.FileFromArchive{Name: fswire.StagedFile, File: out}
		err := ar.GetArchive(ctx, f.Exec.SandboxRef(), path.Join(f.Stage, staged, fswire.StagedFile), x)
		if cerr := x.Close(); cerr != nil {
			err = cerr // the better reason: the archive was not the file
		}
		if err != nil {
			return fmt.Errorf("copy %s out of the sandbox: %w", e.Name, err)
		}
		return nil
	})
}

// tempBeside is a new file's name beside target.
func tempBeside(target string) string {
	var nb [8]byte
	_, _ = rand.Read(nb[:])
	return fswire.TempName(filepath.Dir(target), filepath.Base(target), binary.LittleEndian.Uint64(nb[:]))
}
