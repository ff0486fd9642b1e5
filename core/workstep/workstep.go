// Package workstep holds the typed requests a workspace sends
// amelia-worker in the sandbox for the steps of a run inside it, in place
// of shell scripts: each a Go value the host encodes and the worker
// decodes and serves in its own process, on a command session that is
// already open (envelope.Step), or, where there is none, as a process of
// its own (`amelia-worker step NAME ARGS`). Either way no shell runs, and
// no tool but git.
//
// A step that fails says which step and what failed on stderr and exits
// non-zero; the codes of Exit* say what the host may conclude.
package workstep

import (
	"encoding/json"
	"fmt"

	"github.com/amelia-sandbox/amelia/internal/envelope"
)

// Exit codes of a step, beyond 0 and 1 (it failed).
const (
	// ExitRefused: the step refused, for the reason on stderr (a branch
	// that exists, nothing to bundle...).
	ExitRefused = 3
	// ExitUnmade: the step failed before it made anything, so there is
	// nothing of its own to clean up.
	ExitUnmade = 4
)

// Request is the arguments of one step.
type Request interface {
	// Step is the step's name.
	Step() string
}

// Bulky is a Request that may carry much input or output: it goes in an
// exec of its own, whose streams are the transport's, rather than on a
// session, whose framing is slower for bulk.
type Bulky interface {
	Request
	Bulky() bool
}

// Encode is r as an envelope step.
func Encode(r Request) (envelope.Step, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return envelope.Step{}, fmt.Errorf("encode step %s: %w", r.Step(), err)
	}
	return envelope.Step{Name: r.Step(), Args: b}, nil
}

// Argv is the command that serves r as a process of its own: worker is
// amelia-worker's path in the sandbox.
func Argv(worker string, r Request) ([]string, error) {
	s, err := Encode(r)
	if err != nil {
		return nil, err
	}
	return []string{worker, "step", s.Name, string(s.Args)}, nil
}

// Refs lists the commit ids the sandbox's bare repository has refs to,
// one per line, under the workspace lock: another run may be making the
// repository. A repository not there yet has none.
type Refs struct {
	Root string `json:"root"` // the workspace's root, which holds the lock
	Repo string `json:"repo"`
}

func (Refs) Step() string { return "refs" }

// Receive makes the bare repository if it is not there, stores what the
// step's input carries (a bundle with Bundle, a pack with Pack, else
// nothing) and points each ref at its commit, under the workspace lock.
// Neither touches refs, so exactly the refs named are set. `git bundle
// unbundle` checks the bundle's prerequisites and indexes its pack (git
// index-pack: every object inflated and hashed); a Pack comes with its
// index, made where the pack was, so the sandbox only stores both.
type Receive struct {
	Root   string   `json:"root"`
	Repo   string   `json:"repo"`
	Bundle bool     `json:"bundle"`
	Pack   *Pack    `json:"pack,omitempty"`
	Refs   []RefTip `json:"refs"`
}

func (Receive) Step() string { return "receive" }

// Bulky: a bundle or a pack may be the whole repository.
func (r Receive) Bulky() bool { return r.Bundle || r.Pack != nil }

// Pack is a pack `git pack-objects` wrote with its index (version 2,
// SHA-1), the step's input: IdxSize bytes of the index, then PackSize
// bytes of the pack. The step checks both (their sizes, the pack's
// checksum, which is Name, and the index's) and stores them as the
// repository's objects/pack/pack-NAME.{pack,idx}, the index last.
type Pack struct {
	Name     string `json:"name"`
	IdxSize  int64  `json:"idx_size"`
	PackSize int64  `json:"pack_size"`
}

// RefTip is a ref and the commit it is to point at.
type RefTip struct {
	Name string `json:"name"`
	Oid  string `json:"oid"`
}

// Commit commits everything in the checkout Dir (the step runs as its
// owner) with Message and the identity in Env, unless nothing changed.
// Its output's first line is "committed" or "clean"; then, where the
// checkout has an exclude file, the untracked paths it leaves out, each
// as "ours PATH", and those the repository's own .gitignore files leave
// out, each as "theirs PATH".
type Commit struct {
	Dir     string   `json:"dir"`
	Message string   `json:"message"`
	Env     []string `json:"env"`
}

func (Commit) Step() string { return "commit" }

// HasWork prints "work" when Branch in the checkout Dir has moved from
// Base, else "none" (no checkout, no branch, or the branch at Base).
type HasWork struct {
	Dir    string `json:"dir"`
	Branch string `json:"branch"`
	Base   string `json:"base"`
}

func (HasWork) Step() string { return "has-work" }

// Bundle writes a bundle of Branch in the checkout Dir beyond Base to its
// output. It refuses (ExitRefused) when there is no checkout or no
// branch, and exits ExitUnmade when the branch is at Base: no changes.
type Bundle struct {
	Dir    string `json:"dir"`
	Branch string `json:"branch"`
	Base   string `json:"base"`
}

func (Bundle) Step() string { return "bundle" }

// Checkout makes the checkout of a workflow: the directory Dir (mode
// 0700; one already there is refused, ExitRefused), a repository of its
// own whose objects are the bare repository's Objects (alternates), on a
// new branch Branch at Start, with Exclude as its .git/info/exclude.
// Given Reuse, the checkout keeps what the parked checkout Reuse.From
// holds unchanged since its stamp, which is the step's input, and the
// step first ends every other process of its uid. Its output's first line
// is the uid it ran as; with Stamp, the checkout is made with umask 077
// and its stamp follows.
type Checkout struct {
	Dir     string `json:"dir"`
	Branch  string `json:"branch"`
	Start   string `json:"start"`
	Objects string `json:"objects"`
	Exclude string `json:"exclude,omitempty"`
	// Shared, the workspace's root, has the step first make its
	// worktrees/ and .amelia/runs/ (mode 1733): where runs have no uids.
	Shared string `json:"shared,omitempty"`
	Stamp  bool   `json:"stamp,omitempty"`
	Reuse  *Reuse `json:"reuse,omitempty"`
}

func (Checkout) Step() string { return "checkout" }

// Reuse is the parked checkout a Checkout starts from: From, made at
// Start of the bare repository Repo.
type Reuse struct {
	From  string `json:"from"`
	Repo  string `json:"repo"`
	Start string `json:"start"`
}

// Place moves the checkout a workflow's uid Owner made at
// ROOT/worktrees/From to ROOT/worktrees/ID, under the workspace lock, as
// `amelia-worker claim` does: what another uid put at that path is
// exchanged with it, and the output says "aside UID". It refuses
// (ExitRefused) to move a directory of the sandbox's user's. With Stamp,
// the step's input is the checkout's stamp, kept as
// ROOT/.amelia/stamps/ID.
type Place struct {
	Root  string `json:"root"`
	Owner int    `json:"owner"`
	From  string `json:"from"`
	ID    string `json:"id"`
	Stamp bool   `json:"stamp,omitempty"`
}

func (Place) Step() string { return "place" }

// EndUID ends every process of UID (a workflow's, which it runs as), but
// its own and its parent's (a session of the uid's that runs it), and
// removes the uid's files in the shared temporary directories; then it
// puts the
// workflow's checkout Checkout (only if it is a directory of the uid's)
// out of the way. With Trash, it makes that directory (0700) and moves
// the run directory RunDir into it as run, and the checkout to Park (a
// parked checkout) or, without Park, into it as checkout; without Trash,
// it removes the checkout.
type EndUID struct {
	UID      int    `json:"uid"`
	Checkout string `json:"checkout"`
	Trash    string `json:"trash,omitempty"`
	RunDir   string `json:"run_dir,omitempty"`
	Park     string `json:"park,omitempty"`
}

func (EndUID) Step() string { return "end-uid" }

// Allocate gives workflow ID a uid of First–Last and records it as
// ROOT/.amelia/users/ID, under the workspace lock, making the shared
// directories (worktrees/, .amelia/runs/, .amelia/parked/, mode 1733)
// first. It refuses (ExitRefused) when the workflow has a uid already.
// With Parking, a uid whose parked checkout was made of the repository of
// Start (the same first root commit) and has no trash left comes first,
// the newest; else the uid is the lowest that no record, parked checkout,
// trash or entry of IDFiles (the image's users and groups) holds. Its
// output: a line "sweep UID NAME" for each trash entry that no sweeper is
// removing, then the uid, then, for a parked checkout, "reuse NAME" and
// the checkout's stamp.
type Allocate struct {
	Root    string   `json:"root"`
	ID      string   `json:"id"`
	First   int      `json:"first"`
	Last    int      `json:"last"`
	IDFiles []string `json:"id_files"`
	Start   string   `json:"start"`
	Parking bool     `json:"parking,omitempty"`
}

func (Allocate) Step() string { return "allocate" }

// ExitUserLeft is Park's exit when the uid still has entries in
// worktrees/, .amelia/runs/ or .amelia/parked/ (beyond Trash and Name):
// its output lists them, each path ended by NUL, for the uid to move away.
const ExitUserLeft = 5

// Park is the sandbox's user's part of the end of a workflow (ID) whose
// uid UID moved its checkout to .amelia/parked/Name and what else it had
// into the trash entry .amelia/parked/Trash, under the workspace lock:
// where Parking and the checkout is stamped, it goes into the pool (its
// record .amelia/pool/UID), else into trash of its own; an empty trash
// entry goes at once, one that is not is recorded for the uid's sweeper;
// the dirty ref DirtyRef of Repo and the workflow's uid record Record go;
// and parked checkouts over Bound go into their uids' trash, the oldest
// first. Its output: a line "sweep UID NAME" for each trash entry a
// sweeper is to remove.
type Park struct {
	Root     string `json:"root"`
	Repo     string `json:"repo"`
	ID       string `json:"id"`
	UID      int    `json:"uid"`
	Name     string `json:"name"`
	Trash    string `json:"trash"`
	DirtyRef string `json:"dirty_ref"`
	Record   string `json:"record"`
	Parking  bool   `json:"parking,omitempty"`
	Bound    int    `json:"bound"`
}

func (Park) Step() string { return "park" }

// PruneParked tidies the parked checkouts of the workspace at Root that
// were parked more than OlderThan seconds ago (by the sandbox's clock),
// under the workspace lock: each goes into its uid's trash, as Park puts
// those over its bound, and its pool record goes; with Dry, nothing
// changes. A parked checkout holds no work: only one whose work was
// delivered, or had none, is parked. Its output: a line "parked UID NAME
// AGE" (AGE in seconds) for each such checkout, then, without Dry, a line
// "sweep UID NAME" for each trash entry a sweeper is to remove.
type PruneParked struct {
	Root      string `json:"root"`
	OlderThan int64  `json:"older_than"`
	Dry       bool   `json:"dry,omitempty"`
}

func (PruneParked) Step() string { return "prune-parked" }

// SharedDirs makes the directories Dirs (relative to Root) where every
// uid may make an entry and none may list or remove another's: mode 1733.
type SharedDirs struct {
	Root string   `json:"root"`
	Dirs []string `json:"dirs"`
}

func (SharedDirs) Step() string { return "shared-dirs" }

// Retire is the end of a workflow whose runs have no uid of their own
// (the sandbox's user runs them), under the workspace lock: the run
// directory RunDir ("": none) goes, at once when it holds few entries;
// the checkout Checkout and a run directory that holds more go into the
// trash entry .amelia/parked/Trash, which the record .amelia/trash/self
// lists and a sweeper the step starts (detached, as Sweep's) removes; the
// dirty ref DirtyRef of Repo goes. A checkout that is a linked worktree
// (made by an older amelia) stays, and the step's output is "legacy":
// the host removes it as a worktree.
type Retire struct {
	Root     string `json:"root"`
	Repo     string `json:"repo"`
	Checkout string `json:"checkout"`
	RunDir   string `json:"run_dir,omitempty"`
	Trash    string `json:"trash"`
	DirtyRef string `json:"dirty_ref"`
}

func (Retire) Step() string { return "retire" }

// Sweep starts, detached, the removal of the trash entries (in
// ROOT/.amelia/parked/) that the record Record lists, unless a sweeper of
// that record runs already (it holds Record.lock); the sweeper goes on
// while the record names more. The step returns once it started.
type Sweep struct {
	Root   string `json:"root"`
	Record string `json:"record"`
}

func (Sweep) Step() string { return "sweep" }

// WriteFile writes the step's input to Path, a file directly in Dir, for
// the worker to read later (a run's prompt): Dir is made if need be, the
// user's alone (0700, not a link; it fails when another user owns it),
// and Path is made anew, 0600, whatever was there (a leftover with a
// wider mode is not reused). What it writes never reaches a command line.
type WriteFile struct {
	Dir  string `json:"dir"`
	Path string `json:"path"`
}

func (WriteFile) Step() string { return "write-file" }
