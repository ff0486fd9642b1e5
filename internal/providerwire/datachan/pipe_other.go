//go:build !linux

package datachan

import "os"

// growPipe: pipes keep their size here.
func growPipe(*os.File) {}
