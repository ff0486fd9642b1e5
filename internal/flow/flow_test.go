package flow

import "testing"

// A queue takes what its window holds and refuses more, delivers in order
// and its end after what is queued, and makes room only when a chunk is
// consumed, not when it is taken.
func TestQueue(t *testing.T) {
	q := NewQueue(10)
	if !q.Push([]byte("abcd")) || !q.Push([]byte("efgh")) || q.Push([]byte("ijk")) {
		t.Fatal("a queue of 10 bytes took more than 10, or refused what fits")
	}
	b, ok := q.Next()
	if !ok || string(b) != "abcd" {
		t.Fatalf("Next = %q, %v", b, ok)
	}
	if q.Push([]byte("ijk")) {
		t.Error("room came back before the chunk was consumed")
	}
	q.Consumed(len(b))
	if !q.Push([]byte("ijk")) {
		t.Error("no room after the chunk was consumed")
	}
	q.Close()
	for _, want := range []string{"efgh", "ijk"} {
		if b, ok := q.Next(); !ok || string(b) != want {
			t.Errorf("after Close, Next = %q, %v; want %q", b, ok, want)
		}
	}
	if _, ok := q.Next(); ok {
		t.Error("Next after the end gave a chunk")
	}
	var none *Queue
	if !none.Push([]byte("x")) {
		t.Error("a nil queue refused input")
	}
	none.Close()
	none.Stop()
}

// Take waits for credit a Give returns, and Close releases a waiter (the
// envelope's and the shim's tests show a sender stays within the window).
func TestCredit(t *testing.T) {
	c := NewCredit(8)
	if !c.Take(8) {
		t.Fatal("Take within the window failed")
	}
	got := make(chan bool)
	go func() { got <- c.Take(4) }()
	c.Give(4)
	if !<-got {
		t.Error("Take after Give failed")
	}
	go func() { got <- c.Take(8) }()
	c.Close()
	if <-got {
		t.Error("Take on a closed credit succeeded")
	}
}
