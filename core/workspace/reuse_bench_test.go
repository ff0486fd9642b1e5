package workspace

import (
	"bufio"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/sandboxexec"
	"github.com/amelia-sandbox/amelia/plugins/sdk"
)

// A run's workspace on a large repository, on the docker provider, side by
// side with plain git:
//
//	go test -run='^$' -bench=WorkspaceLarge -benchtime=1x ./core/workspace/
//
// The repository is made of the module cache's files (`go env GOMODCACHE`),
// copied round after round under r0/, r1/... (each copy a little changed,
// so its blobs are its own) until it has largeFiles files, committed in
// several steps with a few more commits on top.
//
// first-ms: the first run's workspace in a new sandbox workspace
// (SyncLocal, AddWorktree); baseline bundle-clone-ms: `git bundle create`
// of the branch on the host, the bundle streamed into the same sandbox
// (Exec stdin), and `git clone` of it there, with its checkout.
// The baseline runs before and after our runs; its median is taken.
// second-ms: the workspace of another workflow in the same sandbox once
// the first has ended (its checkout parked), against first-ms.
// cleanup-ms: how long the first run's end took, its checkout's removal
// (or parking) included.
const largeFiles = 40000

func BenchmarkWorkspaceLarge(b *testing.B) {
	src, files, size := genModRepo(b, largeFiles)
	b.Logf("repository: %d files, %d MB, %s commits", files, size>>20, gitT(b, src, "rev-list", "--count", "main"))
	host, err := OpenHostRepo(b.Context(), src, nil)
	if err != nil {
		b.Fatal(err)
	}
	ex, ws0 := dockerSandbox(b)
	timed := func(f func()) time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}
	var first, firstSync, base, second, cleanup []time.Duration
	i := 0
	for b.Loop() {
		i++
		// AMELIA_BENCH_LOG=1 logs every step with its duration.
		var log *slog.Logger
		if os.Getenv("AMELIA_BENCH_LOG") != "" {
			log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		ws, err := New(ex, path.Join(ws0.root, fmt.Sprint("run", i)), Options{Worker: ws0.worker, RunUsers: true, ParkedCheckouts: 4, Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		base = append(base, bundleClone(b, ex, src, ws0.root))
		run := func(id string) (time.Duration, time.Duration, time.Duration) {
			var s Synced
			var sync time.Duration
			setup := timed(func() {
				sync = timed(func() {
					if s, err = ws.SyncLocal(b.Context(), LocalSource{Repo: host, Branch: "main"}); err != nil {
						b.Fatal(err)
					}
				})
				if _, err := ws.AddWorktree(b.Context(), id, s.Base); err != nil {
					b.Fatal(err)
				}
			})
			end := timed(func() {
				if _, err := ws.CommitAll(b.Context(), id, "nothing"); err != nil {
					b.Fatal(err)
				}
				if err := ws.Retire(b.Context(), id, ""); err != nil {
					b.Fatal(err)
				}
			})
			return setup, sync, end
		}
		f, fs, c := run(fmt.Sprint("first-", i))
		first, firstSync, cleanup = append(first, f), append(firstSync, fs), append(cleanup, c)
		s, _, _ := run(fmt.Sprint("second-", i))
		second = append(second, s)
		base = append(base, bundleClone(b, ex, src, ws0.root))
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.Logf("first %v (sync %v), bundle-clone %v, second %v, cleanup %v", first, firstSync, base, second, cleanup)
	f, bc, s := median(first), median(base), median(second)
	b.ReportMetric(ms(f), "first-ms")
	b.ReportMetric(ms(median(firstSync)), "first-sync-ms")
	b.ReportMetric(ms(bc), "bundle-clone-ms")
	b.ReportMetric(ms(f)/ms(bc), "first-x-bundle-clone")
	b.ReportMetric(ms(s), "second-ms")
	b.ReportMetric(ms(s)/ms(f), "second-x-first")
	b.ReportMetric(ms(median(cleanup)), "cleanup-ms")
	b.ReportMetric(0, "ns/op")
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// bundleClone is the baseline: the branch bundled on the host, the bundle
// streamed into the sandbox and cloned there with its checkout, as the
// sandbox's user, under root (the sandbox's workdir: the filesystem the
// workspace's checkouts are on, which on docker is a volume, where the
// container's layer may be much slower). The bundle has no HEAD, so clone
// is told the branch to check out (without -b it checks out nothing, and
// only says so in a warning).
//
// What it made stays until the sandbox goes with its volume, after the
// timings: a removal of its 40,000 files right before the next timed
// step (our first run's) slowed its checkout from 5 s to 20-36 s, as ext4
// without a journal (this machine's) skips inodes deleted in the last
// minute or more when it allocates one, a scan that grows with what was
// deleted (perf: recently_deleted under __ext4_new_inode). Our runs
// remove nothing meanwhile either: their checkouts are parked.
func bundleClone(b *testing.B, ex sandboxexec.Execer, src, root string) time.Duration {
	b.Helper()
	file := filepath.Join(b.TempDir(), "b.bundle")
	dir := path.Join(root, "bench-clone-"+randomHex(4))
	start := time.Now()
	gitT(b, src, "bundle", "create", "-q", file, "main")
	in, err := os.Open(file)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	for _, step := range []struct {
		argv  []string
		stdin *os.File
	}{
		{[]string{"sh", "-c", `mkdir "$1" && cat >"$1/b.bundle"`, "sh", dir}, in},
		{[]string{"git", "clone", "-q", "-b", "main", dir + "/b.bundle", dir + "/clone"}, nil},
	} {
		var stderr strings.Builder
		eio := sdk.ExecIO{Stderr: &stderr}
		if step.stdin != nil {
			eio.Stdin = step.stdin
		}
		st, err := ex.Exec(b.Context(), sdk.ExecRequest{Argv: step.argv}, eio)
		if err != nil || st.Code != 0 {
			b.Fatalf("%q: %v, exit %d: %s", step.argv, err, st.Code, stderr.String())
		}
	}
	return time.Since(start)
}

// genModRepo makes a repository of at least want files from the module
// cache (see BenchmarkWorkspaceLarge), committed 5000 files at a time with
// git fast-import, then three commits that change 50 files each; the
// checked-out branch is an empty one, so the benchmark's runs name main
// as their base. It returns its directory, its file count and its size.
func genModRepo(b *testing.B, want int) (string, int, int64) {
	b.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		b.Fatalf("go env GOMODCACHE: %v", err)
	}
	cache := strings.TrimSpace(string(out))
	var srcs []string
	err = filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p == filepath.Join(cache, "cache") {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			srcs = append(srcs, p)
		}
		return nil
	})
	if err != nil || len(srcs) == 0 {
		b.Fatalf("walk the module cache %s: %d files, %v", cache, len(srcs), err)
	}
	dir := filepath.Join(b.TempDir(), "large")
	gitT(b, "", "init", "-q", "-b", "empty", dir)
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
	commits := 0
	startCommit := func(msg string) {
		fmt.Fprintf(w, "commit refs/heads/main\ncommitter Bench <b@x> %d +0000\ndata %d\n%s\n", 1700000000+commits, len(msg), msg)
		commits++
	}
	put := func(name string, data []byte) {
		fmt.Fprintf(w, "M 100644 inline %s\ndata %d\n", name, len(data))
		w.Write(data)
		w.WriteString("\n")
	}
	var n int
	var size int64
	content := map[string][]byte{}
	for round := 0; n < want; round++ {
		for _, p := range srcs {
			if n == want {
				break
			}
			if n%5000 == 0 {
				startCommit(fmt.Sprintf("files from %d", n))
			}
			data, err := os.ReadFile(p)
			if err != nil {
				b.Fatal(err)
			}
			if round > 0 {
				data = append(data, fmt.Sprintf("\n// copy %d\n", round)...)
			}
			rel, _ := filepath.Rel(cache, p)
			name := fmt.Sprintf("r%d/%s", round, filepath.ToSlash(rel))
			put(name, data)
			if len(content) < 200 {
				content[name] = data
			}
			n++
			size += int64(len(data))
		}
	}
	for c := range 3 {
		startCommit(fmt.Sprintf("change %d", c))
		k := 0
		for name, data := range content {
			if k == 50 {
				break
			}
			content[name] = append(data, fmt.Sprintf("\n// change %d\n", c)...)
			put(name, content[name])
			k++
		}
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatalf("fast-import: %v", err)
	}
	return dir, n, size
}
