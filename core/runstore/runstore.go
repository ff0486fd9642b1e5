// Package runstore is this host's record of its runs in progress and of
// those whose work is still in a sandbox: each record says where its run
// is in its life (State), where its work is and what it started from, so
// `amelia attach` can take a run over, `amelia results` can bring kept
// work back, and `amelia stop` knows what removing a sandbox would lose.
//
// A record is one small JSON file, DIR/<profile>/<workflow>.json, mode
// 0600 in a 0700 directory, written whole through a temporary file and a
// rename: a reader never sees half of one. The record of a running run
// holds its proxy token, so that a host process that attaches to it later
// can serve the worker that holds that token; the token opens nothing but
// a proxy this host runs for that run, and leaves the record when the run
// ends. No record holds an API key or a git token.
package runstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/sys/atomicwriter"
)

// State is where a run is in its life, as its host last wrote it down: a
// run's record is written when it is checked and again at each step, so
// that whatever becomes of the host, the record says what the sandbox may
// hold. A run goes Checked → SandboxUp → AgentStarted → Running → Ended
// (or Stopped), then ends Delivered, Kept or Discarded; a run that fails
// before its agent starts goes from Checked or SandboxUp to Discarded.
type State string

const (
	// Checked: the run was checked and is starting its sandbox; nothing
	// of it is in the sandbox yet.
	Checked State = "checked"
	// SandboxUp: the sandbox is up and the run prepares it (the worker,
	// the tunnel, its checkout); no agent has touched the checkout.
	SandboxUp State = "sandbox-up"
	// AgentStarted: the agent is being started detached in the sandbox,
	// in RunDir; it may be running.
	AgentStarted State = "agent-started"
	// Running: the agent was started detached in the sandbox and has not
	// been seen to end; `amelia attach` follows it.
	Running State = "running"
	// Ended: the agent ended by itself; its work, in the sandbox, is not
	// yet on the host.
	Ended State = "ended"
	// Stopped: the run stopped its agent before it ended (Ctrl-C, a
	// worker that broke the protocol); its work, in the sandbox, is not
	// yet kept.
	Stopped State = "stopped"
	// Kept: the run failed or was interrupted after its agent started;
	// the work is committed on its branch in the sandbox, not on the host.
	Kept State = "kept"
	// Delivered: the branch reached the host (or the origin), and the
	// worktree was kept on request (--keep-worktree); removing it loses
	// nothing.
	Delivered State = "delivered"
	// Discarded: the run ended with no work to keep, and its checkout
	// could not be removed from the sandbox; removing it loses nothing.
	Discarded State = "discarded"
	// Exported: amelia gc exported the run's kept work to a bundle on
	// this host (Record.Export) and removed it from the sandbox: the
	// sandbox holds nothing of it; `amelia results` brings the branch
	// back from the bundle.
	Exported State = "exported"
)

// Preparing says the run's agent has not started: nothing in the sandbox
// is its work.
func (s State) Preparing() bool { return s == Checked || s == SandboxUp }

// AgentMayRun says the run's agent may be running in the sandbox: it is
// followed (attach), not removed.
func (s State) AgentMayRun() bool { return s == AgentStarted || s == Running }

// HoldsWork says the sandbox may hold work of the run that is on no host:
// removing the sandbox would lose it.
func (s State) HoldsWork() bool {
	return s.AgentMayRun() || s == Ended || s == Stopped || s == Kept
}

// Record is one run's work in a sandbox.
type Record struct {
	Workflow string `json:"workflow"`
	Profile  string `json:"profile"`
	// Provider is the provider the run used (--sandbox may differ from
	// the profile's).
	Provider string `json:"provider"`
	// Sandbox is the name of the sandbox the run used (sandbox.Name);
	// empty in the records of versions before it, whose sandboxes were
	// named for their profile (see SandboxName).
	Sandbox string `json:"sandbox,omitempty"`
	// Config is the amelia.config label of the config file the run was
	// made from (a run of another is not this config's); empty in the
	// records of versions before it.
	Config string `json:"config,omitempty"`
	// Repo is the host checkout the run started from, or its URL.
	Repo string `json:"repo"`
	// BaseBranch and BaseCommit are what the workflow branch started from.
	BaseBranch string `json:"base_branch"`
	BaseCommit string `json:"base_commit"`
	// StartCommit is the commit the worktree started from: BaseCommit, or
	// the one carrying the host's uncommitted changes on top of it.
	StartCommit string `json:"start_commit,omitempty"`
	// Push: the run pushes its branch to the origin of its URL.
	Push   bool   `json:"push,omitempty"`
	Branch string `json:"branch"`
	// Worktree is the worktree's directory inside the sandbox.
	Worktree string `json:"worktree"`
	State    State  `json:"state"`
	// RunDir is the detached run's directory in the sandbox: its prompt,
	// its message log, how it ended.
	RunDir string `json:"run_dir,omitempty"`
	// Worker is the amelia-worker inside the sandbox that started the
	// agent: it answers for the run (status, follow, stop).
	Worker string `json:"worker,omitempty"`
	// RunID names the run at the proxy (its audit log).
	RunID string `json:"run_id,omitempty"`
	// ProxyToken is the run token the agent holds: only while Running,
	// for attach to serve it again. (Where the agent reaches the proxy is
	// its supervisor's to keep: see driver.DetachOptions.Tunnel.)
	ProxyToken string `json:"proxy_token,omitempty"`
	// Model is the model the agent runs with, as amelia run was given it
	// (--model, else the profile's): a scripted one ("scripted:echo",
	// "scripted:/abs/script.json") is played on the host again by the
	// process that attaches. Records written before it was kept have "":
	// the profile's upstream then answers.
	Model string `json:"model,omitempty"`
	// Title is the commit message's first line for the agent's work.
	Title string `json:"title,omitempty"`
	// Export is the bundle on this host holding the run's branch, once
	// amelia gc exported it (State Exported).
	Export string `json:"export,omitempty"`
	// Reason is why the run ended without delivering (its error).
	Reason string    `json:"reason,omitempty"`
	Ended  time.Time `json:"ended"`
}

// SandboxName is the name of the sandbox that holds the run's work: the
// recorded one, or for a record of an older version the profile's name.
func (r Record) SandboxName() string {
	if r.Sandbox != "" {
		return r.Sandbox
	}
	return r.Profile
}

// Store is the records under one directory.
type Store struct{ dir string }

// New is the store in dir (created when the first record is written).
func New(dir string) *Store { return &Store{dir: dir} }

// ErrNotFound: no record matches.
var ErrNotFound = errors.New("no such run")

func (s *Store) path(profile, workflow string) (string, error) {
	return namedPath("run record", s.dir, profile, workflow, ".json", false)
}

// namedPath is dir/profile/workflow+ext, the file of what (a run record,
// a run log) of workflow in profile. It refuses a profile or workflow that
// is not a plain file name, and with noDot one starting with ".".
func namedPath(what, dir, profile, workflow, ext string, noDot bool) (string, error) {
	for _, n := range []string{profile, workflow} {
		if n == "" || n == "." || n == ".." || noDot && strings.HasPrefix(n, ".") || strings.ContainsAny(n, "/\\\x00") {
			return "", fmt.Errorf("%s: %q cannot be a file name", what, n)
		}
	}
	return filepath.Join(dir, profile, workflow+ext), nil
}

// Put writes r, replacing any record of its profile and workflow.
func (s *Store) Put(r Record) error {
	p, b, err := s.encode(r)
	if err != nil {
		return err
	}
	if err := atomicwriter.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("record run %s: %w", r.Workflow, err)
	}
	return nil
}

// encode is r's file, its directory made, and what the file holds.
func (s *Store) encode(r Record) (string, []byte, error) {
	p, err := s.path(r.Profile, r.Workflow)
	if err != nil {
		return "", nil, err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", nil, fmt.Errorf("encode the record of %s: %w", r.Workflow, err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", nil, fmt.Errorf("record run %s: %w", r.Workflow, err)
	}
	return p, append(b, '\n'), nil
}

// ErrExists: Create found a record of the run's profile and workflow.
var ErrExists = errors.New("the run is recorded already")

// Create writes r, which must be the first record of its profile and
// workflow: when there is one, of a run that may have work in the sandbox,
// it leaves it as it is and returns ErrExists. Two runs of one workflow
// racing to start, one of them wins.
func (s *Store) Create(r Record) error {
	p, b, err := s.encode(r)
	if err != nil {
		return err
	}
	// Written whole to a file of its own, then linked into place: a link
	// fails on an existing name, and a reader never sees half of it.
	tmp, err := os.CreateTemp(filepath.Dir(p), ".create-*")
	if err != nil {
		return fmt.Errorf("record run %s: %w", r.Workflow, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), p)
	}
	switch {
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("run %s of profile %s: %w", r.Workflow, r.Profile, ErrExists)
	case err != nil:
		return fmt.Errorf("record run %s: %w", r.Workflow, err)
	}
	return nil
}

// Get reads the record of workflow in profile; ErrNotFound when none.
func (s *Store) Get(profile, workflow string) (Record, error) {
	p, err := s.path(profile, workflow)
	if err != nil {
		return Record{}, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, fmt.Errorf("run %s of profile %s: %w", workflow, profile, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("read the record of run %s: %w", workflow, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, fmt.Errorf("read the record of run %s (%s): %w", workflow, p, err)
	}
	return r, nil
}

// Updated is when the record of workflow in profile was last written:
// when its run last changed state, as its host saw it.
func (s *Store) Updated(profile, workflow string) (time.Time, error) {
	p, err := s.path(profile, workflow)
	if err != nil {
		return time.Time{}, err
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, fmt.Errorf("run %s of profile %s: %w", workflow, profile, ErrNotFound)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read the record of run %s: %w", workflow, err)
	}
	return st.ModTime(), nil
}

// Delete removes the record of workflow in profile; a missing one is fine.
func (s *Store) Delete(profile, workflow string) error {
	p, err := s.path(profile, workflow)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the record of run %s: %w", workflow, err)
	}
	return nil
}

// Find returns the records of workflow, of every profile, by profile name.
func (s *Store) Find(workflow string) ([]Record, error) {
	var out []Record
	for _, profile := range subdirs(s.dir) {
		r, err := s.Get(profile, workflow)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Of returns the records of profile, by workflow.
func (s *Store) Of(profile string) ([]Record, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, profile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the run records of profile %s: %w", profile, err)
	}
	var out []Record
	for _, e := range entries {
		wf, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		r, err := s.Get(profile, wf)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// All returns every record, by profile, then by workflow.
func (s *Store) All() ([]Record, error) {
	var out []Record
	for _, profile := range subdirs(s.dir) {
		recs, err := s.Of(profile)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}
