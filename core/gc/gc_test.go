package gc

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/runstore"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const day = 24 * time.Hour

func rec(state runstore.State) runstore.Record {
	return runstore.Record{Profile: "dev", Workflow: "fix-1", Sandbox: "dev-5e6f7a8b", State: state}
}

func TestPlanRun(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     RunInput
		want   Action
		listed bool
		whyHas string
	}{
		{name: "kept, young", in: RunInput{Record: rec(runstore.Kept), Age: 3 * day, Retention: 14 * day, Sandbox: Up}},
		{name: "kept, exactly at retention", in: RunInput{Record: rec(runstore.Kept), Age: 14 * day, Retention: 14 * day, Sandbox: Up}},
		{name: "kept, old", in: RunInput{Record: rec(runstore.Kept), Age: 15 * day, Retention: 14 * day, Sandbox: Up}, listed: true, want: Export},
		{name: "ended, old, sandbox stopped", in: RunInput{Record: rec(runstore.Ended), Age: 15 * day, Retention: 14 * day, Sandbox: Down}, listed: true, want: Export},
		{name: "stopped, old", in: RunInput{Record: rec(runstore.Stopped), Age: 15 * day, Retention: 14 * day, Sandbox: Up}, listed: true, want: Export},
		{name: "delivered with a kept checkout", in: RunInput{Record: rec(runstore.Delivered), Age: 15 * day, Retention: 14 * day, Sandbox: Up}, listed: true, want: Remove},
		{name: "discarded", in: RunInput{Record: rec(runstore.Discarded), Age: 15 * day, Retention: 14 * day, Sandbox: Up}, listed: true, want: Remove},
		{name: "running: never touched", in: RunInput{Record: rec(runstore.Running), Age: 99 * day, Retention: day, Sandbox: Up}, listed: true, want: Leave, whyHas: "amelia attach"},
		{name: "running, sandbox gone: still never touched", in: RunInput{Record: rec(runstore.Running), Age: 99 * day, Retention: day, Sandbox: Gone}, listed: true, want: Leave, whyHas: "may be running"},
		{name: "agent starting: never touched", in: RunInput{Record: rec(runstore.AgentStarted), Age: 99 * day, Retention: day, Sandbox: Up}, listed: true, want: Leave},
		{name: "preparing", in: RunInput{Record: rec(runstore.SandboxUp), Age: 99 * day, Retention: day, Sandbox: Up}, listed: true, want: Leave, whyHas: "--discard"},
		{name: "kept, sandbox gone", in: RunInput{Record: rec(runstore.Kept), Age: 15 * day, Retention: 14 * day, Sandbox: Gone}, listed: true, want: Forget, whyHas: "is gone"},
		{name: "delivered, sandbox gone", in: RunInput{Record: rec(runstore.Delivered), Age: 15 * day, Retention: 14 * day, Sandbox: Gone}, listed: true, want: Forget},
		{name: "kept, sandbox unknown: its work may be there", in: RunInput{Record: rec(runstore.Kept), Age: 15 * day, Retention: 14 * day, Sandbox: Unknown, SandboxWhy: "engine unreachable"}, listed: true, want: Leave, whyHas: "engine unreachable"},
		{name: "exported: the bundle is the user's", in: RunInput{Record: rec(runstore.Exported), Age: 99 * day, Retention: day, Sandbox: Gone}},
	} {
		t.Run(c.name, func(t *testing.T) {
			it, ok := PlanRun(c.in)
			if ok != c.listed {
				t.Fatalf("listed %v, want %v (%+v)", ok, c.listed, it)
			}
			if !ok {
				return
			}
			if it.Action != c.want || !strings.Contains(it.Why, c.whyHas) {
				t.Errorf("action %s (%s), want %s with %q", it.Action, it.Why, c.want, c.whyHas)
			}
		})
	}
}

func TestPlanFile(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     FileInput
		listed bool
		want   Action
	}{
		{name: "young", in: FileInput{Kind: Log, Age: day, Retention: 7 * day}},
		{name: "old", in: FileInput{Kind: Log, Age: 8 * day, Retention: 7 * day}, listed: true, want: Remove},
		{name: "old, its run may be running", in: FileInput{Kind: Audit, Age: 8 * day, Retention: 7 * day, InUse: true}, listed: true, want: Leave},
	} {
		t.Run(c.name, func(t *testing.T) {
			it, ok := PlanFile(c.in)
			if ok != c.listed || ok && it.Action != c.want {
				t.Errorf("listed %v action %s, want %v %s", ok, it.Action, c.listed, c.want)
			}
		})
	}
}

func TestPlanOrphan(t *testing.T) {
	base := OrphanInput{Name: "old-1a2b", Profile: "old", Provider: "docker", Age: 30 * day, Retention: 14 * day, Up: true, Listed: true}
	with := func(f func(*OrphanInput)) OrphanInput { in := base; f(&in); return in }
	for _, c := range []struct {
		name   string
		in     OrphanInput
		listed bool
		want   Action
	}{
		{name: "empty and old", in: base, listed: true, want: Remove},
		{name: "young", in: with(func(in *OrphanInput) { in.Age = day })},
		{name: "age unknown", in: with(func(in *OrphanInput) { in.Age = 0 }), listed: true, want: Leave},
		{name: "holds a checkout", in: with(func(in *OrphanInput) { in.Workflows = []string{"wf"} }), listed: true, want: Leave},
		{name: "holds a recorded run", in: with(func(in *OrphanInput) { in.Recorded = []string{"wf"} }), listed: true, want: Leave},
		{name: "stopped: cannot look inside", in: with(func(in *OrphanInput) { in.Up = false }), listed: true, want: Leave},
		{name: "checkouts not listed", in: with(func(in *OrphanInput) { in.Listed = false }), listed: true, want: Leave},
	} {
		t.Run(c.name, func(t *testing.T) {
			it, ok := PlanOrphan(c.in)
			if ok != c.listed || ok && it.Action != c.want {
				t.Errorf("listed %v action %s (%s), want %v %s", ok, it.Action, it.Why, c.listed, c.want)
			}
		})
	}
}

func TestPlanParked(t *testing.T) {
	if _, ok := PlanParked(ParkedInput{Age: day, Retention: 14 * day}); ok {
		t.Error("a young parked checkout is listed")
	}
	if it, ok := PlanParked(ParkedInput{Age: 20 * day, Retention: 14 * day}); !ok || it.Action != Remove {
		t.Errorf("an old parked checkout: listed %v action %s, want removed", ok, it.Action)
	}
}

func TestPlanSetup(t *testing.T) {
	if it := PlanSetup(SetupInput{Ref: "r", Age: 20 * day}); it.Action != Remove {
		t.Errorf("a setup the provider removed: %s", it.Action)
	}
	if it := PlanSetup(SetupInput{Ref: "r", Age: 20 * day, Left: "in use"}); it.Action != Leave || it.Why != "in use" {
		t.Errorf("a setup the provider kept: %s (%s)", it.Action, it.Why)
	}
}

func TestPlanWorker(t *testing.T) {
	for _, c := range []struct {
		name   string
		in     WorkerInput
		listed bool
	}{
		{name: "another version's, old", in: WorkerInput{Age: 20 * day, Retention: 14 * day}, listed: true},
		{name: "another version's, young", in: WorkerInput{Age: day, Retention: 14 * day}},
		{name: "the current one, old", in: WorkerInput{Age: 20 * day, Retention: 14 * day, Current: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if it, ok := PlanWorker(c.in); ok != c.listed || ok && it.Action != Remove {
				t.Errorf("listed %v action %s, want %v", ok, it.Action, c.listed)
			}
		})
	}
}

// The lines gc prints, with and without --dry-run and on a failure.
func TestLines(t *testing.T) {
	kept, _ := PlanRun(RunInput{Record: rec(runstore.Kept), Age: 15 * day, Retention: 14 * day, Sandbox: Up, Export: "/state/amelia/exports/dev/fix-1.bundle"})
	delivered, _ := PlanRun(RunInput{Record: rec(runstore.Delivered), Age: 15 * day, Retention: 14 * day, Sandbox: Up})
	gone, _ := PlanRun(RunInput{Record: rec(runstore.Discarded), Age: 15 * day, Retention: 14 * day, Sandbox: Gone})
	running, _ := PlanRun(RunInput{Record: rec(runstore.Running), Age: 15 * day, Retention: 14 * day, Sandbox: Up})
	log, _ := PlanFile(FileInput{Kind: Log, Path: "/state/amelia/logs/dev/fix-1.jsonl", Age: 8 * day, Retention: 7 * day})
	audit, _ := PlanFile(FileInput{Kind: Audit, Path: "/state/amelia/audit/r-1.jsonl", Age: 30 * day, Retention: 14 * day})
	orphan, _ := PlanOrphan(OrphanInput{Name: "old-1a2b", Profile: "old", Provider: "docker", Age: 30 * day, Retention: 14 * day, Up: true, Listed: true})
	busy, _ := PlanOrphan(OrphanInput{Name: "old-3c4d", Profile: "old", Provider: "docker", Age: 30 * day, Retention: 14 * day, Up: true, Listed: true, Workflows: []string{"wf"}})
	worker, _ := PlanWorker(WorkerInput{Path: "/home/u/.amelia/bin/amelia-worker-0123456789abcdef", Sandbox: "dev-5e6f7a8b", Age: 20 * day, Retention: 14 * day})
	stopped, _ := PlanOrphan(OrphanInput{Name: "old-5e6f", Profile: "old", Provider: "docker", Age: 30 * day, Retention: 14 * day})
	recorded, _ := PlanOrphan(OrphanInput{Name: "old-7a8b", Profile: "old", Provider: "docker", Age: 30 * day, Retention: 14 * day, Recorded: []string{"fix-2"}})
	parked, _ := PlanParked(ParkedInput{Name: ".park-0123abcd", Sandbox: "dev-5e6f7a8b", UID: 2001, Age: 20 * day, Retention: 14 * day})
	setup := PlanSetup(SetupInput{Ref: "amelia-setup:0123456789abcdef", Profile: "dev", Provider: "docker", Age: 20 * day})
	inUse := PlanSetup(SetupInput{Ref: "amelia-setup:fedcba9876543210", Profile: "dev", Provider: "docker", Age: 20 * day, Left: "a container was created from it (amelia stop removes a sandbox)"})
	items := []Item{kept, delivered, gone, running, log, audit, orphan, busy, stopped, recorded, worker, parked, setup, inUse}
	var b strings.Builder
	for _, mode := range []string{"dry run", "done", "failed"} {
		b.WriteString("# " + mode + "\n")
		for _, it := range items {
			var err error
			if mode == "failed" {
				err = errors.New("permission denied")
			}
			b.WriteString(Line(it, mode == "dry run", err) + "\n")
		}
	}
	golden(t, "lines.golden", b.String())
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run go test -update if the change is intended)\n--- got\n%s--- want\n%s", p, got, want)
	}
}

func TestAge(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, // a clock a little behind the provider's
		{59 * time.Second, "59s"},
		{time.Minute, "1m"},
		{59*time.Minute + 59*time.Second, "59m"},
		{47 * time.Hour, "47h"},
		{49 * time.Hour, "2d"},
	} {
		if got := Age(c.d); got != c.want {
			t.Errorf("Age(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}
