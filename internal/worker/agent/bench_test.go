package agent_test

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/protocol"
	"github.com/amelia-sandbox/amelia/internal/llmtest"
	"github.com/amelia-sandbox/amelia/internal/worker/agent"
	"github.com/amelia-sandbox/amelia/internal/worker/tools"
)

// BenchmarkToolRoundTrip: 10 000 read_file round trips through the agent
// loop (the model asks, the tool runs, both lines are written, the result
// goes back), against the scripted server, as 1 000 sessions of 10 turns.
// Each figure is wall time per call with the server's handler time taken
// out. The baseline does the same requests without the loop: a bare
// net/http client posts a request body of similar size to the same server,
// reads the same event stream to its end and reads the file. overhead is
// the difference, the loop's own cost per call (target: under 200 µs).
// long-µs/call is the loop's figure for 20 sessions of 100 turns, whose
// requests carry a long history (each message is encoded once, so the
// loop's cost should not grow with it).
func BenchmarkToolRoundTrip(b *testing.B) {
	dir := b.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, bytes.Repeat([]byte("package main // a line of code\n"), 20), 0o644); err != nil {
		b.Fatal(err)
	}
	set, err := tools.New(dir, tools.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer set.Close()

	var loop, long, bare float64
	for b.Loop() {
		loop = loopPerCall(b, set, 1000, 10)
		long = loopPerCall(b, set, 20, 100)
		bare = barePerCall(b, file, 10000)
	}
	b.ReportMetric(loop, "loop-µs/call")
	b.ReportMetric(bare, "bare-µs/call")
	b.ReportMetric(loop-bare, "overhead-µs/call")
	b.ReportMetric(loop/bare, "x-bare")
	b.ReportMetric(long, "long-µs/call")
	b.ReportMetric(0, "ns/op")
}

// readFileTurns scripts sessions of turns read_file calls and a final answer.
func readFileTurns(b *testing.B, turns int) *llmtest.Server {
	return llmtest.NewWithOptions(b, llmtest.Options{Forget: true, Light: true, Script: func(i int, _ *llmtest.Request) llmtest.Turn {
		if i%(turns+1) == turns {
			return llmtest.Turn{Text: "done"}
		}
		return llmtest.Turn{ToolCalls: []llmtest.ToolCall{{Name: "read_file", Arguments: `{"file_path": "main.go", "limit": 20}`}}}
	}})
}

// loopPerCall runs sessions agent runs of turns read_file calls each and
// returns the time per call in µs, the server's handler time taken out.
func loopPerCall(b *testing.B, set *tools.Set, sessions, turns int) float64 {
	srv := readFileTurns(b, turns)
	logger := slog.New(slog.DiscardHandler)
	a := &agent.Agentic{
		LLM: agent.NewLLM(srv.URL()+"/v1", "token", nil, logger), Tools: set, Model: "m",
		MaxTurns: turns + 1, Out: protocol.NewEncoder(io.Discard), Logger: logger,
	}
	start := time.Now()
	for range sessions {
		if err := a.Run(b.Context(), "read main.go"); err != nil {
			b.Fatal(err)
		}
	}
	ours := time.Since(start) - srv.HandlerTime()
	return float64(ours.Microseconds()) / float64(sessions*turns)
}

// barePerCall makes calls streaming requests with a bare net/http client,
// each followed by reading file, and returns the time per call in µs, the
// server's handler time taken out.
func barePerCall(b *testing.B, file string, calls int) float64 {
	srv := readFileTurns(b, calls)
	body := []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` +
		strings.Repeat("x", 8<<10) + `"}]}`)
	start := time.Now()
	for range calls {
		resp, err := http.Post(srv.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
		}
		resp.Body.Close()
		if _, err := os.ReadFile(file); err != nil {
			b.Fatal(err)
		}
	}
	ours := time.Since(start) - srv.HandlerTime()
	return float64(ours.Microseconds()) / float64(calls)
}
