package workspace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/amelia-sandbox/amelia/internal/sandboxtest"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// userLog runs every request as the test's own user, whatever User it
// names (a local sandbox cannot switch uids; the docker e2e tests check
// that the uids are real), and records which user each was asked for.
type userLog struct {
	*sandboxtest.Sandbox

	mu    sync.Mutex
	execs []loggedExec
}

type loggedExec struct {
	user string
	argv []string
}

func (u *userLog) Exec(ctx context.Context, req sdk.ExecRequest, eio sdk.ExecIO) (sdk.ExitStatus, error) {
	u.mu.Lock()
	u.execs = append(u.execs, loggedExec{req.User, req.Argv})
	u.mu.Unlock()
	req.User = ""
	return u.Sandbox.Exec(ctx, req, eio)
}

// naming lists the users of the execs whose arguments name dir, or with
// below a path below it: a script's, or the strings in a step's.
func (u *userLog) naming(dir string, below bool) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var users []string
	for _, x := range u.execs {
		args := x.argv[1:]
		if len(x.argv) == 4 && x.argv[1] == "step" {
			args = jsonStrings(x.argv[3])
		}
		for _, a := range args {
			if a == dir || below && strings.HasPrefix(a, dir+"/") {
				users = append(users, x.user)
				break
			}
		}
	}
	return users
}

// jsonStrings are the strings in the JSON value doc, at any depth.
func jsonStrings(doc string) []string {
	var v any
	if json.Unmarshal([]byte(doc), &v) != nil {
		return nil
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// Each workflow gets the lowest uid no record holds and no passwd or group
// entry names, allocated under the lock (concurrent workflows get
// different ones); every step that names its checkout or its run
// directory runs as that uid; removing the checkout releases the uid for
// the next workflow; a new Workspace (another amelia process) finds the
// uid in the sandbox's record.
func TestRunUsersBookkeeping(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	host, dir := newHostRepo(t)
	sb := sandboxtest.New(t, "ws")
	log := &userLog{Sandbox: sb}
	ws, err := New(log, sb.Workdir, Options{Worker: workerBin, RunUsers: true})
	if err != nil {
		t.Fatal(err)
	}
	// Uids of a range of the test's own, which nothing else on this
	// machine runs as: removing a checkout ends the uid's processes. The
	// image knows its first as a user and its third as a group.
	ws.uids = [2]int{50100, 50199}
	ids := filepath.Join(t.TempDir(), "passwd")
	writeFile(t, ids, "root:x:0:0::/root:/bin/sh\nsvc:x:50100:50100::/:/bin/sh\nweird:x:50102\n")
	ws.idFiles = ids
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}

	wfs := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	errs := make([]error, len(wfs))
	for i, id := range wfs {
		wg.Go(func() { _, errs[i] = ws.AddWorktree(ctx, id, s.Base) })
	}
	wg.Wait()
	uids := map[string]string{}
	for i, id := range wfs {
		if errs[i] != nil {
			t.Fatalf("AddWorktree(%s): %v", id, errs[i])
		}
		uids[id], err = ws.RunUser(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
	}
	got := slices.Sorted(maps.Values(uids))
	if !slices.Equal(got, []string{"50101", "50103", "50104"}) {
		t.Errorf("uids %v, want 50101, 50103 and 50104: the lowest that no passwd or group entry names", uids)
	}
	if listed, err := RunUsers(ctx, sb); err != nil || !maps.Equal(listed, uids) {
		t.Errorf("RunUsers = %v, %v; want %v", listed, err, uids)
	}
	if _, err := ws.AddWorktree(ctx, "a", s.Base); !errors.Is(err, ErrBranchExists) {
		t.Errorf("AddWorktree of a workflow with a uid = %v, want ErrBranchExists", err)
	}
	again, _ := New(sb, sb.Workdir, Options{RunUsers: true})
	again.uids = ws.uids
	if u, err := again.RunUser(ctx, "b"); err != nil || u != uids["b"] {
		t.Errorf("another Workspace's RunUser(b) = %q, %v; want %s", u, err, uids["b"])
	}
	if u, err := again.RunUser(ctx, "never"); err != nil || u != "" {
		t.Errorf("RunUser of a workflow without a uid = %q, %v", u, err)
	}
	off, _ := New(sb, sb.Workdir, Options{})
	if u, err := off.RunUser(ctx, "b"); err != nil || u != "" {
		t.Errorf("RunUser without run users = %q, %v; want none", u, err)
	}

	// Workflow a does everything a run does.
	wt := ws.WorktreeDir("a")
	run := ws.RunDir("a-run-1")
	inSandbox(t, sb, `mkdir -p "$1" && echo hi >"$2/a.txt"`, run, wt)
	if _, err := ws.CommitAll(ctx, "a", "a's work"); err != nil {
		t.Fatal(err)
	}
	if has, err := ws.HasWork(ctx, "a", s.Base.Start); err != nil || !has {
		t.Errorf("HasWork(a) = %v, %v", has, err)
	}
	if _, err := ws.FetchResult(ctx, host, "a", s.Base, ResultOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, dir, "show", "amelia/a:a.txt"); got != "hi" {
		t.Errorf("a.txt on amelia/a = %q", got)
	}
	if err := ws.RemoveRunDir(ctx, "a", run); err != nil {
		t.Fatal(err)
	}
	if err := ws.RemoveWorktree(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{wt, run} {
		users := log.naming(p, true)
		if len(users) == 0 || slices.ContainsFunc(users, func(u string) bool { return u != uids["a"]+":"+uids["a"] }) {
			t.Errorf("the execs naming %s ran as %q, want all as %s:%s", p, users, uids["a"], uids["a"])
		}
	}
	// The uids name the bare repo's objects only, to borrow them.
	if users := log.naming(ws.RepoDir(), false); len(users) == 0 || slices.ContainsFunc(users, func(u string) bool { return u != "" }) {
		t.Errorf("the execs naming the bare repo ran as %q, want the sandbox's user", users)
	}
	if got := inSandbox(t, sb, `ls -A "$1"`, filepath.Join(sb.Workdir, ".amelia", "users")); got != "b\nc" {
		t.Errorf("uid records after a's removal: %q", got)
	}
	// a's uid is free again.
	if _, err := ws.AddWorktree(ctx, "d", s.Base); err != nil {
		t.Fatal(err)
	}
	if u, _ := ws.RunUser(ctx, "d"); u != uids["a"] {
		t.Errorf("the next workflow got uid %s, want a's released %s", u, uids["a"])
	}
}

// A checkout made as a linked git worktree of the bare repo, as amelia
// made them before checkouts were repositories of their own, still
// commits, shows its work, comes back and goes: the kept work of a run
// from before an upgrade is not lost.
func TestLegacyLinkedWorktree(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newSynced(t)
	host, dir, ws := s.host, s.dir, s.ws
	wt := ws.WorktreeDir("old")
	inSandboxWS(t, ws, `mkdir -p "${2%/*}" && git -C "$1" worktree add --quiet -b amelia/old "$2" "$3" && echo kept >"$2/kept.txt"`, ws.RepoDir(), wt, s.Base.Start)
	if _, err := ws.CommitAll(ctx, "old", "old work"); err != nil {
		t.Fatal(err)
	}
	if has, err := ws.HasWork(ctx, "old", s.Base.Start); err != nil || !has {
		t.Errorf("HasWork = %v, %v", has, err)
	}
	if _, err := ws.AddWorktree(ctx, "old", s.Base); !errors.Is(err, ErrBranchExists) {
		t.Errorf("AddWorktree over the old worktree = %v, want ErrBranchExists", err)
	}
	if _, err := ws.FetchResult(ctx, host, "old", s.Base, ResultOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := gitT(t, dir, "show", "amelia/old:kept.txt"); got != "kept" {
		t.Errorf("kept.txt = %q", got)
	}
	if err := ws.RemoveWorktree(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if got := inSandboxWS(t, ws, `[ ! -e "$2" ] && git -C "$1" for-each-ref --format='%(refname)' && git -C "$1" worktree list | wc -l`, ws.RepoDir(), wt); got != "refs/heads/main\n1" {
		t.Errorf("after removal, the bare repo's refs and worktrees: %q", got)
	}

	// A branch amelia/<id> of the bare repo with no worktree on it is not
	// a checkout's: removing the workflow's checkout keeps it.
	inSandboxWS(t, ws, `git -C "$1" branch amelia/orphan "$2"`, ws.RepoDir(), s.Base.Start)
	if err := ws.RemoveWorktree(ctx, "orphan"); err != nil {
		t.Fatal(err)
	}
	if got := inSandboxWS(t, ws, `git -C "$1" for-each-ref --format='%(refname)' refs/heads/amelia`, ws.RepoDir()); got != "refs/heads/amelia/orphan" {
		t.Errorf("the bare repo's amelia branches after removing a workflow with none of its checkouts: %q", got)
	}
}

// Removing a checkout ends every process of its uid, those forked while
// the removal runs included, and nobody else's.
func TestRemoveWorktreeEndsTheUidsProcesses(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("SKIPPED: starting processes as a run uid needs root")
	}
	t.Parallel()
	ctx := t.Context()
	host, _ := newHostRepo(t)
	sb := sandboxtest.New(t, "ws")
	ws, err := New(&userLog{Sandbox: sb}, sb.Workdir, Options{Worker: workerBin, RunUsers: true})
	if err != nil {
		t.Fatal(err)
	}
	ws.uids = [2]int{50200, 50299} // the test's own, as in TestRunUsersBookkeeping
	ws.idFiles = filepath.Join(t.TempDir(), "none")
	s, err := ws.SyncLocal(ctx, LocalSource{Repo: host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ws.AddWorktree(ctx, "f", s.Base); err != nil {
		t.Fatal(err)
	}
	uid, err := ws.RunUser(ctx, "f")
	if err != nil || uid == "" {
		t.Fatalf("RunUser(f) = %q, %v", uid, err)
	}
	// A process of the uid that keeps forking while the removal runs (up
	// to a bound, so that a removal that misses them cannot exhaust the
	// machine's pids).
	forker := exec.Command("setpriv", "--reuid="+uid, "--regid="+uid, "--clear-groups", "sh", "-c", `echo started; i=0; while [ $i -lt 3000 ]; do sleep 600 & i=$((i + 1)); done; wait`)
	out, err := forker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := forker.Start(); err != nil {
		t.Fatalf("start a process as uid %s: %v", uid, err)
	}
	t.Cleanup(func() {
		forker.Process.Kill()
		forker.Wait()
		// What a failing removal left.
		for _, pid := range processesOf(t, uid) {
			n, _ := strconv.Atoi(pid)
			syscall.Kill(n, syscall.SIGKILL)
		}
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "started\n" {
		t.Fatalf("the forker said %q, %v", line, err)
	}
	if err := ws.RemoveWorktree(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	if alive := processesOf(t, uid); len(alive) > 0 {
		t.Errorf("after RemoveWorktree, uid %s still runs %v", uid, alive)
	}
}

// processesOf lists the live (not zombie) processes whose owner is uid.
func processesOf(t *testing.T, uid string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var alive []string
	for _, p := range procs {
		fi, err := os.Stat(p)
		if err != nil || strconv.FormatUint(uint64(fi.Sys().(*syscall.Stat_t).Uid), 10) != uid {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(p, "stat"))
		if err != nil {
			continue // gone
		}
		if rest := stat[bytes.LastIndexByte(stat, ')')+1:]; len(rest) > 1 && rest[1] == 'Z' {
			continue
		}
		alive = append(alive, filepath.Base(p))
	}
	return alive
}
