package docker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// stdoutReader gives what stdcopy.StdCopy writes to stdout, however the
// pieces and the reads fall.
func TestStdoutReaderMatchesStdCopy(t *testing.T) {
	var stream bytes.Buffer
	for i := range 200 {
		piece(&stream, stdcopy.Stdout, bytes.Repeat([]byte{byte(i)}, 1+i*397%70000))
		if i%3 == 0 {
			piece(&stream, stdcopy.Stderr, []byte(strings.Repeat("e", i)))
		}
	}
	var want bytes.Buffer
	if _, err := stdcopy.StdCopy(&want, io.Discard, bytes.NewReader(stream.Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    io.Reader
	}{
		{"whole", bytes.NewReader(stream.Bytes())},
		{"a byte at a time", iotest.OneByteReader(bytes.NewReader(stream.Bytes()))},
		{"half reads", iotest.HalfReader(bytes.NewReader(stream.Bytes()))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(newStdoutReader(tc.r))
			if err != nil || !bytes.Equal(got, want.Bytes()) {
				t.Errorf("read %d bytes (%v), want the %d StdCopy wrote", len(got), err, want.Len())
			}
		})
	}
}

// A stream cut inside a piece, and the engine's own error, are errors.
func TestStdoutReaderErrors(t *testing.T) {
	var stream bytes.Buffer
	piece(&stream, stdcopy.Stdout, []byte("hello"))
	cut := stream.Bytes()[:stream.Len()-2]
	if _, err := io.ReadAll(newStdoutReader(bytes.NewReader(cut))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v, want io.ErrUnexpectedEOF", err)
	}
	piece(&stream, stdcopy.Systemerr, []byte("boom"))
	if _, err := io.ReadAll(newStdoutReader(&stream)); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("system error: %v, want it", err)
	}
}

// piece appends p to stream as the engine frames a piece of stream typ.
func piece(stream *bytes.Buffer, typ stdcopy.StdType, p []byte) {
	stream.Write(binary.BigEndian.AppendUint32([]byte{byte(typ), 0, 0, 0}, uint32(len(p))))
	stream.Write(p)
}
