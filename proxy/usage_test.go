package proxy

import (
	"fmt"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestUsageSniffers(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    func() sniffer
		body string
		want usage
	}{
		{"chat completion", func() sniffer { return &jsonSniffer{} },
			`{"id":"x","usage":{"prompt_tokens":10,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":3,"cache_write_tokens":2},"cost":0.25}}`,
			usage{input: ptr[int64](10), output: ptr[int64](4), cacheRead: ptr[int64](3), cacheCreation: ptr[int64](2), cost: ptr(0.25)}},
		{"anthropic message", func() sniffer { return &jsonSniffer{} },
			`{"type":"message","usage":{"input_tokens":12,"output_tokens":6,"cache_read_input_tokens":5,"cache_creation_input_tokens":1}}`,
			usage{input: ptr[int64](12), output: ptr[int64](6), cacheRead: ptr[int64](5), cacheCreation: ptr[int64](1)}},
		{"no usage", func() sniffer { return &jsonSniffer{} }, `{"data":[]}`, usage{}},
		{"not JSON", func() sniffer { return &jsonSniffer{} }, `<html>`, usage{}},
		{"chat stream", func() sniffer { return &sseSniffer{} },
			"data: {\"choices\":[{\"delta\":{\"content\":\"usage\"}}],\"usage\":null}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\r\n\r\n" +
				"data: [DONE]\n\n",
			usage{input: ptr[int64](7), output: ptr[int64](2)}},
		{"anthropic stream", func() sniffer { return &sseSniffer{} },
			"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":30,\"output_tokens\":1}}}\n\n" +
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n",
			usage{input: ptr[int64](30), output: ptr[int64](9)}},
		{"responses stream", func() sniffer { return &sseSniffer{} },
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":8,\"output_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":2}}}}\n\n",
			usage{input: ptr[int64](8), output: ptr[int64](3), cacheRead: ptr[int64](2)}},
		{"gemini response", func() sniffer { return &jsonSniffer{} },
			`{"candidates":[],"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":5,"thoughtsTokenCount":3,"cachedContentTokenCount":8,"totalTokenCount":28}}`,
			usage{input: ptr[int64](20), output: ptr[int64](8), cacheRead: ptr[int64](8)}},
		{"gemini stream as a JSON array", func() sniffer { return &jsonSniffer{} },
			`[{"usageMetadata":{"promptTokenCount":20,"totalTokenCount":20}},` + "\n" + `{"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":4,"totalTokenCount":24}}]`,
			usage{input: ptr[int64](20), output: ptr[int64](4)}},
		// Each chunk holds the counts so far: the last one's stand.
		{"gemini stream", func() sniffer { return &sseSniffer{} },
			"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"usage\"}]}}],\"usageMetadata\":{\"promptTokenCount\":40,\"cachedContentTokenCount\":16,\"totalTokenCount\":40}}\r\n\r\n" +
				"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]}}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":2,\"cachedContentTokenCount\":16,\"totalTokenCount\":42}}\r\n\r\n" +
				"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"c\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":6,\"cachedContentTokenCount\":16,\"totalTokenCount\":46}}\r\n\r\n",
			usage{input: ptr[int64](40), output: ptr[int64](6), cacheRead: ptr[int64](16)}},
		{"last line without newline", func() sniffer { return &sseSniffer{} },
			"data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}", usage{input: ptr[int64](1), output: ptr[int64](1)}},
	} {
		// Every way of splitting the body into two writes gives the same.
		for cut := 0; cut <= len(tc.body); cut++ {
			s := tc.s()
			s.write([]byte(tc.body[:cut]))
			s.write([]byte(tc.body[cut:]))
			if got := s.result(); !sameUsage(*got, tc.want) {
				t.Fatalf("%s, split at %d: got %s, want %s", tc.name, cut, show(*got), show(tc.want))
			}
		}
	}
}

func TestSnifferBounds(t *testing.T) {
	s := &jsonSniffer{}
	s.write([]byte(`{"usage":{"prompt_tokens":1},"pad":"`))
	s.write([]byte(strings.Repeat("x", maxSniff)))
	if u := s.result(); u.input != nil || s.buf != nil {
		t.Errorf("an oversized body was kept or read: %s", show(*u))
	}
	sse := &sseSniffer{}
	sse.write([]byte("data: " + strings.Repeat("x", maxSniff+10)))
	sse.write([]byte("\ndata: {\"usage\":{\"prompt_tokens\":5}}\n"))
	if u := sse.result(); u.input == nil || *u.input != 5 || cap(sse.line) > 2*maxSniff {
		t.Errorf("after an oversized line: %s", show(*u))
	}
}

func sameUsage(a, b usage) bool {
	eq := func(x, y *int64) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return eq(a.input, b.input) && eq(a.output, b.output) && eq(a.cacheRead, b.cacheRead) && eq(a.cacheCreation, b.cacheCreation) &&
		(a.cost == nil) == (b.cost == nil) && (a.cost == nil || *a.cost == *b.cost)
}

func show(u usage) string {
	f := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("in=%s out=%s cacheRead=%s cacheCreation=%s", f(u.input), f(u.output), f(u.cacheRead), f(u.cacheCreation))
}
