// Package runstore is this host's record of the runs whose work is still
// in a sandbox: a run that failed or was interrupted after its agent
// started keeps its worktree, and its record says where that work is and
// what it started from, so `amelia results` can bring it back and `amelia
// stop` knows what removing a sandbox would lose.
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

// State is what became of a run's work.
type State string

const (
	// Running: the agent was started detached in the sandbox and has not
	// been seen to end; `amelia attach` follows it.
	Running State = "running"
	// Kept: the run failed or was interrupted after its agent started;
	// the work is committed on its branch in the sandbox, not on the host.
	Kept State = "kept"
	// Delivered: the branch reached the host (or the origin), and the
	// worktree was kept on request (--keep-worktree); removing it loses
	// nothing.
	Delivered State = "delivered"
)

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
	p, err := s.path(r.Profile, r.Workflow)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the record of %s: %w", r.Workflow, err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("record run %s: %w", r.Workflow, err)
	}
	if err := atomicwriter.WriteFile(p, append(b, '\n'), 0o600); err != nil {
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
