//go:build unix && !linux

package hostproc

import "os"

// growPipe is a no-op where pipes cannot be resized.
func growPipe(*os.File) {}
