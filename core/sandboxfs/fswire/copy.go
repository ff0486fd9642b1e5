package fswire

import (
	"io"
	"sync"
)

// CopyBuffer is how much Copy moves per read: big streams cost a
// fraction of the system calls io.Copy's 32 KiB steps make.
const CopyBuffer = 1 << 20

var copyBufs = sync.Pool{New: func() any { b := make([]byte, CopyBuffer); return &b }}

// Copy copies src to dst in CopyBuffer steps. It hides the ReaderFrom
// and WriterTo of both (os.File's fall back to 32 KiB steps between
// pipes and files, and io.MultiReader's use 32 KiB too).
func Copy(dst io.Writer, src io.Reader) (int64, error) {
	buf := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(buf)
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *buf)
}
