package sdktest

import (
	"strings"
	"sync"
)

// Buffer collects what is written to it, safe for concurrent writers and
// readers: an exec's stdout and stderr, a plugin's log. The zero value is
// ready.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
