// Package flow is the credit window of a stream of input, kept by both
// ends: the sender sends only what the receiver has room for, so the
// receiver can always queue what comes and never stops reading the
// stream, where a cancel may follow. The provider gRPC shim and the exec
// envelope each carry an exec's stdin this way.
package flow

import "sync"

// Credit is how much input a sender may still send unacknowledged.
type Credit struct {
	mu     sync.Mutex
	more   *sync.Cond
	avail  int
	closed bool
}

// NewCredit is a sender's credit for a receiver's window of window bytes.
func NewCredit(window int) *Credit {
	c := &Credit{avail: window}
	c.more = sync.NewCond(&c.mu)
	return c
}

// Take waits for n bytes of credit; false means the stream is over.
func (c *Credit) Take(n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.avail < n && !c.closed {
		c.more.Wait()
	}
	c.avail -= n
	return !c.closed
}

// Give returns n bytes the receiver acknowledged.
func (c *Credit) Give(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.avail += n
	c.more.Broadcast()
}

// Close ends the stream: Take returns false from now on.
func (c *Credit) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.more.Broadcast()
}

// Queue holds the input a receiver got and its consumer has not taken
// yet; it counts a chunk until Consumed, as the sender's credit does, so
// it never holds more than the window. A nil Queue (a stream without
// input) ignores everything.
type Queue struct {
	window  int
	mu      sync.Mutex
	ready   *sync.Cond
	chunks  [][]byte
	size    int
	eof     bool // the input ended (or its sender went away)
	stopped bool // nothing more is delivered
}

// NewQueue is a receiver's queue for a window of window bytes.
func NewQueue(window int) *Queue {
	q := &Queue{window: window}
	q.ready = sync.NewCond(&q.mu)
	return q
}

// Push queues a chunk; false means the sender exceeded its credit.
func (q *Queue) Push(b []byte) bool {
	if q == nil {
		return true
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.size+len(b) > q.window {
		return false
	}
	q.chunks = append(q.chunks, b)
	q.size += len(b)
	q.ready.Signal()
	return true
}

// Close marks the end of the input: what is queued is still delivered.
func (q *Queue) Close() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.eof = true
	q.ready.Signal()
}

// Stop ends delivery at once.
func (q *Queue) Stop() {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.stopped = true
	q.ready.Signal()
}

// Next waits for the next chunk; false means the input ended or delivery
// stopped.
func (q *Queue) Next() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.chunks) == 0 && !q.eof && !q.stopped {
		q.ready.Wait()
	}
	if len(q.chunks) == 0 || q.stopped {
		return nil, false
	}
	b := q.chunks[0]
	q.chunks = q.chunks[1:]
	return b, true
}

// Consumed frees the room of a chunk the consumer took, whose credit goes
// back to the sender.
func (q *Queue) Consumed(n int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.size -= n
}
