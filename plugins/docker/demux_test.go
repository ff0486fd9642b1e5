package docker

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/moby/moby/api/pkg/stdcopy"
)

// runLog records the writes to two writers as runs of one stream's
// bytes, merging consecutive writes to the same one: what a reader of
// both in turn would see, whatever the sizes of the writes.
type runLog struct{ runs []run }

type run struct {
	stream int
	data   []byte
}

type runWriter struct {
	log    *runLog
	stream int
}

func (w runWriter) Write(p []byte) (int, error) {
	l := w.log
	if len(p) == 0 {
		return 0, nil
	}
	if n := len(l.runs); n > 0 && l.runs[n-1].stream == w.stream {
		l.runs[n-1].data = append(l.runs[n-1].data, p...)
	} else {
		l.runs = append(l.runs, run{w.stream, append([]byte(nil), p...)})
	}
	return len(p), nil
}

func (l *runLog) equal(o *runLog) bool {
	if len(l.runs) != len(o.runs) {
		return false
	}
	for i := range l.runs {
		if l.runs[i].stream != o.runs[i].stream || !bytes.Equal(l.runs[i].data, o.runs[i].data) {
			return false
		}
	}
	return true
}

// demuxOutput writes what stdcopy.StdCopy writes, to the same stream and
// in the same order, however the pieces and the reads fall.
func TestDemuxOutputMatchesStdCopy(t *testing.T) {
	var stream bytes.Buffer
	for i := range 300 {
		typ := stdcopy.Stdout
		if i%7 == 3 {
			typ = stdcopy.Stdin // StdCopy puts these on stdout
		}
		piece(&stream, typ, bytes.Repeat([]byte{byte(i)}, 1+i*397%70000))
		if i%3 == 0 {
			piece(&stream, stdcopy.Stderr, []byte(strings.Repeat("e", i)))
		}
		if i%50 == 0 {
			piece(&stream, stdcopy.Stdout, nil)
		}
	}
	want := &runLog{}
	if _, err := stdcopy.StdCopy(runWriter{want, 1}, runWriter{want, 2}, bytes.NewReader(stream.Bytes())); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		r    io.Reader
	}{
		{"whole", bytes.NewReader(stream.Bytes())},
		{"a byte at a time", iotest.OneByteReader(bytes.NewReader(stream.Bytes()))},
		{"half reads", iotest.HalfReader(bytes.NewReader(stream.Bytes()))},
		{"data with EOF", iotest.DataErrReader(bytes.NewReader(stream.Bytes()))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := &runLog{}
			if _, err := demuxOutput(runWriter{got, 1}, runWriter{got, 2}, tc.r); err != nil {
				t.Fatal(err)
			}
			if !got.equal(want) {
				t.Errorf("wrote %d runs, not the %d StdCopy wrote", len(got.runs), len(want.runs))
			}
		})
	}
}

// The engine's own error is an error; a failed write ends the copy
// with its error; a stream cut inside a piece ends as StdCopy's does.
func TestDemuxOutputErrors(t *testing.T) {
	var sys bytes.Buffer
	piece(&sys, stdcopy.Stdout, []byte("hello"))
	piece(&sys, stdcopy.Systemerr, []byte("boom"))
	var out bytes.Buffer
	if _, err := demuxOutput(&out, io.Discard, bytes.NewReader(sys.Bytes())); err == nil || !strings.Contains(err.Error(), "boom") || out.String() != "hello" {
		t.Errorf("system error: %v, %q written; want the error, after hello", err, out.String())
	}
	failed := errors.New("full")
	if _, err := demuxOutput(failWriter{failed}, io.Discard, bytes.NewReader(sys.Bytes())); !errors.Is(err, failed) {
		t.Errorf("failed write: %v, want %v", err, failed)
	}
	var cut bytes.Buffer
	piece(&cut, stdcopy.Stdout, []byte("hello"))
	piece(&cut, stdcopy.Stdout, []byte("world"))
	out.Reset()
	if _, err := demuxOutput(&out, io.Discard, bytes.NewReader(cut.Bytes()[:cut.Len()-2])); err != nil || out.String() != "hellowor" {
		t.Errorf("cut stream: %q (%v), want what came of it, without error, as StdCopy", out.String(), err)
	}
	unknown := []byte{9, 0, 0, 0, 0, 0, 0, 1, 'x'}
	if _, err := demuxOutput(io.Discard, io.Discard, bytes.NewReader(unknown)); err == nil {
		t.Error("unknown stream: no error")
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }
