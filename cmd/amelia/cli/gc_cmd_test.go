package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/runstore"
)

// age sets the modification time of each path to ago before now.
func age(t *testing.T, ago time.Duration, paths ...string) {
	t.Helper()
	when := time.Now().Add(-ago)
	for _, p := range paths {
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
}

// ageLocalSandbox makes the local sandbox of profile look created ago
// before now, as its marker says.
func ageLocalSandbox(t *testing.T, home, profile string, ago time.Duration) {
	t.Helper()
	markers, _ := filepath.Glob(filepath.Join(home, ".local", "state", "amelia", "local", profile+"*", ".amelia-sandbox"))
	if len(markers) != 1 {
		t.Fatalf("the local sandbox of %s: markers %v, want one", profile, markers)
	}
	b, err := os.ReadFile(markers[0])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["created"] = time.Now().Add(-ago).UTC().Format(time.RFC3339Nano)
	b, _ = json.Marshal(m)
	if err := os.WriteFile(markers[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// tree lists every file under dir with its mode and time: what a dry run
// must leave as it was.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || strings.Contains(p, string(filepath.Separator)+"amc-") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		// A directory's time is left out: reusing a running sandbox, as
		// sandbox up does, may touch its directory (the local provider's
		// marker check), which changes nothing of what is in it.
		if d.IsDir() {
			out = append(out, p+" "+info.Mode().String())
		} else {
			out = append(out, p+" "+info.ModTime().String()+" "+info.Mode().String())
		}
		return nil
	})
	slices.Sort(out)
	return out
}

// amelia gc on the local provider, whose sandboxes are directories here:
// past retention, the record of a run whose sandbox is gone is forgotten,
// logs and audit logs go, an empty orphan goes, a worker of another
// version goes; a running run, its audit log and its worker, an orphan
// holding a checkout, and what is within retention stay. --dry-run says
// the same and changes nothing.
func TestGC(t *testing.T) {
	e := newEnv(t)
	const day = 24 * time.Hour
	e.writeConfig(t, "default_profile: a\nprofiles:\n  a:\n    retention: 10d\n    sandbox: {provider: local}\n  empty:\n    sandbox: {provider: local}\n  busy:\n    sandbox: {provider: local}\n")
	for _, p := range []string{"a", "empty", "busy"} {
		if r := amelia(t, "", "--profile", p, "sandbox", "up"); r.code != 0 {
			t.Fatalf("up %s: %s", p, r.stderr)
		}
	}
	if r := amelia(t, "", "--profile", "busy", "sandbox", "exec", "--", "mkdir", "-p", "worktrees/wip-1"); r.code != 0 {
		t.Fatalf("mkdir: %s", r.stderr)
	}
	// Two profiles removed: their sandboxes are orphans, a month old.
	e.writeConfig(t, "default_profile: a\nprofiles:\n  a:\n    retention: 10d\n    sandbox: {provider: local}\n")
	ageLocalSandbox(t, e.home, "empty", 30*day)
	ageLocalSandbox(t, e.home, "busy", 30*day)

	state := filepath.Join(e.home, ".local", "state", "amelia")
	store := runstore.New(filepath.Join(state, "runs"))
	// The local sandbox's worker directory: $HOME/.amelia/bin of its home.
	homes, _ := filepath.Glob(filepath.Join(state, "local", "a-*", "home"))
	if len(homes) != 1 {
		t.Fatalf("the local sandbox of a: %v", homes)
	}
	worker := filepath.Join(homes[0], ".amelia", "bin")
	recs := []runstore.Record{
		{Profile: "a", Workflow: "lost", Provider: "local", Sandbox: "a-0badc0de", State: runstore.Kept},
		{Profile: "a", Workflow: "young", Provider: "local", Sandbox: "a-0badc0de", State: runstore.Delivered},
		{Profile: "a", Workflow: "busy", Provider: "local", Sandbox: "a-0badc0de", State: runstore.Running, RunID: "r-busy", Worker: filepath.Join(worker, "amelia-worker-2222222222222222")},
	}
	for _, r := range recs {
		if err := store.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]time.Duration{
		filepath.Join(state, "logs", "a", "old.jsonl"):                  20 * day,
		filepath.Join(state, "logs", "a", ".dead.0123456789ab.partial"): 20 * day,
		filepath.Join(state, "logs", "a", "new.jsonl"):                  day,
		filepath.Join(state, "logs", "a", "busy.jsonl"):                 20 * day,
		filepath.Join(state, "audit", "r-old.jsonl"):                    20 * day,
		filepath.Join(state, "audit", "r-busy.jsonl"):                   20 * day,
		filepath.Join(state, "audit", "notes.txt"):                      20 * day,
		filepath.Join(worker, "amelia-worker-0000000000000000"):         20 * day,
		filepath.Join(worker, "amelia-worker-1111111111111111"):         day,
		filepath.Join(worker, "amelia-worker-2222222222222222"):         20 * day,
		filepath.Join(worker, "amelia-worker-not-one-of-ours"):          20 * day,
		filepath.Join(state, "runs", "a", "lost.json"):                  11 * day,
		filepath.Join(state, "runs", "a", "young.json"):                 9 * day,
		filepath.Join(state, "runs", "a", "busy.json"):                  30 * day,
	}
	for p, ago := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err != nil {
			if err := os.WriteFile(p, []byte("{}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		age(t, ago, p)
	}

	before := tree(t, e.home)
	var transcript strings.Builder
	run := func(code int, args ...string) {
		t.Helper()
		r := amelia(t, "", args...)
		if r.code != code {
			t.Errorf("amelia %s: exit %d, want %d (stderr %q)", strings.Join(args, " "), r.code, code, r.stderr)
		}
		// Items come in the order gc finds them; the lines are sorted
		// within each command, for a stable transcript.
		lines := strings.Split(strings.TrimSpace(r.stdout+r.stderr), "\n")
		slices.Sort(lines)
		transcript.WriteString("$ amelia " + strings.Join(args, " ") + "\n" + strings.Join(lines, "\n") + "\n")
	}
	run(0, "gc", "--dry-run")
	if after := tree(t, e.home); !slices.Equal(before, after) {
		t.Errorf("gc --dry-run changed files:\nbefore %q\nafter  %q", before, after)
	}
	run(0, "gc")
	run(0, "gc")
	run(0, "gc", "--older-than", "1h", "--dry-run")
	run(2, "gc", "--older-than", "soon")
	golden(t, "gc", e.normalize(transcript.String()))

	gone := []string{"logs/a/old.jsonl", "logs/a/.dead.0123456789ab.partial", "audit/r-old.jsonl", "runs/a/lost.json"}
	kept := []string{"logs/a/new.jsonl", "logs/a/busy.jsonl", "audit/r-busy.jsonl", "audit/notes.txt", "runs/a/young.json", "runs/a/busy.json"}
	for _, f := range gone {
		if _, err := os.Stat(filepath.Join(state, f)); !os.IsNotExist(err) {
			t.Errorf("%s is still there after gc: %v", f, err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(filepath.Join(state, f)); err != nil {
			t.Errorf("%s is gone after gc: %v", f, err)
		}
	}
	for name, want := range map[string]bool{"0000000000000000": false, "1111111111111111": true, "2222222222222222": true, "not-one-of-ours": true} {
		if _, err := os.Stat(filepath.Join(worker, "amelia-worker-"+name)); (err == nil) != want {
			t.Errorf("worker %s there after gc: %v, want %v", name, err == nil, want)
		}
	}
	for profile, want := range map[string]bool{"empty": false, "busy": true} {
		m, _ := filepath.Glob(filepath.Join(state, "local", profile+"*", ".amelia-sandbox"))
		if (len(m) == 1) != want {
			t.Errorf("orphan %s there after gc: %v, want %v", profile, m, want)
		}
	}
}

// amelia results --discard drops an export with its record; a record
// naming a file that is not one of this host's exports is refused, and
// the file stays.
func TestResultsOfAnExport(t *testing.T) {
	e := newEnv(t)
	e.writeConfig(t, "profiles:\n  a:\n    sandbox: {provider: local}\n")
	state := filepath.Join(e.home, ".local", "state", "amelia")
	store := runstore.New(filepath.Join(state, "runs"))
	p, err := runstore.NewExports(filepath.Join(state, "exports")).Write("a", "wf", []byte("# v2 git bundle\n"))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "precious.bundle")
	if err := os.WriteFile(elsewhere, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	for wf, export := range map[string]string{"wf": p, "forged": elsewhere} {
		if err := store.Put(runstore.Record{Profile: "a", Workflow: wf, Provider: "local", State: runstore.Exported, Export: export, Repo: e.home}); err != nil {
			t.Fatal(err)
		}
	}
	if r := amelia(t, "", "results", "--discard", "forged"); r.code != 1 || !strings.Contains(r.stderr, "is not an export of this host's") {
		t.Errorf("results --discard of a forged export: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(elsewhere); err != nil {
		t.Errorf("the forged record's file is gone: %v", err)
	}
	r := amelia(t, "", "results", "--discard", "wf")
	if r.code != 0 || r.stdout != "discarded the work of wf exported to "+p+"\n" {
		t.Errorf("results --discard: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("the export is still there: %v", err)
	}
	if _, err := store.Get("a", "wf"); err == nil {
		t.Error("the record is still there")
	}
}

// A failure does not stop gc: the rest is tidied, the failure is said on
// stderr, and the exit code is 1.
func TestGCGoesOnAfterAFailure(t *testing.T) {
	e := newEnv(t)
	notADir := filepath.Join(t.TempDir(), "audit")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	e.writeConfig(t, "profiles:\n  a:\n    proxy: {audit_dir: "+notADir+"}\n    sandbox: {provider: local}\n")
	log := filepath.Join(e.home, ".local", "state", "amelia", "logs", "a", "old.jsonl")
	if err := os.MkdirAll(filepath.Dir(log), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(log, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	age(t, 30*24*time.Hour, log)
	r := amelia(t, "", "gc")
	if r.code != 1 || !strings.Contains(r.stderr, "amelia: gc: failed to list the audit logs in "+notADir+": ") {
		t.Errorf("gc with an audit_dir that is a file: exit %d, stderr %q", r.code, r.stderr)
	}
	if r.stdout != "removed log "+log+" (30d old)\n" {
		t.Errorf("gc stdout %q, want the log removed", r.stdout)
	}
	if _, err := os.Stat(log); !os.IsNotExist(err) {
		t.Errorf("the old log is still there: %v", err)
	}
}
