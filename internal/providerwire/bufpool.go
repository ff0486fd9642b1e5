package providerwire

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// bufferPool is the mem.BufferPool gRPC marshals and receives messages with:
// power-of-two sized buffers, not zeroed on reuse. gRPC's exported pools zero
// every buffer they hand out, which cost a fifth of the plugin's CPU when
// streaming exec output (pipe-sized 64 KiB messages). gRPC overwrites
// exactly the length it asks for (marshal fills it, reads fill it), so stale
// bytes are never read. Buffers above 4 MiB are not pooled.
type bufferPool struct {
	tiers [maxPooledExp + 1]sync.Pool
}

const maxPooledExp = 22 // 4 MiB

func newBufferPool() mem.BufferPool { return &bufferPool{} }

// tier is the exponent of the smallest power of two holding size.
func tier(size int) int {
	if size <= 1 {
		return 0
	}
	return bits.Len(uint(size - 1))
}

func (p *bufferPool) Get(size int) *[]byte {
	e := tier(size)
	if e <= maxPooledExp {
		if b, ok := p.tiers[e].Get().(*[]byte); ok {
			*b = (*b)[:size]
			return b
		}
		b := make([]byte, size, 1<<e)
		return &b
	}
	b := make([]byte, size)
	return &b
}

func (p *bufferPool) Put(b *[]byte) {
	c := cap(*b)
	if e := tier(c); e <= maxPooledExp && c == 1<<e {
		p.tiers[e].Put(b)
	}
}

// codec is gRPC's proto codec, but with bufferPool for marshalling: gRPC's
// own codec always takes buffers from its global default pool, which zeroes
// them. It is set per server and per connection, never globally.
type codec struct {
	pool mem.BufferPool
}

func (codec) Name() string { return "proto" }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("sdk codec: cannot marshal %T", v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := proto.Marshal(m)
		return mem.BufferSlice{mem.SliceBuffer(b)}, err
	}
	buf := c.pool.Get(size)
	if _, err := (proto.MarshalOptions{}).MarshalAppend((*buf)[:0], m); err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("sdk codec: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	// proto.Unmarshal copies bytes fields, so buf can go back to the pool.
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
