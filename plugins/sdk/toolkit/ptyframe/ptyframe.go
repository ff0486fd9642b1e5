// Package ptyframe is the input of `amelia-worker pty`, which runs a
// command on a terminal it opens inside the sandbox, for transports that
// carry an exec's streams but no terminal (Daytona's command session): the
// exec's stdin is a sequence of frames, each the terminal's input or its
// new size; its stdout is the terminal's output as it is, and its exit
// code the command's.
//
// A frame is a type byte, a 4-byte big-endian length and that many bytes:
// 'd' is input for the terminal, 'z' its new size (rows and columns, each
// a 2-byte big-endian number).
//
// It imports only the standard library, so the worker can link it; it is
// part of the SDK's optional toolkit (see package toolkit), not of the
// provider contract.
package ptyframe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Size is a terminal's size in character cells.
type Size struct{ Rows, Cols uint16 }

const (
	typeData   = 'd'
	typeResize = 'z'
	headerSize = 5
	// maxFrame bounds a frame's length.
	maxFrame = 64 << 10
)

// Input is the framed stdin of an exec of `amelia-worker pty`: what in
// reads, and every size resize delivers, until Close. It does not end when
// in does: the terminal stays open while its command runs.
type Input struct {
	r      *io.PipeReader
	w      *io.PipeWriter
	mu     sync.Mutex // one frame at a time
	stop   chan struct{}
	closed sync.Once
}

// NewInput frames in (nil: none) and resize (nil: none).
func NewInput(in io.Reader, resize <-chan Size) *Input {
	r, w := io.Pipe()
	x := &Input{r: r, w: w, stop: make(chan struct{})}
	if in != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := in.Read(buf)
				if n > 0 && x.frame(typeData, buf[:n]) != nil {
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	if resize != nil {
		go func() {
			for {
				select {
				case sz := <-resize:
					var p [4]byte
					binary.BigEndian.PutUint16(p[0:], sz.Rows)
					binary.BigEndian.PutUint16(p[2:], sz.Cols)
					if x.frame(typeResize, p[:]) != nil {
						return
					}
				case <-x.stop:
					return
				}
			}
		}()
	}
	return x
}

func (x *Input) frame(t byte, p []byte) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	b := make([]byte, headerSize+len(p))
	b[0] = t
	binary.BigEndian.PutUint32(b[1:], uint32(len(p)))
	copy(b[headerSize:], p)
	_, err := x.w.Write(b)
	return err
}

// Read reads the frames.
func (x *Input) Read(p []byte) (int, error) { return x.r.Read(p) }

// Close ends the frames (EOF to the reader) once the exec is over.
func (x *Input) Close() error {
	x.closed.Do(func() {
		close(x.stop)
		x.w.Close()
	})
	return nil
}

// Decode reads frames from r until it ends, handing the terminal's input
// to data and each new size to resize. It returns nil at the end of r.
func Decode(r io.Reader, data func([]byte) error, resize func(Size)) error {
	var h [headerSize]byte
	buf := make([]byte, maxFrame)
	for {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read a frame: %w", err)
		}
		n := binary.BigEndian.Uint32(h[1:])
		if n > maxFrame {
			return fmt.Errorf("a frame of %d bytes: at most %d", n, maxFrame)
		}
		p := buf[:n]
		if _, err := io.ReadFull(r, p); err != nil {
			return fmt.Errorf("read a frame: %w", err)
		}
		switch h[0] {
		case typeData:
			if err := data(p); err != nil {
				return err
			}
		case typeResize:
			if n != 4 {
				return fmt.Errorf("a size frame of %d bytes, want 4", n)
			}
			resize(Size{Rows: binary.BigEndian.Uint16(p[0:]), Cols: binary.BigEndian.Uint16(p[2:])})
		default:
			return fmt.Errorf("a frame of unknown type %q", h[0])
		}
	}
}
