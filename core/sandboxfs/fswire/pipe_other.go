//go:build !linux

package fswire

import "os"

// Pipe is os.Pipe.
func Pipe() (r, w *os.File, err error) { return os.Pipe() }

// FromPipe: no splice here; the caller copies.
func FromPipe(dst, src *os.File, limit int64) (int64, bool, error) { return 0, false, nil }
