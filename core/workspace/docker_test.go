package workspace

import (
	"bufio"
	"context"
	"errors"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/plugins/docker"
	"github.com/amelia-sandbox/amelia/plugins/docker/image"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// dockerSandbox starts a container of the docker provider on the real
// engine (its image built on the test base, with the worker TestMain
// built) for the test alone, removed when the test ends, and returns a
// workspace with run users in its workdir.
func dockerSandbox(t testing.TB) (sandboxexec.Execer, *Workspace) {
	t.Helper()
	cli := dockertest.Engine(t)
	label := randomHex(6)
	dockertest.RemoveContainers(t, cli, "amelia.workspace-test="+label)
	p := docker.New(docker.Options{Version: "test", WorkerDirs: []string{workerDir}})
	t.Cleanup(func() { p.Close() })
	sb, err := p.EnsureRunning(t.Context(), sdk.Spec{
		SandboxRef: sdk.SandboxRef{Name: "t-workspace-" + label, Config: dockertest.Settings(nil)},
		Network:    sdk.NetworkPolicy{Mode: sdk.NetworkNone},
		Labels:     map[string]string{"amelia.workspace-test": label},
	})
	if err != nil {
		t.Fatalf("start a docker sandbox: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Teardown(context.Background(), sb.Ref); err != nil {
			t.Errorf("remove the docker sandbox: %v", err)
		}
	})
	ex := sandboxexec.Bind(p, sb.Ref)
	ws, err := New(ex, sb.Workdir, Options{Worker: image.WorkerPath, RunUsers: true})
	if err != nil {
		t.Fatal(err)
	}
	return ex, ws
}

// asUser runs script in the sandbox as user ("uid:gid", "": the
// sandbox's user) with args as $1..., streaming its stdout to out, and
// returns its exit code and stderr.
func asUser(ctx context.Context, ex sandboxexec.Execer, user string, out io.Writer, script string, args ...string) (int, string, error) {
	var stderr strings.Builder
	st, err := ex.Exec(ctx, sdk.ExecRequest{Argv: append([]string{"sh", "-c", script, "sh"}, args...), User: user}, sdk.ExecIO{Stdout: out, Stderr: &stderr})
	return st.Code, stderr.String(), err
}

// mustAs is asUser that fails the test unless the script exits 0, and
// returns its trimmed stdout.
func mustAs(t *testing.T, ex sandboxexec.Execer, user, script string, args ...string) string {
	t.Helper()
	var out strings.Builder
	code, stderr, err := asUser(t.Context(), ex, user, &out, script, args...)
	if err != nil || code != 0 {
		t.Fatalf("as %q: %q: exit %d, %v: %s", user, script, code, err, stderr)
	}
	return strings.TrimSpace(out.String())
}

// No run can take the path of another workflow's checkout. A run's uid
// does what any of its agent's commands could: it puts a directory with a
// file in it, a file, and a link to a directory anyone may write at
// worktrees/<id> of workflows yet to run, junk in .amelia/runs, and for
// one more workflow keeps making and removing each of those while that
// workflow starts. Every one of those workflows gets its own checkout at
// its path all the same, of its own uid, on its own branch, which comes
// back with its work; nothing the squatter made is followed, or counted as
// a checkout, nor its link in the place of a checkout its own uid removed;
// a checkout of the sandbox's user (amelia's from before workflows had
// uids) stays as it is and refuses its id; once the squatter's uid is
// released, nothing of it is left in worktrees/ or .amelia/runs/, and the
// checkouts it squatted are as they were; and a uid whose entry cannot go
// stays taken until it can.
func TestDockerNoRunTakesAnotherWorkflowsPath(t *testing.T) {
	ctx := t.Context()
	ex, ws := dockerSandbox(t)
	host, hostDir := newHostRepo(t)
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.AddWorktree(ctx, "att", s.Base); err != nil {
		t.Fatal(err)
	}
	att, err := ws.RunUser(ctx, "att")
	if err != nil || att == "" {
		t.Fatalf("RunUser(att) = %q, %v", att, err)
	}
	squatter := att + ":" + att
	wts, runs := path.Join(ws.root, "worktrees"), path.Join(ws.root, ".amelia", "runs")
	trap := "/tmp/trap-" + randomHex(4)
	mustAs(t, ex, squatter, `w=$1 runs=$2 trap=$3
mkdir -m 777 "$trap"
mkdir -m 777 "$w/late-dir"
echo planted >"$w/late-dir/planted"
echo planted >"$w/late-file"
ln -s "$trap" "$w/late-link"
mkdir "$runs/junk"
echo junk >"$runs/junk-file"
mkdir "$w/$(printf 'two\nlines')"
`, wts, runs, trap)
	if ids, err := Workflows(ctx, ex); err != nil || !slices.Equal(ids, []string{"att"}) {
		t.Errorf("Workflows with the paths squatted = %q, %v; want att alone", ids, err)
	}

	// The racer: until the stop file appears, it replaces what it has at
	// worktrees/late-race by a directory, a file, a link, counting what it
	// made.
	stop := "/tmp/stop-" + randomHex(4)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pr.Close() }) // before the sandbox goes: the racer never blocks on its output
	raced := make(chan string, 1)
	go func() {
		code, stderr, err := asUser(ctx, ex, squatter, pw, `w=$1 trap=$2 stop=$3 n=0
echo racing
while [ ! -e "$stop" ]; do
	rm -rf "$w/late-race" 2>/dev/null
	mkdir "$w/late-race" 2>/dev/null && n=$((n + 1))
	rm -rf "$w/late-race" 2>/dev/null
	echo squat 2>/dev/null >"$w/late-race" && n=$((n + 1))
	rm -f "$w/late-race" 2>/dev/null
	ln -s "$trap" "$w/late-race" 2>/dev/null && n=$((n + 1))
done
echo "made $n"
`, wts, trap, stop)
		if err == nil && code != 0 {
			err = errors.New("exit " + strconv.Itoa(code) + ": " + stderr)
		}
		pw.CloseWithError(err)
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() || lines.Text() != "racing" {
		t.Fatalf("the racer did not start: %q, %v", lines.Text(), lines.Err())
	}
	go func() {
		var last string
		for lines.Scan() {
			last = lines.Text()
		}
		if err := lines.Err(); err != nil {
			last = err.Error()
		}
		raced <- last
	}()
	_, raceErr := ws.AddWorktree(ctx, "late-race", s.Base)
	mustAs(t, ex, "", `touch "$1"`, stop)
	if made := <-raced; !strings.HasPrefix(made, "made ") || made == "made 0" {
		t.Errorf("the racer reported %q: it made nothing to race with", made)
	}
	if raceErr != nil {
		t.Fatalf("AddWorktree(late-race) while a squatter races for its path: %v", raceErr)
	}

	lates := []string{"late-dir", "late-file", "late-link", "late-race"}
	for _, id := range lates[:3] {
		if _, err := ws.AddWorktree(ctx, id, s.Base); err != nil {
			t.Fatalf("AddWorktree(%s) with its path squatted: %v", id, err)
		}
	}
	// Each checkout is its workflow's own, and its work comes back.
	checkouts := map[string]string{}
	for _, id := range lates {
		uid, err := ws.RunUser(ctx, id)
		if err != nil || uid == "" || uid == att {
			t.Fatalf("RunUser(%s) = %q, %v; want a uid of its own", id, uid, err)
		}
		wt := ws.WorktreeDir(id)
		checkouts[id] = mustAs(t, ex, "", `stat -c '%u %a %F %i' -- "$1"`, wt)
		if f := strings.Fields(checkouts[id]); len(f) != 4 || f[0] != uid || f[1] != "700" || f[2] != "directory" {
			t.Errorf("%s is %q (uid, mode, type, inode); want a 0700 directory of uid %s", wt, checkouts[id], uid)
		}
		got := mustAs(t, ex, uid+":"+uid, `cd "$1" && git symbolic-ref --short HEAD && git rev-parse HEAD && git status --porcelain && ls -A`, wt)
		if want := "amelia/" + id + "\n" + s.Base.Start + "\n.git\nREADME.md\nsrc"; got != want {
			t.Errorf("the checkout of %s: %q, want %q", id, got, want)
		}
		mustAs(t, ex, uid+":"+uid, `echo "$2" >"$1/$2.txt"`, wt, id)
		if _, err := ws.CommitAll(ctx, id, id+"'s work"); err != nil {
			t.Fatal(err)
		}
		if _, err := ws.FetchResult(ctx, host, id, s.Base, ResultOptions{}); err != nil {
			t.Fatalf("FetchResult(%s): %v", id, err)
		}
		if got := gitT(t, hostDir, "diff", "--name-only", "main", "amelia/"+id); got != id+".txt" {
			t.Errorf("amelia/%s changes %q, want %s.txt alone", id, got, id)
		}
	}
	// Nothing followed the link: the trap is empty. What was in the way
	// is the squatter's still, moved aside: the planted file with it.
	if got := mustAs(t, ex, squatter, `ls -A "$1"`, trap); got != "" {
		t.Errorf("the trap the squatter's links led to holds %q", got)
	}
	aside := mustAs(t, ex, "", `find "$1" -mindepth 1 -maxdepth 1 -user "$2" -name '.new-*' | wc -l; find "$1" -mindepth 2 -maxdepth 2 -path "$1/.new-*/planted" | wc -l`, wts, att)
	if f := strings.Fields(aside); len(f) != 2 || atoi(f[0]) < 3 || f[1] != "1" {
		t.Errorf("moved aside: %q (entries of the squatter's, and how many hold the planted file); want at least 3, and 1", aside)
	}

	// A checkout of the sandbox's user's stays, and its id is refused.
	mustAs(t, ex, "", `mkdir -m 700 "$1" && echo legacy >"$1/legacy.txt"`, ws.WorktreeDir("old"))
	if _, err := ws.AddWorktree(ctx, "old", s.Base); !errors.Is(err, ErrBranchExists) {
		t.Errorf("AddWorktree over the sandbox user's checkout = %v, want ErrBranchExists", err)
	}
	if got := mustAs(t, ex, "", `[ "$(stat -c %u "$1")" = "$(id -u)" ] && cat "$1/legacy.txt"`, ws.WorktreeDir("old")); got != "legacy" {
		t.Errorf("the sandbox user's checkout after AddWorktree refused: %q", got)
	}
	if uids, err := RunUsers(ctx, ex); err != nil || uids["old"] != "" {
		t.Errorf("RunUsers after AddWorktree(old) refused = %v, %v; want no uid for old", uids, err)
	}
	if ids, err := Workflows(ctx, ex); err != nil || !slices.Equal(ids, append([]string{"att"}, append(lates, "old")...)) {
		t.Errorf("Workflows = %q, %v; want att, the late ones and old", ids, err)
	}

	// A checkout its own uid removed, and in its place the squatter's link
	// to a repository of its own with the workflow's branch a commit ahead:
	// that is no checkout of the workflow's, nor work of its.
	if _, err := ws.AddWorktree(ctx, "gone", s.Base); err != nil {
		t.Fatal(err)
	}
	gone, _ := ws.RunUser(ctx, "gone")
	mustAs(t, ex, gone+":"+gone, `rm -rf "$1"`, ws.WorktreeDir("gone"))
	mustAs(t, ex, squatter, `repo=/tmp/fake-$(id -u) wt=$1
git init -q "$repo" && cd "$repo"
git -c user.name=x -c user.email=x@x commit -q --allow-empty -m fake && git branch amelia/gone
chmod -R a+rX "$repo" && ln -s "$repo" "$wt"
`, ws.WorktreeDir("gone"))
	if ids, err := Workflows(ctx, ex); err != nil || slices.Contains(ids, "gone") {
		t.Errorf("Workflows with the squatter's link at worktrees/gone = %q, %v; want no gone", ids, err)
	}
	if has, err := ws.HasWork(ctx, "gone", s.Base.Start); err != nil || has {
		t.Errorf("HasWork(gone) with the squatter's link in its checkout's place = %v, %v; want no work", has, err)
	}
	if _, err := ws.FetchResult(ctx, host, "gone", s.Base, ResultOptions{}); err == nil || !strings.Contains(err.Error(), "not in the sandbox") {
		t.Errorf("FetchResult(gone) with the squatter's link in its checkout's place = %v; want the checkout not in the sandbox", err)
	}

	// The squatter's uid is released: nothing of it is left, and what it
	// squatted is as it was.
	if err := ws.RemoveWorktree(ctx, "att"); err != nil {
		t.Fatal(err)
	}
	if got := mustAs(t, ex, "", `u=$1; shift; find "$@" -mindepth 1 -maxdepth 1 -user "$u" | wc -l`, att, wts, runs, "/tmp"); got != "0" {
		t.Errorf("after its uid was released, the squatter still has %s entries in worktrees/, .amelia/runs/ or /tmp", got)
	}
	if uids, err := RunUsers(ctx, ex); err != nil || uids["att"] != "" {
		t.Errorf("RunUsers after att's removal = %v, %v; want no uid for att", uids, err)
	}
	for _, id := range lates {
		if got := mustAs(t, ex, "", `stat -c '%u %a %F %i' -- "$1"`, ws.WorktreeDir(id)); got != checkouts[id] {
			t.Errorf("the checkout of %s after the squatter's release: %q, was %q", id, got, checkouts[id])
		}
	}

	// An entry a uid cannot remove (another uid made a directory in it)
	// keeps the uid taken until it is gone.
	keep, _ := ws.RunUser(ctx, "late-file")
	other, _ := ws.RunUser(ctx, "late-link")
	blocker := path.Join(wts, "blocker")
	mustAs(t, ex, keep+":"+keep, `mkdir -m 777 "$1"`, blocker)
	mustAs(t, ex, other+":"+other, `mkdir -m 755 "$1/inner" && touch "$1/inner/f"`, blocker)
	if err := ws.RemoveWorktree(ctx, "late-file"); err == nil || !strings.Contains(err.Error(), "could not remove") {
		t.Errorf("RemoveWorktree(late-file) with an entry its uid cannot remove = %v; want it kept, saying why", err)
	}
	if uids, err := RunUsers(ctx, ex); err != nil || uids["late-file"] != keep {
		t.Errorf("RunUsers after a release that could not finish = %v, %v; want late-file still holding %s", uids, err, keep)
	}
	mustAs(t, ex, other+":"+other, `rm -rf "$1/inner"`, blocker)
	if err := ws.RemoveWorktree(ctx, "late-file"); err != nil {
		t.Fatalf("RemoveWorktree(late-file) once its entries can go: %v", err)
	}
	if got := mustAs(t, ex, "", `u=$1; shift; find "$@" -mindepth 1 -maxdepth 1 -user "$u" | wc -l`, keep, wts, runs); got != "0" {
		t.Errorf("after its release, late-file's uid still has %s entries", got)
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
