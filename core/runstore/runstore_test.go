package runstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/runstore"
)

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s := runstore.New(dir)
	kept := runstore.Record{Workflow: "fix-1", Profile: "dev", Provider: "docker", Repo: "/src/app",
		BaseBranch: "main", BaseCommit: "abc", Branch: "amelia/fix-1", Worktree: "/workspace/worktrees/fix-1",
		State: runstore.Kept, Reason: "agent: boom", Ended: time.Date(2026, 11, 24, 17, 0, 0, 0, time.UTC)}
	other := kept
	other.Profile = "remote"
	for _, r := range []runstore.Record{kept, other} {
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.Get("dev", "fix-1"); err != nil || got != kept {
		t.Errorf("Get = %+v, %v; want %+v", got, err, kept)
	}
	if got, err := s.Find("fix-1"); err != nil || len(got) != 2 || got[0].Profile != "dev" || got[1].Profile != "remote" {
		t.Errorf("Find = %+v, %v; want the records of dev and remote", got, err)
	}
	if got, err := s.Of("dev"); err != nil || len(got) != 1 {
		t.Errorf("Of(dev) = %+v, %v", got, err)
	}
	if got, err := s.All(); err != nil || len(got) != 2 || got[0].Profile != "dev" || got[1].Profile != "remote" {
		t.Errorf("All = %+v, %v; want the records of dev and remote", got, err)
	}
	if err := s.Delete("dev", "fix-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("dev", "fix-1"); err != nil {
		t.Errorf("a second Delete = %v, want nil", err)
	}
	if _, err := s.Get("dev", "fix-1"); !errors.Is(err, runstore.ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	// Nothing but records is left behind, and they are private.
	fi, err := os.Stat(filepath.Join(dir, "remote"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("record directory: %v %v, want mode 0700", fi.Mode(), err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*", ".tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
}

func TestStoreRefusesPaths(t *testing.T) {
	s := runstore.New(t.TempDir())
	for _, name := range []string{"", ".", "..", "a/b", `a\b`} {
		if err := s.Put(runstore.Record{Workflow: "w", Profile: name}); err == nil {
			t.Errorf("Put with profile %q succeeded", name)
		}
		if _, err := s.Get("p", name); err == nil || errors.Is(err, runstore.ErrNotFound) {
			t.Errorf("Get of workflow %q = %v, want a refusal", name, err)
		}
	}
}

// A record keeps the model its agent runs with; one written before
// records had it reads as the profile's ("").
func TestStoreModel(t *testing.T) {
	dir := t.TempDir()
	s := runstore.New(dir)
	rec := runstore.Record{Workflow: "echo-1", Profile: "dev", State: runstore.Running, Model: "scripted:/home/dev/turns.json"}
	if err := s.Put(rec); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("dev", "echo-1"); err != nil || got.Model != rec.Model {
		t.Errorf("Get = %+v, %v; want model %q", got, err, rec.Model)
	}
	older := `{"workflow": "old-1", "profile": "dev", "provider": "docker", "repo": "/src/app",
  "base_branch": "main", "base_commit": "abc", "branch": "amelia/old-1",
  "worktree": "/workspace/worktrees/old-1", "state": "running", "run_dir": "/workspace/.amelia/runs/old-1-x",
  "proxy_token": "tok", "ended": "2026-11-24T17:00:00Z"}
`
	if err := os.WriteFile(filepath.Join(dir, "dev", "old-1.json"), []byte(older), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("dev", "old-1")
	if err != nil || got.Model != "" || got.State != runstore.Running || got.RunDir == "" || got.ProxyToken != "tok" {
		t.Errorf("an older record: %+v, %v; want it read whole, with no model", got, err)
	}
}

// A record names the sandbox its run used; one written by a version
// before it (no "sandbox" key) names the sandbox of those versions, the
// profile's name.
func TestRecordSandboxName(t *testing.T) {
	dir := t.TempDir()
	s := runstore.New(dir)
	if err := os.MkdirAll(filepath.Join(dir, "dev"), 0o700); err != nil {
		t.Fatal(err)
	}
	old := `{"workflow": "old-1", "profile": "dev", "provider": "docker", "branch": "amelia/old-1", "state": "kept"}`
	if err := os.WriteFile(filepath.Join(dir, "dev", "old-1.json"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := runstore.Record{Workflow: "new-1", Profile: "dev", Provider: "docker", Sandbox: "dev-1a2b3c4d", Config: "/home/me/.config/amelia/config.yaml", State: runstore.Kept}
	if err := s.Put(rec); err != nil {
		t.Fatal(err)
	}
	for wf, want := range map[string]string{"old-1": "dev", "new-1": "dev-1a2b3c4d"} {
		got, err := s.Get("dev", wf)
		if err != nil || got.SandboxName() != want {
			t.Errorf("the sandbox of %s: %q, %v; want %q", wf, got.SandboxName(), err, want)
		}
	}
	if got, _ := s.Get("dev", "new-1"); got != rec {
		t.Errorf("Get = %+v, want %+v", got, rec)
	}
}

// TestCreateRacers: of runs of one workflow starting at once, exactly one
// records itself; the others get ErrExists and the winner's record is
// left as it wrote it, never half-written.
func TestCreateRacers(t *testing.T) {
	s := runstore.New(t.TempDir())
	const racers = 16
	errs := make(chan error, racers)
	for i := range racers {
		go func() {
			errs <- s.Create(runstore.Record{Workflow: "fix-1", Profile: "dev", State: runstore.Checked, RunID: string(rune('a' + i))})
		}()
	}
	won := 0
	for range racers {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, runstore.ErrExists):
			t.Errorf("Create lost with %v, want ErrExists", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d runs recorded themselves, want 1", won)
	}
	got, err := s.Get("dev", "fix-1")
	if err != nil || got.State != runstore.Checked || got.RunID == "" {
		t.Errorf("the winner's record = %+v, %v", got, err)
	}
	if recs, err := s.Of("dev"); err != nil || len(recs) != 1 {
		t.Errorf("Of = %+v, %v; want the one record, no temporary file", recs, err)
	}
	// A kept run's record is never replaced by a new run's.
	kept := got
	kept.State = runstore.Kept
	if err := s.Put(kept); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(runstore.Record{Workflow: "fix-1", Profile: "dev", State: runstore.Checked}); !errors.Is(err, runstore.ErrExists) {
		t.Errorf("Create over kept work = %v, want ErrExists", err)
	}
	if got, _ := s.Get("dev", "fix-1"); got.State != runstore.Kept {
		t.Errorf("the kept record became %+v", got)
	}
}

func TestStateKinds(t *testing.T) {
	for _, tc := range []struct {
		s                                runstore.State
		preparing, agentMayRun, holdWork bool
	}{
		{runstore.Checked, true, false, false},
		{runstore.SandboxUp, true, false, false},
		{runstore.AgentStarted, false, true, true},
		{runstore.Running, false, true, true},
		{runstore.Ended, false, false, true},
		{runstore.Stopped, false, false, true},
		{runstore.Kept, false, false, true},
		{runstore.Delivered, false, false, false},
		{runstore.Discarded, false, false, false},
	} {
		if got := tc.s.Preparing(); got != tc.preparing {
			t.Errorf("%s.Preparing() = %v", tc.s, got)
		}
		if got := tc.s.AgentMayRun(); got != tc.agentMayRun {
			t.Errorf("%s.AgentMayRun() = %v", tc.s, got)
		}
		if got := tc.s.HoldsWork(); got != tc.holdWork {
			t.Errorf("%s.HoldsWork() = %v", tc.s, got)
		}
	}
}
