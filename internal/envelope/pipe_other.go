//go:build !linux

package envelope

import "os"

// growPipe: pipes keep their size here.
func growPipe(*os.File) {}
