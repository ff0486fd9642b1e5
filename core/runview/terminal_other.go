//go:build !unix

package runview

import "io"

// terminalWidth reports that w is not a terminal: outside Unix, amelia run
// writes JSON lines.
func terminalWidth(io.Writer) (int, bool) { return 0, false }
