package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/k8stest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sshtest"
	"github.com/amelia-sandbox/amelia/plugins/daytona/daytonatest"
)

// End-to-end tests of amelia gc: a run's kept work, aged past retention
// (by its record's time: nothing waits), is exported to a bundle on the
// host and removed from the sandbox, and amelia results brings it back
// from the bundle. Run them with -run TestGC.

// keptTurns write a file, then fail as a refused request does: the run
// keeps its work in the sandbox.
func keptTurns() []llmtest.Turn {
	return []llmtest.Turn{
		{ToolCalls: []llmtest.ToolCall{writeCall("kept.txt", "kept, then exported\n")}},
		{Status: 400, Error: "maximum context length exceeded"},
	}
}

// staleWorker is the name of a worker binary of no version this host
// has: gc removes it once it is old.
const staleWorker = "amelia-worker-00000000deadbeef"

// gcExportsAndResultsBringBack makes a kept run of wf on h, checks that gc
// leaves it while it is young, ages it past retention, checks that gc
// --dry-run changes nothing, that gc exports it to a bundle and removes
// its checkout, that the workflow id stays taken, and that amelia results
// brings the branch back from the bundle. workerDir is the shell
// expression, in the sandbox, of the provider's worker directory: a stale
// worker planted there goes with gc, the current one stays. beforeGC,
// when set, runs after the dry run and before gc (it may stop the
// sandbox: gc starts it again to export the work).
func gcExportsAndResultsBringBack(t *testing.T, h *host, wf, workerDir string, beforeGC func()) {
	t.Helper()
	r := h.amelia(t, "run", "--workflow", wf, "write kept.txt")
	if r.code != 1 || !strings.Contains(r.stderr, "amelia results --profile e2e "+wf) {
		t.Fatalf("the run that keeps its work: exit %d, stderr %s", r.code, r.stderr)
	}
	state := filepath.Join(h.home, ".local", "state", "amelia")
	record := filepath.Join(state, "runs", "e2e", wf+".json")
	bundle := filepath.Join(state, "exports", "e2e", wf+".bundle")

	// Young: nothing to do.
	if g := h.amelia(t, "gc"); g.code != 0 || strings.Contains(g.stdout, wf) || strings.Contains(g.stdout, "export") {
		t.Errorf("gc of a young kept run: exit %d\nstdout: %s\nstderr: %s", g.code, g.stdout, g.stderr)
	}
	// A stale worker in the sandbox, and its current one, both old.
	plant := `d="` + workerDir + `"; mkdir -p "$d" && : > "$d/` + staleWorker + `" && touch -d @1000000000 "$d/` + staleWorker + `" && for f in "$d"/amelia-worker-*; do touch -d @1000000000 "$f"; done; ls "$d"`
	p := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", plant)
	if p.code != 0 || !strings.Contains(p.stdout, staleWorker) {
		t.Fatalf("plant a stale worker: exit %d\nstdout: %s\nstderr: %s", p.code, p.stdout, p.stderr)
	}
	// The workers the sandbox had: this host's (none where the provider's
	// preinstalled one is used), which gc must leave.
	var current []string
	for _, name := range strings.Fields(p.stdout) {
		if name != staleWorker {
			current = append(current, name)
		}
	}
	// Past the profile's retention (14 days by default).
	old := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(record, old, old); err != nil {
		t.Fatal(err)
	}
	recordBefore, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}

	dry := h.amelia(t, "gc", "--dry-run")
	if dry.code != 0 || !strings.Contains(dry.stdout, "would export run e2e/"+wf+" (kept, 30d old) to "+bundle) ||
		!strings.Contains(dry.stdout, "would remove worker ") || !strings.Contains(dry.stdout, staleWorker) {
		t.Errorf("gc --dry-run: exit %d\nstdout: %s\nstderr: %s", dry.code, dry.stdout, dry.stderr)
	}
	if after, _ := os.ReadFile(record); string(after) != string(recordBefore) {
		t.Errorf("gc --dry-run changed the run's record:\n%s", after)
	}
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Errorf("gc --dry-run wrote the export: %v", err)
	}
	if ls := h.amelia(t, "sandbox", "ls"); !strings.Contains(ls.stdout, wf+"(kept)") {
		t.Errorf("the kept checkout is not in the sandbox after gc --dry-run:\n%s%s", ls.stdout, ls.stderr)
	}
	if ls := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `ls "`+workerDir+`"`); !strings.Contains(ls.stdout, staleWorker) {
		t.Errorf("gc --dry-run removed the stale worker: %s%s", ls.stdout, ls.stderr)
	}

	if beforeGC != nil {
		beforeGC()
	}
	g := h.amelia(t, "gc")
	if g.code != 0 || !strings.Contains(g.stdout, "exported run e2e/"+wf+" (kept, 30d old) to "+bundle+" and removed its checkout") ||
		!strings.Contains(g.stdout, "removed worker ") {
		t.Fatalf("gc: exit %d\nstdout: %s\nstderr: %s", g.code, g.stdout, g.stderr)
	}
	for p, want := range map[string]os.FileMode{bundle: 0o600, filepath.Dir(bundle): 0o700 | os.ModeDir} {
		if st, err := os.Stat(p); err != nil || st.Mode() != want {
			t.Errorf("%s: %v, want mode %v", p, err, want)
		}
	}
	var rec struct{ State, Export string }
	if b, err := os.ReadFile(record); err != nil || json.Unmarshal(b, &rec) != nil || rec.State != "exported" || rec.Export != bundle {
		t.Errorf("the run's record after gc: %+v (%v)", rec, err)
	}
	if ls := h.amelia(t, "sandbox", "ls"); strings.Contains(ls.stdout, wf) {
		t.Errorf("the checkout is still in the sandbox after gc:\n%s", ls.stdout)
	}
	ls := h.amelia(t, "sandbox", "exec", "--", "sh", "-c", `ls "`+workerDir+`"`)
	if got := strings.Fields(ls.stdout); ls.code != 0 || !slices.Equal(got, current) {
		t.Errorf("the workers after gc: %q, want this host's alone: %q (%s)", got, current, ls.stderr)
	}
	// Exported work is the user's: a second gc leaves it, a rerun of the
	// id is refused, stop has nothing at risk.
	if again := h.amelia(t, "gc"); again.code != 0 || strings.Contains(again.stdout, wf) {
		t.Errorf("a second gc: exit %d\nstdout: %s\nstderr: %s", again.code, again.stdout, again.stderr)
	}
	if logs := h.amelia(t, "logs", wf); logs.code != 0 || !strings.Contains(logs.stdout, "kept.txt") {
		t.Errorf("amelia logs of the exported run, from this host's copy: exit %d\nstdout: %s\nstderr: %s", logs.code, logs.stdout, logs.stderr)
	}
	if rerun := h.amelia(t, "run", "--workflow", wf, "again"); rerun.code != 2 || !strings.Contains(rerun.stderr, "amelia gc exported") {
		t.Errorf("a rerun of the exported id: exit %d, stderr %q", rerun.code, rerun.stderr)
	}

	res := h.amelia(t, "results", wf)
	if res.code != 0 || !strings.Contains(res.stdout, "branch amelia/"+wf) {
		t.Fatalf("amelia results from the export: exit %d\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
	}
	if got := h.git(t, "show", "amelia/"+wf+":kept.txt"); got != "kept, then exported" {
		t.Errorf("kept.txt on the branch brought back from the export: %q", got)
	}
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Errorf("the export is still there after amelia results: %v", err)
	}
	if again := h.amelia(t, "results", wf); again.code == 0 || !strings.Contains(again.stderr, "no work of workflow "+wf) {
		t.Errorf("a second amelia results: exit %d, stderr %q", again.code, again.stderr)
	}
	if st := h.amelia(t, "stop"); st.code != 0 {
		t.Errorf("amelia stop after gc and results: exit %d, stderr %q", st.code, st.stderr)
	}
}

func TestGCOnDocker(t *testing.T) {
	cli := dockertest.Engine(t)
	h := newDockerHost(t, cli, dockerSandbox("open"), keptTurns()...)
	// The sandbox is stopped (as an idle one is) with the kept work in
	// it: gc starts it to export the work.
	stop := func() {
		if _, err := cli.ContainerStop(t.Context(), "amelia-sandbox-"+h.sandboxName(t, "e2e"), client.ContainerStopOptions{}); err != nil {
			t.Fatal(err)
		}
		if ls := h.amelia(t, "sandbox", "ls"); !strings.Contains(ls.stdout, "stopped") {
			t.Fatalf("sandbox ls after the container stopped:\n%s%s", ls.stdout, ls.stderr)
		}
	}
	gcExportsAndResultsBringBack(t, h, "gc-docker", "$HOME/.amelia/bin", stop)
}

func TestGCOnSSH(t *testing.T) {
	srv := sshtest.Start(t, sshtest.Options{})
	root := t.TempDir()
	h := newHostWith(t, sshSandbox(t, srv, root), root, llmtest.Options{}, keptTurns()...)
	gcExportsAndResultsBringBack(t, h, "gc-ssh", "$AMELIA_SANDBOX_DIR/bin", nil)
}

func TestGCOnDaytona(t *testing.T) {
	cli := dockertest.Engine(t)
	f := daytonatest.Start(t, daytonatest.Options{Docker: cli})
	h := newHostWith(t, daytonaSandbox(t, f, "open"), "", llmtest.Options{}, keptTurns()...)
	h.env = append(h.env, "DAYTONA_E2E_KEY="+f.APIKey())
	t.Cleanup(func() { h.amelia(t, "sandbox", "down", "--force") })
	gcExportsAndResultsBringBack(t, h, "gc-daytona", "$HOME/.amelia/bin", nil)
}

func TestGCOnKubernetes(t *testing.T) {
	c := k8stest.Start(t)
	h := newKubernetesHost(t, c, kubernetesSandbox(c, c.Namespace(t), "open", map[string]any{"api": "pods"}), keptTurns()...)
	gcExportsAndResultsBringBack(t, h, "gc-kubernetes", "$HOME/.amelia/bin", nil)
}
