package protocol_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/core/protocol"
)

// docBlocks returns the JSON code blocks of docs/protocol.md.
func docBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(b), "```json\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		blocks = append(blocks, block)
	}
	return blocks
}

// docs/protocol.md's examples are what the worker writes and reads: each
// message line decodes and encodes again to the same bytes, and the
// WorkerRequest is one AppendRequest writes.
func TestDocsExamples(t *testing.T) {
	blocks := docBlocks(t)
	var lines, requests int
	for _, block := range blocks {
		for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
			switch {
			case strings.HasPrefix(line, `{"type":`):
				lines++
				m, err := protocol.NewDecoder(strings.NewReader(line)).Decode()
				if err != nil {
					t.Errorf("docs/protocol.md: %s\n\t%v", line, err)
					continue
				}
				out, err := protocol.AppendJSON(nil, m)
				if err != nil || string(out) != line {
					t.Errorf("docs/protocol.md: %s\n\tencodes again as %s (%v)", line, out, err)
				}
			case strings.HasPrefix(line, `{"mode":`):
				requests++
				var frame []byte
				frame = binary.BigEndian.AppendUint32(frame, uint32(len(line)))
				frame = append(frame, line...)
				r, err := protocol.ReadRequest(bytes.NewReader(frame))
				if err != nil {
					t.Errorf("docs/protocol.md: %s\n\t%v", line, err)
					continue
				}
				out, err := protocol.AppendRequest(nil, r)
				if err != nil || !bytes.Equal(out, frame) {
					t.Errorf("docs/protocol.md: %s\n\tframes again as %q (%v)", line, out, err)
				}
			}
		}
	}
	if lines < 3 || requests < 1 {
		t.Errorf("found %d message lines and %d requests in docs/protocol.md's JSON blocks", lines, requests)
	}
}
