package workspace

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// Workspace setup on a repo of 10 000 files / 2 000 commits, side by side
// with plain git host to host:
//
//	go test -run='^$' -bench=WorkspaceSetup -benchtime=3x ./core/workspace/
//
// first-ms: SyncLocal into an empty sandbox repo (bundle over Exec stdin);
// baseline `git clone --bare --no-local` of the same repo.
// incr-ms: SyncLocal after 1 new host commit (target < 200 ms); baseline
// `git fetch` of that commit between two host repos.
// worktree-ms: AddWorktree (target < 1 s); baseline `git worktree add` on
// the host.

const (
	benchFiles   = 10000
	benchCommits = 2000
)

// genRepo builds the benchmark repo with git fast-import: the first commit
// adds benchFiles files in 100 directories, each later one changes 5.
func genRepo(b *testing.B) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "big")
	gitT(b, "", "init", "-q", "-b", "main", dir)
	cmd := exec.Command("git", "-C", dir, "fast-import", "--quiet")
	cmd.Env = hostEnv()
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(in, 1<<20)
	file := func(i, rev int) {
		data := fmt.Sprintf("package p%d\n\n// file %d, revision %d\nconst V%d = %d\n", i/100, i, rev, i, rev)
		fmt.Fprintf(w, "M 100644 inline dir%02d/file%05d.go\ndata %d\n%s\n", i/100, i, len(data), data)
	}
	for c := range benchCommits {
		msg := fmt.Sprintf("commit %d", c)
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter Bench <b@x> %d +0000\ndata %d\n%s\n", 1700000000+c, len(msg), msg)
		if c == 0 {
			for i := range benchFiles {
				file(i, 0)
			}
		} else {
			for k := range 5 {
				file((c*37+k*2003)%benchFiles, c)
			}
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("fast-import: %v", err)
	}
	gitT(b, dir, "checkout", "-q", "-f", "main")
	return dir
}

func BenchmarkWorkspaceSetup(b *testing.B) {
	src := genRepo(b)
	host, err := OpenHostRepo(b.Context(), src, nil)
	if err != nil {
		b.Fatal(err)
	}
	_, ws0 := newSandbox(b)
	timed := func(f func()) time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}
	var first, incr, wt, firstBase, incrBase, wtBase []time.Duration
	i := 0
	for b.Loop() {
		i++
		ws, err := New(ws0.ex, filepath.Join(ws0.root, fmt.Sprint("run", i)), Options{Worker: workerBin})
		if err != nil {
			b.Fatal(err)
		}
		clone := filepath.Join(b.TempDir(), "clone.git")
		first = append(first, timed(func() {
			if _, err := ws.SyncLocal(b.Context(), LocalSource{Repo: host}); err != nil {
				b.Fatal(err)
			}
		}))
		firstBase = append(firstBase, timed(func() { gitT(b, "", "clone", "-q", "--bare", "--no-local", src, clone) }))

		writeFile(b, filepath.Join(src, fmt.Sprintf("new%d.txt", i)), "new\n")
		gitT(b, src, "add", "-A")
		gitT(b, src, "commit", "-qm", "one more")
		var s Synced
		incr = append(incr, timed(func() {
			if s, err = ws.SyncLocal(b.Context(), LocalSource{Repo: host}); err != nil || s.Commits != 1 {
				b.Fatalf("incremental sync: %+v, %v", s, err)
			}
		}))
		incrBase = append(incrBase, timed(func() { gitT(b, clone, "fetch", "-q", src, "+main:main") }))

		id := fmt.Sprint("bench-", i)
		wt = append(wt, timed(func() {
			if _, err := ws.AddWorktree(b.Context(), id, s.Base); err != nil {
				b.Fatal(err)
			}
		}))
		wtBase = append(wtBase, timed(func() { gitT(b, clone, "worktree", "add", "-q", "-b", id, filepath.Join(b.TempDir(), id), "main") }))
		if err := os.RemoveAll(clone); err != nil {
			b.Fatal(err)
		}
	}
	ms := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(ms(first), "first-ms")
	b.ReportMetric(ms(firstBase), "clone-ms")
	b.ReportMetric(ms(first)/ms(firstBase), "first-x-clone")
	b.ReportMetric(ms(incr), "incr-ms")
	b.ReportMetric(ms(incrBase), "fetch-ms")
	b.ReportMetric(ms(incr)/ms(incrBase), "incr-x-fetch")
	b.ReportMetric(ms(wt), "worktree-ms")
	b.ReportMetric(ms(wtBase), "host-worktree-ms")
	b.ReportMetric(ms(wt)/ms(wtBase), "worktree-x-host")
	b.ReportMetric(0, "ns/op")
}
