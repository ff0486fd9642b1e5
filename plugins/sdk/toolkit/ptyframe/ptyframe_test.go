package ptyframe_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/amelia-sandbox/amelia/plugins/sdk/toolkit/ptyframe"
)

// What goes into an Input comes out of Decode: the input bytes in order,
// the sizes as they were sent; Close ends it.
func TestInputRoundTrip(t *testing.T) {
	inR, inW := io.Pipe()
	sizes := make(chan ptyframe.Size)
	x := ptyframe.NewInput(inR, sizes)
	type event struct {
		data string
		size ptyframe.Size
	}
	events := make(chan event, 16)
	decoded := make(chan error, 1)
	go func() {
		decoded <- ptyframe.Decode(x, func(p []byte) error {
			events <- event{data: string(p)}
			return nil
		}, func(sz ptyframe.Size) { events <- event{size: sz} })
	}()
	inW.Write([]byte("ls -l\r"))
	if e := <-events; e.data != "ls -l\r" {
		t.Errorf("first frame: %+v, want the input", e)
	}
	sizes <- ptyframe.Size{Rows: 41, Cols: 133}
	if e := <-events; e.size != (ptyframe.Size{Rows: 41, Cols: 133}) {
		t.Errorf("second frame: %+v, want the size 41x133", e)
	}
	big := strings.Repeat("x", 100<<10) // more than one read
	go inW.Write([]byte(big))
	var got strings.Builder
	for got.Len() < len(big) {
		got.WriteString((<-events).data)
	}
	if got.String() != big {
		t.Error("100 KiB of input did not come through whole")
	}
	x.Close()
	if err := <-decoded; err != nil {
		t.Errorf("Decode at the end of the input: %v, want nil", err)
	}
}

func TestDecodeRefusesBadFrames(t *testing.T) {
	for name, in := range map[string][]byte{
		"unknown type":    {'q', 0, 0, 0, 0},
		"short size":      {'z', 0, 0, 0, 2, 0, 1},
		"too long":        {'d', 0x7f, 0, 0, 0},
		"cut in the body": {'d', 0, 0, 0, 9, 'a'},
	} {
		err := ptyframe.Decode(bytes.NewReader(in), func([]byte) error { return nil }, func(ptyframe.Size) {})
		if err == nil {
			t.Errorf("%s: Decode accepted it", name)
		}
	}
}
