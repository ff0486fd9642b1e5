// Package fswire is the file protocol between the host (core/sandboxfs)
// and `amelia-worker files` in a sandbox, and the directory-tree
// archive both ends write and read.
//
// One exec of the worker serves one request. The host writes a Request
// as one JSON line on the worker's stdin; for OpWrite and OpUnpack the
// file's bytes, or the tree's tar stream, follow on stdin until its end.
// The worker answers with one Response line on stdout; for OpRead and
// OpPack the file's bytes (Entry.Size of them), or the tree's tar
// stream, follow on stdout. A request that fails before any byte
// streams gets a Response with Error and exit code 1; one that fails
// while streaming exits 1 with the reason as one line on stderr. No path
// or byte goes through argv.
package fswire

import (
	"encoding/json"
	"io/fs"
	"syscall"
	"time"
)

// Operations.
const (
	OpStat   = "stat"   // Response.Entry
	OpList   = "list"   // Response.Entries, a directory's, in name order
	OpRead   = "read"   // Response.Entry, then the file's bytes
	OpWrite  = "write"  // the bytes on stdin, into a new file renamed into place
	OpRemove = "remove" // a file, symbolic link or empty directory; Recursive: a tree
	OpPack   = "pack"   // Response.Entry, then a file's bytes, or a directory's tar stream
	OpUnpack = "unpack" // a tar stream on stdin, into a directory
	// Staging, for a provider that copies archives itself (sdk.Archiver).
	// The worker holds a staging directory while its stdin is open (see
	// Holds), and removes it when stdin ends, so that nothing is left
	// behind by a copy that failed or a host that is gone:
	//
	//   - OpStageIn checks that a write to Path could go there, and makes
	//     a private directory in Request.Stage for the provider to put the
	//     file StagedFile in (Response.Staged, with the uid and gid to give
	//     it). A second request line on stdin, OpPlace, then moves that
	//     file to Path (a rename, no copy) and answers as OpWrite does.
	//   - OpPack with Stage stages a regular file of StageMin bytes or more
	//     instead of streaming it: a hard link to the file it opened, in a
	//     private directory, for the provider to get (Response.Staged).
	OpStageIn = "stage-in"
	OpPlace   = "place"
)

// Holds reports whether the worker, serving req, keeps its stdin open
// for as long as it holds what it may stage.
func (req Request) Holds() bool {
	return req.Op == OpStageIn || req.Op == OpPack && req.Stage != ""
}

// StagedFile is the name of the file in a staging directory.
const StagedFile = "file"

// MaxRequest bounds a request line.
const MaxRequest = 64 << 10

// Request is one file request.
type Request struct {
	Op string `json:"op"`
	// Path is relative to the worker's root, or absolute under it.
	Path string `json:"path"`
	// Mode is the permission bits of a file OpWrite writes (0: those of
	// the file it replaces, else 0644).
	Mode uint32 `json:"mode,omitempty"`
	// Into: for OpWrite and OpUnpack, when Path is a directory already,
	// the file or tree goes in it under this name (one path element), as
	// docker cp does.
	Into string `json:"into,omitempty"`
	// Recursive lets OpRemove remove a directory and all in it.
	Recursive bool `json:"recursive,omitempty"`
	// Stage is the absolute directory the staging directories are made
	// in (the workspace's .amelia/stage), for OpStageIn and a staging
	// OpPack.
	Stage string `json:"stage,omitempty"`
	// StageMin is the smallest file a staging OpPack stages.
	StageMin int64 `json:"stage_min,omitempty"`
}

// Staged is a staging directory the worker made.
type Staged struct {
	// Name is its name in Request.Stage.
	Name string `json:"name"`
	// UID and GID are who the file put there must belong to.
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// Entry types.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeOther   = "other"
)

// Entry is a file, directory or link.
type Entry struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"`
	Mode   uint32    `json:"mode"` // permission bits (and setgid/sticky for directories)
	Size   int64     `json:"size"`
	MTime  time.Time `json:"mtime"`
	Target string    `json:"target,omitempty"` // a symbolic link's
	// UID and GID own it (numbers: names are the sandbox's own).
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// FileMode is e's mode as io/fs has it.
func (e Entry) FileMode() fs.FileMode {
	m := fs.FileMode(e.Mode) & (fs.ModePerm)
	switch e.Type {
	case TypeDir:
		m |= fs.ModeDir
	case TypeSymlink:
		m |= fs.ModeSymlink
	case TypeOther:
		m |= fs.ModeIrregular
	}
	return m
}

// EntryOf describes fi, named name.
func EntryOf(name string, fi fs.FileInfo) Entry {
	e := Entry{Name: name, Mode: uint32(fi.Mode().Perm()), Size: fi.Size(), MTime: fi.ModTime().UTC()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = TypeFile
	case fi.IsDir():
		e.Type, e.Size = TypeDir, 0
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = TypeSymlink
	default:
		e.Type = TypeOther
	}
	return e
}

// Error kinds, so that the host can tell them apart.
const (
	KindNotFound   = "not-found"
	KindOutside    = "outside"    // the path leaves the root, by name or through a link
	KindIsDir      = "is-dir"     // a file was wanted
	KindNotDir     = "not-dir"    // a directory was wanted (a directory onto a file)
	KindNoSpace    = "no-space"   // the sandbox's disk is full
	KindPermission = "permission" // denied
	KindExists     = "exists"     // a directory that is not empty, say
	KindBadInput   = "bad-request"
)

// Response is the worker's answer line.
type Response struct {
	// Error is a one-line message saying what was wrong and what to do;
	// Kind classifies it.
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Entry *Entry `json:"entry,omitempty"`
	// Entries are a directory's (OpList).
	Entries []Entry `json:"entries,omitempty"`
	// Path is where OpWrite or OpUnpack put it, relative to the root.
	Path string `json:"path,omitempty"`
	// Staged is the staging directory OpStageIn, or a staging OpPack,
	// made.
	Staged *Staged `json:"staged,omitempty"`
}

// Line is v as one JSON line.
func Line(v any) []byte {
	b, _ := json.Marshal(v)
	return append(b, '\n')
}
