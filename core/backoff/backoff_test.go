package backoff_test

import (
	"context"
	"testing"
	"time"

	"github.com/amelia-sandbox/amelia/core/backoff"
)

// The waits double from First to Most, start over after Reset, and a
// ctx that ended cuts one short.
func TestBackoff(t *testing.T) {
	b := backoff.Backoff{First: time.Millisecond, Most: 4 * time.Millisecond}
	var got []time.Duration
	for range 4 {
		got = append(got, b.Next())
		if !b.Wait(t.Context()) {
			t.Fatal("Wait ended early with a live ctx")
		}
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	b.Reset()
	if b.Next() != time.Millisecond {
		t.Errorf("after Reset the next wait is %v, want First", b.Next())
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	long := backoff.Backoff{First: time.Hour, Most: time.Hour}
	if long.Wait(ctx) {
		t.Error("Wait with an ended ctx said it waited")
	}
}
