package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func BenchmarkReadFile(b *testing.B) {
	var content strings.Builder
	for i := range 50 {
		fmt.Fprintf(&content, "line %d: some ordinary source code text\n", i)
	}
	dir := b.TempDir()
	s, err := New(dir, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if res := s.Call(ctx, "write_file", json.RawMessage(`{"file_path": "src/main.go", "content": `+quoteJSON(content.String())+`}`)); res.IsError {
		b.Fatal(res.Output)
	}
	args := json.RawMessage(`{"file_path": "src/main.go"}`)
	b.ReportAllocs()
	for b.Loop() {
		if res := s.Call(ctx, "read_file", args); res.IsError {
			b.Fatal(res.Output)
		}
	}
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
