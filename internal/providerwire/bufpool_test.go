package providerwire

import (
	"bytes"
	"testing"

	"google.golang.org/grpc/mem"

	pb "github.com/amelia-sandbox/amelia/internal/providerwire/providerv1"
)

func TestBufferPoolSizes(t *testing.T) {
	p := newBufferPool()
	for _, size := range []int{0, 1, 2, 1000, 32 << 10, 32<<10 + 1, 64 << 10, 4 << 20, 4<<20 + 1} {
		b := p.Get(size)
		if len(*b) != size || cap(*b) < size {
			t.Errorf("Get(%d): len %d cap %d", size, len(*b), cap(*b))
		}
		p.Put(b)
	}
	big := make([]byte, 100) // not a power of two: must not be handed out as one
	p.Put(&big)
	if b := p.Get(100); cap(*b) != 128 {
		t.Errorf("Get(100) after Put of a 100-byte buffer: cap %d, want 128", cap(*b))
	}
}

func TestCodecRoundTrip(t *testing.T) {
	c := codec{newBufferPool()}
	for _, n := range []int{10, 300 << 10} { // below and above gRPC's pooling threshold
		data := bytes.Repeat([]byte{0xab}, n)
		in := &pb.ExecResponse{Msg: &pb.ExecResponse_Output{Output: &pb.Output{Stream: pb.Stream_STREAM_STDERR, Data: data}}}
		enc, err := c.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var out pb.ExecResponse
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(enc.Materialize())}, &out); err != nil {
			t.Fatal(err)
		}
		enc.Free()
		if got := out.GetOutput(); got.GetStream() != pb.Stream_STREAM_STDERR || !bytes.Equal(got.GetData(), data) {
			t.Errorf("%d bytes: round trip gave stream %v and %d bytes", n, got.GetStream(), len(got.GetData()))
		}
	}
}
