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

	"github.com/amelia-sandbox/amelia/plugins/sdk/envelope"
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

// Receive makes the bare repository if it is not there, stores the
// bundle on the step's input (if Bundle) and points each ref at its
// commit, under the workspace lock. `git bundle unbundle` checks the
// bundle's prerequisites and stores its pack without touching refs, so
// exactly the refs named are set.
type Receive struct {
	Root   string   `json:"root"`
	Repo   string   `json:"repo"`
	Bundle bool     `json:"bundle"`
	Refs   []RefTip `json:"refs"`
}

func (Receive) Step() string { return "receive" }

// Bulky: a bundle may be the whole repository.
func (r Receive) Bulky() bool { return r.Bundle }

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

// EndUID ends every process of the uid it runs as (a workflow's), but its
// own and its parent's (a session of the uid's that runs it), and removes
// the uid's files in the shared temporary directories; then it puts the
// workflow's checkout Checkout (only if it is a directory of the uid's)
// out of the way. With Trash, it makes that directory (0700) and moves
// the run directory RunDir into it as run, and the checkout to Park (a
// parked checkout) or, without Park, into it as checkout; without Trash,
// it removes the checkout.
type EndUID struct {
	Checkout string `json:"checkout"`
	Trash    string `json:"trash,omitempty"`
	RunDir   string `json:"run_dir,omitempty"`
	Park     string `json:"park,omitempty"`
}

func (EndUID) Step() string { return "end-uid" }
