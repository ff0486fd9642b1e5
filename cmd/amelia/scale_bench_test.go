package main_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// scaleRuns is how many runs BenchmarkTwentyRunsOnDocker starts at once.
const scaleRuns = 20

// BenchmarkTwentyRunsOnDocker: 20 `amelia run`s at once on one shared
// docker sandbox, against the same 20 runs each in a sandbox of its own
// (20 warm containers) and against one run alone, on warm sandboxes with
// a scripted model that answers at once. It reports the walls, the ratios
// (shared/separate, target ≤ 1.2; shared/one, target ≤ 4) and the host's
// memory per concurrent run at its peak: the sum of the resident sets of
// every amelia process and its plugin, and the sum of their proportional
// sets (PSS: pages the processes share, the binary's among them, counted
// once across them), each divided by the number of runs.
//
//	go test -run='^$' -bench=TwentyRunsOnDocker -benchtime=1x ./cmd/amelia/
func BenchmarkTwentyRunsOnDocker(b *testing.B) {
	cli := dockertest.Engine(b)
	var a arrivals
	h := newHostWith(b, dockerSandbox("open"), "", llmtest.Options{Script: a.script, Forget: true, Light: true})
	dockertest.RemoveContainers(b, cli, "amelia.config="+h.configPath())
	for i := range scaleRuns {
		h.addProfileYAML(b, fmt.Sprintf("  own%d:\n    model: test-model\n    llm: {base_url: %q, api_key_env: AMELIA_E2E_KEY}\n    sandbox: %s\n",
			i, h.up.URL()+"/v1", dockerSandbox("open")))
	}
	// Every sandbox up and warm: one run each, all at once.
	warm := func(profile string) {
		if r := h.amelia(b, "run", "--json", "--profile", profile, "--workflow", "warm-"+profile, "warm up"); r.code != 0 {
			b.Errorf("warm-up run on %s: exit %d: %s", profile, r.code, r.stderr)
		}
	}
	warm("e2e") // builds the image once
	var wg sync.WaitGroup
	for i := range scaleRuns {
		wg.Go(func() { warm(fmt.Sprintf("own%d", i)) })
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}

	var one, shared, separate time.Duration
	var rss, pss int64
	round := 0
	for b.Loop() {
		start := time.Now()
		if r := h.amelia(b, "run", "--json", "--workflow", fmt.Sprintf("one-%d", round), "answer"); r.code != 0 {
			b.Fatalf("the run alone: exit %d: %s", r.code, r.stderr)
		}
		one += time.Since(start)
		wall, r, p := h.runsAtOnce(b, func(i int) []string {
			return []string{"run", "--json", "--workflow", fmt.Sprintf("shared-%d-%d", round, i), "answer"}
		})
		shared, rss, pss = shared+wall, max(rss, r), max(pss, p)
		wall, _, _ = h.runsAtOnce(b, func(i int) []string {
			return []string{"run", "--json", "--profile", fmt.Sprintf("own%d", i), "--workflow", fmt.Sprintf("own-%d-%d", round, i), "answer"}
		})
		separate += wall
		round++
	}
	rounds := float64(round)
	b.ReportMetric(ms(one)/rounds, "one-run-ms")
	b.ReportMetric(ms(shared)/rounds, "shared-20-ms")
	b.ReportMetric(ms(separate)/rounds, "separate-20-ms")
	b.ReportMetric(float64(shared)/float64(separate), "x-separate")
	b.ReportMetric(float64(shared)/float64(one), "x-one-run")
	b.ReportMetric(float64(rss)/scaleRuns/(1<<20), "rss-MB/run")
	b.ReportMetric(float64(pss)/scaleRuns/(1<<20), "pss-MB/run")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRunToFirstRequestOnDocker is BenchmarkRunToFirstRequest on a
// warm docker sandbox: from starting amelia run to the worker's first LLM
// request, p50, against `amelia sandbox exec -- true` on the same sandbox
// (target ≤ 1.5×).
//
//	go test -run='^$' -bench=RunToFirstRequestOnDocker -benchtime=10x ./cmd/amelia/
func BenchmarkRunToFirstRequestOnDocker(b *testing.B) {
	cli := dockertest.Engine(b)
	var a arrivals
	h := newHostWith(b, dockerSandbox("open"), "", llmtest.Options{Script: a.script, Forget: true, Light: true})
	dockertest.RemoveContainers(b, cli, "amelia.config="+h.configPath())
	runToFirstRequest(b, h, &a)
}

// runsAtOnce starts scaleRuns amelia commands at once (args(i) each),
// waits for all, and returns the wall time and the peak, over the time
// they ran, of the summed RSS and PSS (bytes) of those processes and
// their children (each run's provider plugin). Every run must succeed.
func (h *host) runsAtOnce(b *testing.B, args func(i int) []string) (wall time.Duration, rss, pss int64) {
	b.Helper()
	type ended struct {
		i   int
		err error
		out string
	}
	pids := make([]int, scaleRuns)
	done := make(chan ended, scaleRuns)
	start := time.Now()
	for i := range scaleRuns {
		cmd := h.command(args(i)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			b.Fatalf("start run %d: %v", i, err)
		}
		pids[i] = cmd.Process.Pid
		go func() {
			err := cmd.Wait()
			done <- ended{i, err, out.String()}
		}()
	}
	// Sample the memory until every run ended: a benchmark's figure, not a
	// test's wait.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for left := scaleRuns; left > 0; {
		select {
		case e := <-done:
			left--
			if e.err != nil {
				b.Errorf("run %d: %v: %s", e.i, e.err, e.out)
			}
			if left == 0 {
				wall = time.Since(start)
			}
		case <-tick.C:
			r, p := treeMemory(pids)
			rss, pss = max(rss, r), max(pss, p)
		}
	}
	if b.Failed() {
		b.FailNow()
	}
	return wall, rss, pss
}

// treeMemory sums Rss and Pss (bytes) of the processes pids and their
// children, from /proc/PID/smaps_rollup; processes gone meanwhile count
// nothing.
func treeMemory(pids []int) (rss, pss int64) {
	roots := map[int]bool{}
	for _, p := range pids {
		roots[p] = true
	}
	all := append([]int(nil), pids...)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || roots[pid] {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The parent pid is the second field after the command's ")".
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
				if ppid, _ := strconv.Atoi(f[1]); roots[ppid] {
					all = append(all, pid)
				}
			}
		}
	}
	for _, pid := range all {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "Rss:":
				rss += kb << 10
			case "Pss:":
				pss += kb << 10
			}
		}
	}
	return rss, pss
}
