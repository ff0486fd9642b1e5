// Package backoff paces the tries of something that failed: waits that
// double from a first one up to a longest one.
package backoff

import (
	"context"
	"time"
)

// Backoff is the waits between tries; the zero value is not usable: set
// First and Most.
type Backoff struct {
	First, Most time.Duration
	next        time.Duration // the next wait; 0: First
}

// Reconnect is the pace of the tries to get a sandbox back (a dropped
// connection, a plugin that died): 200 ms, doubling up to 5 s.
func Reconnect() Backoff {
	return Backoff{First: 200 * time.Millisecond, Most: 5 * time.Second}
}

// Next is the wait Wait would wait now.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		return b.First
	}
	return b.next
}

// Wait waits the next wait, and doubles the one after it (up to Most);
// false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	d := b.Next()
	b.next = min(2*d, b.Most)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Reset makes the next wait First again: what was tried went well.
func (b *Backoff) Reset() { b.next = 0 }
