package worker_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/internal/llmtest"
)

// BenchmarkStartToFirstLine: from starting amelia-worker agentic to its
// first stdout line (the model's first answer, through the scripted server),
// p50 (target: under 20 ms). The baseline is the same binary's bare start to
// its first line, `amelia-worker version`.
func BenchmarkStartToFirstLine(b *testing.B) {
	srv := llmtest.NewWithOptions(b, llmtest.Options{Forget: true, Light: true, Script: func(i int, _ *llmtest.Request) llmtest.Turn {
		if i%2 == 0 {
			return llmtest.Turn{Text: "Looking.", ToolCalls: []llmtest.ToolCall{{Name: "ls", Arguments: `{}`}}}
		}
		return llmtest.Turn{Text: "done"}
	}})
	cwd := b.TempDir()
	prompt := filepath.Join(b.TempDir(), "p.txt")
	if err := os.WriteFile(prompt, []byte("look"), 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"AMELIA_PROXY_URL=" + srv.URL(), "AMELIA_PROXY_TOKEN=t", "HOME=" + cwd}
	var ours, bare []time.Duration
	for b.Loop() {
		ours = append(ours, firstLine(b, env, "agentic", "--prompt-file", prompt, "--cwd", cwd, "--model", "m"))
		bare = append(bare, firstLine(b, env, "version"))
	}
	o, v := p50(ours), p50(bare)
	b.ReportMetric(float64(o.Microseconds())/1000, "first-line-p50-ms")
	b.ReportMetric(float64(v.Microseconds())/1000, "bare-start-p50-ms")
	b.ReportMetric(float64(o)/float64(v), "x-bare")
	b.ReportMetric(0, "ns/op")
}

func firstLine(b *testing.B, env []string, args ...string) time.Duration {
	cmd := exec.Command(workerBin, args...)
	cmd.Env = env
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	r := bufio.NewReader(out)
	if _, err := r.ReadBytes('\n'); err != nil {
		b.Fatalf("%v: no first line: %v", args, err)
	}
	d := time.Since(start)
	r.WriteTo(io.Discard)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("%v: %v", args, err)
	}
	return d
}

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
