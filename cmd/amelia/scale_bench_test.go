package main_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/amelia-sandbox/amelia/internal/dockertest"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/sharedtest"
)

// scaleRuns is how many runs BenchmarkTwentyRunsOnDocker starts at once.
const scaleRuns = 20

// BenchmarkTwentyRunsOnDocker: 20 `amelia run`s at once on one shared
// docker sandbox, against the same 20 runs each in a sandbox of its own
// (20 warm containers) and against one run alone, on warm sandboxes with
// a scripted model that answers at once. It reports the walls, the ratios
// (shared/separate, target ≤ 1.2; shared/one, target ≤ 4) and the host's
// memory per concurrent run at its peak: the sum of the resident sets of
// every amelia process and of the provider plugins they use, and the sum
// of their proportional sets (PSS: pages the processes share, the
// binary's among them, counted once across them), each divided by the
// number of runs (target ≤ 25 MB RSS). The runs share their profile's
// plugin process (pluginclient.Share); the same 20 runs with a plugin process
// each (sandbox.shared_plugin: false, as before sharing) are the
// baseline of the memory, of the count of plugin processes and of the
// wall (own-plugins-20-ms).
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

	var one, shared, own, separate time.Duration
	var ours, base peak
	round := 0
	for b.Loop() {
		// The e2e profile's runs find no plugin: the run alone starts the
		// one the 20 then share, and only it is measured with them.
		sharedtest.Stop(b, h.tmp)
		start := time.Now()
		if r := h.amelia(b, "run", "--json", "--workflow", fmt.Sprintf("one-%d", round), "answer"); r.code != 0 {
			b.Fatalf("the run alone: exit %d: %s", r.code, r.stderr)
		}
		one += time.Since(start)
		wall, p := h.runsAtOnce(b, nil, func(i int) []string {
			return []string{"run", "--json", "--workflow", fmt.Sprintf("shared-%d-%d", round, i), "answer"}
		})
		shared, ours = shared+wall, ours.max(p)
		sharedtest.Stop(b, h.tmp) // the baseline has no shared plugin
		wall, p = h.runsAtOnce(b, []string{"AMELIA_PROFILES__E2E__SANDBOX__SHARED_PLUGIN=false"}, func(i int) []string {
			return []string{"run", "--json", "--workflow", fmt.Sprintf("own-plugin-%d-%d", round, i), "answer"}
		})
		own, base = own+wall, base.max(p)
		wall, _ = h.runsAtOnce(b, nil, func(i int) []string {
			return []string{"run", "--json", "--profile", fmt.Sprintf("own%d", i), "--workflow", fmt.Sprintf("own-%d-%d", round, i), "answer"}
		})
		separate += wall
		round++
	}
	rounds := float64(round)
	b.ReportMetric(ms(one)/rounds, "one-run-ms")
	b.ReportMetric(ms(shared)/rounds, "shared-20-ms")
	b.ReportMetric(ms(own)/rounds, "own-plugins-20-ms")
	b.ReportMetric(ms(separate)/rounds, "separate-20-ms")
	b.ReportMetric(float64(shared)/float64(separate), "x-separate")
	b.ReportMetric(float64(shared)/float64(one), "x-one-run")
	b.ReportMetric(float64(ours.rss)/scaleRuns/(1<<20), "rss-MB/run")
	b.ReportMetric(float64(ours.pss)/scaleRuns/(1<<20), "pss-MB/run")
	b.ReportMetric(float64(base.rss)/scaleRuns/(1<<20), "own-plugin-rss-MB/run")
	b.ReportMetric(float64(base.pss)/scaleRuns/(1<<20), "own-plugin-pss-MB/run")
	b.ReportMetric(float64(ours.rss)/float64(base.rss), "x-rss")
	b.ReportMetric(float64(ours.pss)/float64(base.pss), "x-pss")
	b.ReportMetric(float64(ours.plugins), "plugins")
	b.ReportMetric(float64(base.plugins), "own-plugins")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRunToFirstRequestOnDocker is BenchmarkRunToFirstRequest on a
// warm docker sandbox: from starting amelia run to the worker's first LLM
// request, p50, against `amelia sandbox exec -- true` on the same sandbox
// (target ≤ 1.5×), and against the engine's own exec of `true` in that
// container, as `docker exec` makes it (create, attach, inspect) without
// the CLI's start (raw-exec-true).
//
//	go test -run='^$' -bench=RunToFirstRequestOnDocker -benchtime=10x ./cmd/amelia/
func BenchmarkRunToFirstRequestOnDocker(b *testing.B) {
	cli := dockertest.Engine(b)
	var a arrivals
	h := newHostWith(b, dockerSandbox("open"), "", llmtest.Options{Script: a.script, Forget: true, Light: true})
	label := "amelia.config=" + h.configPath()
	dockertest.RemoveContainers(b, cli, label)
	container := ""
	runToFirstRequest(b, h, &a, func() time.Duration {
		if container == "" {
			list, err := cli.ContainerList(b.Context(), client.ContainerListOptions{Filters: make(client.Filters).Add("label", label)})
			if err != nil || len(list.Items) != 1 {
				b.Fatalf("find the sandbox's container: %v (%d found)", err, len(list.Items))
			}
			container = list.Items[0].ID
		}
		return engineExecTrue(b, cli, container)
	})
}

// engineExecTrue runs `true` in container through the Engine API as the
// docker CLI does (create, attach, read to the end, inspect) and returns
// how long that took.
func engineExecTrue(b *testing.B, cli *client.Client, container string) time.Duration {
	start := time.Now()
	x, err := cli.ExecCreate(b.Context(), container, client.ExecCreateOptions{Cmd: []string{"true"}, AttachStdout: true, AttachStderr: true})
	if err != nil {
		b.Fatalf("engine exec: %v", err)
	}
	att, err := cli.ExecAttach(b.Context(), x.ID, client.ExecAttachOptions{})
	if err != nil {
		b.Fatalf("engine exec: %v", err)
	}
	_, _ = io.Copy(io.Discard, att.Reader)
	att.Close()
	// The engine may record the exit a moment after the streams end.
	res, err := cli.ExecInspect(b.Context(), x.ID, client.ExecInspectOptions{})
	for err == nil && res.Running {
		res, err = cli.ExecInspect(b.Context(), x.ID, client.ExecInspectOptions{})
	}
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("engine exec: %+v, %v", res, err)
	}
	return time.Since(start)
}

// peak is the most a round of runs held of the host's memory (bytes) and
// plugin processes.
type peak struct {
	rss, pss int64
	plugins  int
}

func (p peak) max(q peak) peak {
	return peak{max(p.rss, q.rss), max(p.pss, q.pss), max(p.plugins, q.plugins)}
}

// runsAtOnce starts scaleRuns amelia commands at once (args(i) each, env
// added to the host's), waits for all, and returns the wall time and the
// peak, over the time they ran, of the summed RSS and PSS of those
// processes, their children (a run's own provider plugin) and the shared
// plugins of the host, and of the number of plugin processes among them.
// Every run must succeed.
func (h *host) runsAtOnce(b *testing.B, env []string, args func(i int) []string) (wall time.Duration, most peak) {
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
		cmd.Env = append(slices.Clip(cmd.Env), env...)
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
			most = most.max(treeMemory(append(pids, sharedtest.Plugins(h.tmp)...)))
		}
	}
	if b.Failed() {
		b.FailNow()
	}
	return wall, most
}

// treeMemory sums Rss and Pss (bytes) of the processes pids and their
// children, each once, from /proc/PID/smaps_rollup, and counts the
// provider plugins among them; processes gone meanwhile count nothing.
func treeMemory(pids []int) (p peak) {
	all := map[int]bool{}
	for _, pid := range pids {
		all[pid] = true
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || all[pid] {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The parent pid is the second field after the command's ")".
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 {
			if f := strings.Fields(string(stat[i+1:])); len(f) > 1 {
				if ppid, _ := strconv.Atoi(f[1]); slices.Contains(pids, ppid) {
					all[pid] = true
				}
			}
		}
	}
	for pid := range all {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
		if err != nil {
			continue
		}
		if cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); strings.Contains(string(cmdline), "\x00plugin\x00serve\x00") {
			p.plugins++
		}
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			switch f[0] {
			case "Rss:":
				p.rss += kb << 10
			case "Pss:":
				p.pss += kb << 10
			}
		}
	}
	return p
}
